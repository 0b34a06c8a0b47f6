"""Multi-process refits: one Python process per rank (refit_worker.py), joined through ferry's TCP
store on 127.0.0.1, 2 -> 2 and 4 -> 2, on numpy arrays and CPU torch tensors, three steps each,
every destination element checked by the ranks themselves. All ranks share this machine, so with
the default config the receivers read the senders' arrays directly (process_vm_readv of strided
fragments) unless Yama restricts ptrace. Children are killed at the deadline."""

import os
import re
import subprocess

import pytest

from procs import assert_all_ok, run_ranks

WORKER = os.path.join(os.path.dirname(__file__), "refit_worker.py")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("scenario,ranks", [("2to2", 4), ("4to2", 6)])
def test_refit_across_processes(scenario, ranks, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    results = run_ranks(lambda rank, port: [WORKER, scenario, backend, str(rank), str(port)],
                        ranks, deadline_s=90)
    assert_all_ok(results)
    direct = 0
    for r in results:
        assert f"rank {r.rank} step 2: ok" in r.output, r.output
        step = re.search(r"step 2: ok in \S+ s, (\d+) bytes read directly, (\d+) sent", r.output)
        assert step, r.output
        direct += int(step.group(1))
    if not ptrace_restricted():
        assert direct > 0, "direct reads are on by default in Python sessions"


def test_refit_through_an_external_store():
    """Four ranks meet at a store served by `ferry store`, a process of its own: rank 0 does not
    listen (the store already holds the port), and the refit verifies as with rank 0 hosting."""
    env = dict(os.environ, FERRY_TOKEN="test-refit")
    store = subprocess.Popen(["tools/cli/ferry", "store", "--port", "0", "--bind", "127.0.0.1"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = store.stdout.readline()
        served = re.search(r"serving on 127\.0\.0\.1:(\d+)", line)
        assert served, line
        port = served.group(1)
        results = run_ranks(lambda rank, _: [WORKER, "2to2", "numpy", str(rank), port, "external"],
                            4, deadline_s=90)
        assert_all_ok(results)
        for r in results:
            assert f"rank {r.rank} step 2: ok" in r.output, r.output
    finally:
        store.terminate()
        assert store.wait(timeout=10) == 0


def ptrace_restricted() -> bool:
    """Yama's ptrace_scope >= 1: Python sessions then stage same-node messages by default."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read()) >= 1
    except (OSError, ValueError):
        return False
