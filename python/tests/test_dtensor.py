"""ferry.Layout.from_dtensors on real DTensors: two processes in a gloo process group
(dtensor_worker.py), uneven shards included, checked against torch's own local shards and refitted
from the DTensors' storage. Needs torch with torch.distributed.tensor (>= 2.4; the GPU machine's
2.11); Debian 12's torch 1.13 has none, so this skips there."""

import os

import pytest

from procs import assert_all_ok, free_port, run_ranks

pytest.importorskip("torch.distributed.tensor", reason="this torch has no DTensor")

WORKER = os.path.join(os.path.dirname(__file__), "dtensor_worker.py")


def test_from_dtensors_matches_torchs_shards_and_refits_them():
    gloo_port = free_port()
    results = run_ranks(lambda rank, port: [WORKER, str(rank), str(port), str(gloo_port)], 2,
                        deadline_s=120)
    assert_all_ok(results)
    for r in results:
        assert f"rank {r.rank}:" in r.output and "refit ok" in r.output, r.output
