"""The link line of one Bazel CppLink action (`bazel aquery --output=jsonproto` on stdin) made
portable for tools/device/python_gpu.sh: the module's own objects (python/_objs/) and the output
are dropped, as are this machine's linker choices (gold and its --start-lib groups, -B); every
object and archive named is copied from the execution root into the output folder, and the line
names the copies by their path under it. Prints the arguments, one a line.

    link_inputs.py EXECUTION_ROOT OUT_DIR < aquery.json > link.args
"""

import json
import os
import shutil
import sys

DROPPED = {"-fuse-ld=gold", "-Wl,--start-lib", "-Wl,--end-lib", "-B/usr/bin", "-shared",
           "-pass-exit-codes"}


def arguments(execroot: str) -> list[str]:
    """The link's arguments after the compiler driver. Where Bazel wrote them to a params file
    (the last argument, "@path"), that file holds the whole line and the rest repeats part of it."""
    actions = json.load(sys.stdin)["actions"]
    if len(actions) != 1:
        sys.exit(f"link_inputs: expected one link action, got {len(actions)}")
    args = actions[0]["arguments"][1:]
    params = [a for a in args if a.startswith("@")]
    if params:
        with open(os.path.join(execroot, params[-1][1:])) as f:
            return [line.strip() for line in f if line.strip()]
    return args


def main() -> int:
    execroot, dest = sys.argv[1], sys.argv[2]
    args = arguments(execroot)
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        if arg == "-o":
            skip_next = True
            continue
        if arg in DROPPED or "/python/_objs/" in arg:
            continue
        source = os.path.join(execroot, arg)
        if not arg.startswith("-") and os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(dest, arg)), exist_ok=True)
            shutil.copyfile(source, os.path.join(dest, arg))
            arg = os.path.join("link", arg)
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
