"""The vLLM backend (ferry.vllm) through vLLM's real weight-transfer interface: vLLM 0.33.0 from
PyPI in the environment tools/deps/vllm-venv.sh makes (named by FERRY_VLLM_VENV), its factories
creating ferry's engines, a TP2 Megatron-style trainer (2 processes) refitting two TP2 vLLM
replicas (4 processes) built from vLLM's own layers, three steps; every worker checks every
parameter byte for byte against what vLLM's loaders make of that step's checkpoint
(vllm_worker.py). Skipped, saying so, where the environment is missing. Slow: six rank
processes import vLLM and torch (about 1-2 minutes on 2 idle cores, //python:vllm_test);
children are killed at the deadline."""

import os
import re

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


def test_vllm_workers_receive_the_trainers_weights_byte_exact(tmp_path):
    python = vllm_python()
    results = run_ranks(lambda rank, port: [WORKER, str(rank), str(port), str(tmp_path)],
                        RANKS, deadline_s=600, python=python)
    assert_all_ok(results)
    for r in results[2:]:
        for step in range(STEPS):
            assert re.search(rf"worker rank {r.rank} step {step}: 15 parameters byte-exact",
                             r.output), r.output
    for r in results[:2]:
        assert f"trainer rank {r.rank} step {STEPS - 1}: sent" in r.output, r.output
