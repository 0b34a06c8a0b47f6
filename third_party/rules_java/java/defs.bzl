"""Offline stand-in for @rules_java//java:defs.bzl.

Bazel 4.2's @bazel_tools loads the Java rules from @rules_java while registering its toolchains even
for C++-only builds. These wrappers forward to the native rules; ferry itself builds no Java.
"""

def java_binary(**kwargs):
    native.java_binary(**kwargs)

def java_import(**kwargs):
    native.java_import(**kwargs)

def java_library(**kwargs):
    native.java_library(**kwargs)

def java_runtime(**kwargs):
    native.java_runtime(**kwargs)

def java_toolchain(**kwargs):
    native.java_toolchain(**kwargs)
