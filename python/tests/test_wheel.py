"""The wheel (//python:wheel): its RECORD lists every file with the right sha256 and size, pip
installs it offline into an empty folder, and a fresh interpreter imports ferry from there alone
and plans a refit. Runs where Bazel put the wheel beside the tests (//python:pytest); skipped
visibly elsewhere."""

import base64
import csv
import glob
import hashlib
import io
import os
import subprocess
import sys
import zipfile

import pytest

import ferry

WHEELS = sorted(glob.glob(os.path.join("python", "ferry-*.whl")))
if not WHEELS:
    pytest.skip("no wheel beside the tests (built by bazel build //python:wheel)",
                allow_module_level=True)


def test_record_lists_every_file_with_its_hash():
    with zipfile.ZipFile(WHEELS[-1]) as wheel:
        names = set(wheel.namelist())
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(wheel.read(record).decode())))
        assert {r[0] for r in rows} == names
        for path, digest, size in rows:
            if path == record:
                continue
            data = wheel.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == "sha256=" + expected.decode() and int(size) == len(data), path
        assert "ferry/_ferry.so" in names and "ferry/__init__.py" in names
        assert f"Version: {ferry.__version__}" in wheel.read(
            record.replace("RECORD", "METADATA")).decode()
        plugins = wheel.read(record.replace("RECORD", "entry_points.txt")).decode()
        assert "[vllm.general_plugins]\nferry = ferry.vllm:register" in plugins


def test_pip_installs_it_and_ferry_imports_from_there_alone(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                    "--target", str(target), os.path.abspath(WHEELS[-1])], check=True)
    code = ("import ferry; "
            "src = ferry.Layout.preset('llama-3.1-8b', 'megatron:tp=2', scale='1/64'); "
            "dst = ferry.Layout.preset('llama-3.1-8b', 'vllm:tp=1,dp=2', scale='1/64', "
            "first_rank=2); "
            "print(ferry.__file__, ferry.plan(src, dst).stats.ops > 0)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(target)) and done.stdout.strip().endswith("True"), done.stdout
