"""The vLLM backend (ferry.vllm) through vLLM's real weight-transfer interface: vLLM 0.33.0 from
PyPI in the environment tools/deps/vllm-venv.sh makes (named by FERRY_VLLM_VENV), its factories
creating ferry's engines, a TP2 Megatron-style trainer (2 processes) refitting two TP2 vLLM
replicas (4 processes), three steps; every worker checks every parameter byte for byte against
what vLLM's loaders make of that step's checkpoint (vllm_worker.py). Once with a Llama built
from vLLM's own layers, once with vLLM's own Qwen3-MoE class under expert parallelism; and the
MoE worker layout of several engine configurations against vLLM's load_weights
(vllm_moe_layout_worker.py). Skipped, saying so, where the environment is missing. Slow: rank
processes import vLLM and torch (about 1-2 minutes each on 2 idle cores, //python:vllm_test);
children are killed at the deadline."""

import os
import re
import subprocess

import pytest

from procs import assert_all_ok, run_ranks

WORKER = os.path.join(os.path.dirname(__file__), "vllm_worker.py")
RANKS, STEPS = 6, 3  # 2 trainer ranks + 2 x TP2 workers; vllm_worker.STEPS


def vllm_python() -> str:
    venv = os.environ.get("FERRY_VLLM_VENV", "")
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(os.path.join(venv, ".ferry-requirements")):
        pytest.skip(f"no vLLM environment at FERRY_VLLM_VENV={venv!r}: tools/deps/vllm-venv.sh "
                    "makes it (.ci/run does)")
    return python


@pytest.mark.parametrize("model,parameters", [("llama", 15), ("qwen3_moe", 21)])
def test_vllm_workers_receive_the_trainers_weights_byte_exact(tmp_path, model, parameters):
    python = vllm_python()
    results = run_ranks(lambda rank, port: [WORKER, str(rank), str(port), str(tmp_path), model],
                        RANKS, deadline_s=600, python=python)
    assert_all_ok(results)
    for r in results[2:]:
        for step in range(STEPS):
            assert re.search(rf"worker rank {r.rank} step {step}: {parameters} parameters "
                             "byte-exact", r.output), r.output
    for r in results[:2]:
        assert f"trainer rank {r.rank} step {STEPS - 1}: sent" in r.output, r.output


def test_moe_worker_layouts_match_vllms_own_loaders(tmp_path):
    python = vllm_python()
    layout_worker = os.path.join(os.path.dirname(__file__), "vllm_moe_layout_worker.py")
    result = subprocess.run([python, layout_worker, str(tmp_path)], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    for case in ("tp=2 dp=1 ep=False: 2 workers", "tp=2 dp=2 ep=False: 4 workers",
                 "tp=4 dp=1 ep=True: 4 workers", "tp=2 dp=2 ep=True: 4 workers"):
        assert f"{case}, 21 parameters each byte-exact" in result.stdout, result.stdout
