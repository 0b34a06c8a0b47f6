"""Multi-process refits: one Python process per rank (refit_worker.py), joined through ferry's TCP
store on 127.0.0.1, 2 -> 2 and 4 -> 2, on numpy arrays and CPU torch tensors, three steps each,
every destination element checked by the ranks themselves. Children are killed at the deadline."""

import os

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
    for r in results:
        assert f"rank {r.rank} step 2: ok" in r.output, r.output
