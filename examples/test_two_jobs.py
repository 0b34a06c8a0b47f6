"""Runs examples/two_jobs.py: a trainer job and an engine job launched apart, meeting through the
store address and token only; every rank must report every step (each engine element checked)."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "two_jobs.py")


def test_two_jobs_meet_through_the_store_and_token():
    done = subprocess.run([sys.executable, EXAMPLE, "--steps", "2", "--deadline", "100"],
                          capture_output=True, text=True, timeout=130)
    assert done.returncode == 0, done.stdout + done.stderr
    for job in ("trainer", "engine"):
        for rank in (0, 1):
            assert f"{job} rank {rank} step 1: ok" in done.stdout, done.stdout + done.stderr
