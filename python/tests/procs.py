"""Running one Python process per rank for the multi-process tests: a free 127.0.0.1 port for
ferry's TCP store, the children's environment (the package importable), and a deadline after
which every child still running is killed (the tests never hang)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass


def _ephemeral_ports() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port free now and outside the kernel's ephemeral range: the ranks bind it only once they
    have started (seconds later when they import torch or vLLM), and a port the kernel hands out
    for bind(0) could meanwhile go to another test's listener, which the ranks would then dial."""
    low, high = _ephemeral_ports()
    candidates = [p for p in range(10000, 65536) if not low <= p <= high]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        port = rng.choice(candidates)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Finished:
    rank: int
    returncode: int
    output: str


def run_ranks(argv_of_rank, world_size: int, deadline_s: float = 60.0,
              python: str = sys.executable) -> list[Finished]:
    """Starts `world_size` processes (`argv_of_rank(rank, port)` each, run by `python`, default
    this interpreter) and waits for all of them until `deadline_s`; kills every one still running then. Returns
    each rank's exit code and combined output; a killed rank's code is -9."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen([python, *argv_of_rank(rank, port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(world_size)]
    results = []
    try:
        for rank, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                out, _ = p.communicate()
                out += f"\n[killed after the {deadline_s:.0f} s deadline]"
            results.append(Finished(rank, p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def assert_all_ok(results: list[Finished]) -> None:
    failed = [r for r in results if r.returncode != 0]
    assert not failed, "\n".join(f"--- rank {r.rank} exited {r.returncode}:\n{r.output}"
                                 for r in failed)


def run_layout_cases(cases: list, argv_of_case, batch: int, python: str,
                     deadline_s: float = 600.0) -> list[str]:
    """Runs one process a case, `batch` at a time (each `argv_of_case(case)`, run by `python`).
    A case is (model, spec, rank, ...), and its process must exit 0 having printed
    "rank R: N parameters byte-exact". Returns what each case that did not printed."""
    failed = []
    for first in range(0, len(cases), batch):
        group = cases[first:first + batch]
        results = run_ranks(lambda case, _port: argv_of_case(group[case]), len(group),
                            deadline_s=deadline_s, python=python)
        for r in results:
            _, spec, rank = group[r.rank][:3]
            if r.returncode != 0:
                failed.append(f"--- {spec} rank {rank} exited {r.returncode}:\n"
                              f"{r.output[-3000:]}")
            elif f"rank {rank}: " not in r.output or "parameters byte-exact" not in r.output:
                failed.append(f"--- {spec} rank {rank} said no verdict:\n{r.output[-3000:]}")
    return failed
