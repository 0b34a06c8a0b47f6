"""Waiting for an example's rank processes: each gets the same deadline, stragglers are killed."""

from __future__ import annotations

import subprocess
import sys


def wait_all(procs: list[subprocess.Popen], deadline_s: float, name: str) -> int:
    """Waits for every process; kills those still running after `deadline_s` seconds (saying so
    on stderr as `name`). Returns the largest absolute exit code, 0 when all succeeded."""
    try:
        codes = [p.wait(timeout=deadline_s) for p in procs]
    except subprocess.TimeoutExpired:
        print(f"{name}: ranks still running after {deadline_s} s; killed", file=sys.stderr)
        codes = [1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return max(abs(c) for c in codes)
