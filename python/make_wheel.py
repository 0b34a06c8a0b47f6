"""Builds the ferry wheel (PEP 427) from the assembled package (//python:site): the pure-Python
files and the compiled _ferry module, with METADATA, WHEEL, entry_points.txt (vLLM's plugin hook)
and RECORD (sha256 of every file) in ferry-VERSION.dist-info. The tag is the running interpreter's (cpXY-cpXY-PLATFORM): run it with
the interpreter the extension was built for. The wheel links UCX and libfabric from the system
(Debian's libucx0 and libfabric1), so it is a platform wheel for machines like this one, not a
manylinux one.

    make_wheel.py VERSION OUT.whl site/ferry/FILE...
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import sysconfig
import zipfile

SUMMARY = "Move sharded tensors between groups of ranks laid out differently (RL weight refit)"


def tag() -> str:
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{python}-{python}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def metadata(version: str) -> dict[str, bytes]:
    info = f"ferry-{version}.dist-info"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: ferry\nVersion: {version}\n"
                             f"Summary: {SUMMARY}\nRequires-Python: =={python}.*\n"
                             "Requires-Dist: numpy\n").encode(),
        f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: ferry make_wheel.py\n"
                          f"Root-Is-Purelib: false\nTag: {tag()}\n").encode(),
        # vLLM loads its general plugins in every process (vllm/plugins/__init__.py,
        # load_general_plugins): this one registers the "ferry" weight-transfer backend.
        f"{info}/entry_points.txt": b"[vllm.general_plugins]\nferry = ferry.vllm:register\n",
    }


def main() -> int:
    version, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not out.endswith(f"-{tag()}.whl"):
        sys.exit(f"make_wheel: {out} does not end in this interpreter's tag -{tag()}.whl")
    entries = {f"ferry/{os.path.basename(f)}": open(f, "rb").read() for f in files}
    entries.update(metadata(version))
    record = f"ferry-{version}.dist-info/RECORD"
    lines = [record_line(path, data) for path, data in entries.items()] + [f"{record},,"]
    entries[record] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for path, data in entries.items():
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
