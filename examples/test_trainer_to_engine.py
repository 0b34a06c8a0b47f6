"""Runs examples/trainer_to_engine.py (four processes, killed at its deadline) and checks that both
engine replicas matched the trainer's logits after every step: on CPU tensors, and on CUDA tensors
where torch sees a GPU (skipped visibly elsewhere)."""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the trainer -> engine example needs torch (python3-torch)")

EXAMPLE = os.path.join(os.path.dirname(__file__), "trainer_to_engine.py")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_engine_logits_match_the_trainer_after_every_step(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch: the example's CUDA run is not exercised")
    done = subprocess.run([sys.executable, EXAMPLE, "--steps", "3", "--deadline", "150",
                           "--device", device], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (2, 3):
        for step in range(3):
            line = next((l for l in done.stdout.splitlines()
                         if l.startswith(f"engine rank {rank} step {step}:")), None)
            assert line is not None and "logits" in line, done.stdout + done.stderr
