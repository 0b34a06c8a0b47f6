"""One rank of test_dtensor.py: two processes in a gloo process group build real torch DTensors
(uneven Shard(0) and Shard(1) on a 1-d mesh, Replicate(), and [Replicate(), Shard(0)] on a 1x2
mesh) from known global values, describe them with ferry.Layout.from_dtensors, and check every
fragment this rank holds against torch's own local shard (the values, so the boxes must be the ones
torch.chunk cut). Then a ferry session of the same two ranks refits the DTensors' local tensors,
registered in place, into full copies of every tensor on both ranks, checked element by element.

    dtensor_worker.py RANK FERRY_STORE_PORT GLOO_PORT
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

import ferry

# name -> (global shape, placements on the 1-d mesh, or on the 1x2 mesh when `grid`)
TENSORS = {"w": ((7, 6), [Shard(0)], False), "v": ((4, 5), [Shard(1)], False),
           "b": ((6,), [Replicate()], False), "m": ((5, 4), [Replicate(), Shard(0)], True)}


def global_value(name: str) -> torch.Tensor:
    shape = TENSORS[name][0]
    offset = 1000 * list(TENSORS).index(name)
    return torch.arange(offset, offset + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)


def main() -> int:
    rank, store_port, gloo_port = (int(a) for a in sys.argv[1:4])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{gloo_port}", rank=rank,
                            world_size=2)
    line, grid = DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [[0, 1]])
    dtensors = {name: distribute_tensor(global_value(name), grid if on_grid else line, placements)
                for name, (_, placements, on_grid) in TENSORS.items()}
    src = ferry.Layout.from_dtensors(dtensors)
    for f in src.fragments(rank):
        local = dtensors[f.tensor].to_local()
        box = tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))
        if not torch.equal(global_value(f.tensor)[box], local):
            print(f"rank {rank}: {f.tensor} box {f.lo}..{f.hi} is not torch's local shard "
                  f"{tuple(local.shape)}", file=sys.stderr)
            return 1
    dst = ferry.Layout.from_shards([ferry.Shard(n, s, "fp32", [0] * len(s), s, r, "full_" + n)
                                    for n, (s, _, _) in TENSORS.items() for r in (0, 1)])
    full = {n: torch.zeros(s) for n, (s, _, _) in TENSORS.items()}
    with ferry.Session(rank=rank, world_size=2, store=f"127.0.0.1:{store_port}",
                       token="dtensor") as session:
        refit = session.refit(src, dst)
        for name, t in dtensors.items():
            refit.register(name, t.to_local())  # the DTensor's own storage, zero-copy
            refit.register("full_" + name, full[name])
        refit.run(timeout=30)
    for name, tensor in full.items():
        if not torch.equal(tensor, global_value(name)):
            print(f"rank {rank}: refitted {name} differs", file=sys.stderr)
            return 1
    print(f"rank {rank}: {len(src.fragments(rank))} DTensor fragments match torch's shards; "
          "refit ok")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
