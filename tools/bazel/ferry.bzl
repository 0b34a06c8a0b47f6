"""Build macros for ferry's own code.

ferry_cc_library / ferry_cc_binary / ferry_cc_test add the project's warning flags (-Wall -Wextra
-Werror), which apply to ferry's code and never to the system libraries it links.

cuda_library compiles .cu files with the CUDA toolkit's nvcc into an object that cc_library,
cc_binary and cc_test can depend on like any other library; it links the CUDA runtime statically.
"""

FERRY_COPTS = ["-Wall", "-Wextra", "-Werror"]

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90 machine code for Hopper plus compute_90 PTX so newer GPUs JIT-compile it.
CUDA_GENCODE = [
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

def ferry_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = FERRY_COPTS + copts, **kwargs)

def ferry_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = FERRY_COPTS + copts, **kwargs)

def ferry_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        copts = FERRY_COPTS + copts,
        deps = deps + ["@gtest//:gtest_main"],
        **kwargs
    )

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], deps = [], copts = [], visibility = None, **kwargs):
    """Compiles `srcs` (.cu) with nvcc; `hdrs` are the plain C++ headers that expose the kernels.

    The .cu files may include, by workspace-relative path, any header in `hdrs` and any file in
    `nvcc_hdrs` (headers of `deps` that nvcc must see, e.g. "//core/base:status_hdrs"; nvcc runs in a
    sandbox that holds only declared inputs). The result is a cc_library named `name` that links the
    CUDA runtime statically.
    """
    objects = []
    for src in srcs:
        obj = "_" + name + "_" + src.replace("/", "_").replace(".cu", ".pic.o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++20",
                "-O3",
                "-I.",
                "-I$(GENDIR)",
                "-Xcompiler=-fPIC,-Wall,-Wextra",
                "-Werror=all-warnings",
                # EDG flags assignments to [[nodiscard]] class types (status.h); g++ does not.
                "-diag-suppress=2810",
            ] + CUDA_GENCODE + copts + [
                "-c $(location " + src + ")",
                "-o $@",
            ]),
            message = "nvcc " + src,
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        visibility = visibility,
        alwayslink = True,
        **kwargs
    )
