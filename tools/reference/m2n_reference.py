#!/usr/bin/env python3
"""NVIDIA's NCCL M2N Reshard on the tensors of a ferry refit, timed as `ferry run` times a refit.

    m2n_reference.py --plan DIR/m2n_plan.json [--iterations 5] [--warmup 1] [--timeout 600]
                     [--nccl-library /path/libnccl.so.2]

The plan comes from tools/reference/m2n_layouts.py: the tensors M2N can express, each with its
source and destination mesh, placements and the framework buffer and offset of each rank's block.
This starts one process per rank of the plan's world, rank r on GPU r (NCCL refuses two ranks on
one GPU, so the world must fit the visible GPUs), joins them in one NCCL communicator
(`nccl.core.Communicator.init`, the unique id passed through a torch FileStore) and in a gloo group
for barriers. Each rank allocates its framework buffers on its GPU, fills its source blocks with a
pattern of each element's global index, builds every tensor's descriptors once, and runs every
tensor's `Handle.reshard` inside one `nccl.m2n.group()` per refit on one stream, with one
`nccl.m2n.Handle`. After the warm-ups each refit starts at one instant all ranks agree on (rank 0
picks it a few milliseconds after a barrier; each rank sleeps until it), and a refit's time runs
from that instant to the last rank's end (its stream synchronised), the first start to the last end
also printed; then every destination block is compared with the pattern. Prints one line a refit,
the mean and best, and writes them to --out as JSON; exits 1 when a rank fails, a block differs,
or the deadline passes (every rank is killed then).

NCCL M2N needs NCCL >= 2.30.5 (its library calls ncclPutSignal and ncclWaitSignal). Where the
machine's NCCL is older, --nccl-library names a newer libnccl.so.2, which every rank preloads
(LD_PRELOAD) so that torch and nccl.m2n load that one. Its kernels move every byte with GIN puts
(GPU-initiated networking, NCCL's device API: contrib/nccl_m2n/src/reshard_user_window.cu in
NVIDIA/nccl 2.30.7), so its device communicator asks for GIN, and NCCL grants that only where a
GIN-capable RDMA NIC is present (src/dev_runtime.cc: "User requested GIN but not all ranks in the
communicator support GIN"): on a host whose GPUs are joined by NVLink alone M2N does not run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

PATTERN_MULTIPLIER = 2654435761


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plan", required=True, help="m2n_plan.json from m2n_layouts.py")
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600, help="seconds before every rank is killed")
    p.add_argument("--nccl-library", default="", help="libnccl.so.2 to preload in every rank")
    p.add_argument("--out", default="", help="write the result as JSON here")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--rendezvous", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args) -> int:
    """Starts the world's ranks, waits for them within the deadline, kills them all past it."""
    with open(args.plan, encoding="utf-8") as f:
        world = int(json.load(f)["world"])
    import torch  # after reading the plan: a bad plan fails without starting CUDA

    gpus = torch.cuda.device_count()
    if world < 1 or world > gpus:
        print(f"m2n_reference: the plan's world is {world} ranks, this machine shows {gpus} GPU(s); "
              "NCCL needs one GPU a rank", file=sys.stderr)
        return 1
    # NCCL's warnings name what M2N's device communicator lacks (GIN, below) where M2N's own error
    # says only "invalid argument".
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    env.setdefault("NCCL_DEBUG", "WARN")
    if args.nccl_library:
        env["LD_PRELOAD"] = os.path.abspath(args.nccl_library)
    rendezvous = tempfile.mkdtemp(prefix="m2n_reference_")
    base = [sys.executable, os.path.abspath(__file__), "--plan", args.plan, "--iterations",
            str(args.iterations), "--warmup", str(args.warmup), "--rendezvous", rendezvous,
            "--out", args.out]
    procs = [subprocess.Popen(base + ["--rank", str(r)], env=env) for r in range(world)]
    deadline = time.monotonic() + args.timeout
    failed = False
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
            failed = True
            break
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    codes = [p.returncode for p in procs]
    if failed or any(codes):
        reason = "deadline passed" if time.monotonic() > deadline else "a rank failed"
        print(f"m2n_reference: {reason}; exit codes by rank: {codes}", file=sys.stderr)
        return 1
    return 0


def fill_pattern(view, shape, lo, tensor_shape, tensor_index):
    """Writes into `view` (int elements of the block) each element's global index pattern."""
    import torch

    index = torch.zeros(shape, dtype=torch.int64, device=view.device)
    stride = 1
    for d in reversed(range(len(tensor_shape))):
        coord = torch.arange(lo[d], lo[d] + shape[d], dtype=torch.int64, device=view.device)
        index += (coord * stride).view([-1 if k == d else 1 for k in range(len(shape))])
        stride *= tensor_shape[d]
    bits = view.element_size() * 8
    values = (index * PATTERN_MULTIPLIER + tensor_index * 97) & ((1 << min(bits, 62)) - 1)
    view.copy_(values.to(view.dtype))


def int_view(buffer, offset, shape, elem):
    import torch

    kind = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[elem]
    return buffer[offset:offset + math.prod(shape) * elem].view(kind).view(shape)


class RankRun:
    """One rank's buffers, communicator and reshard calls."""

    def __init__(self, plan, rank, rendezvous):
        import torch
        import torch.distributed as dist
        from nccl import core as nccl

        self.plan, self.rank, self.world = plan, rank, int(plan["world"])
        torch.cuda.set_device(rank)
        store = dist.FileStore(os.path.join(rendezvous, "store"), self.world)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=self.world)
        uid = [nccl.get_unique_id().as_bytes if rank == 0 else None]
        dist.broadcast_object_list(uid, src=0)
        self.comm = nccl.Communicator.init(nranks=self.world, rank=rank,
                                           unique_id=nccl.UniqueId.from_bytes(uid[0]))
        self.stream = torch.cuda.Stream()
        self.buffers = {side: {name: torch.zeros(size, dtype=torch.uint8, device="cuda")
                               for name, size in plan[side + "_buffers"].get(str(rank), {}).items()}
                        for side in ("src", "dst")}

    def piece(self, tensor, side):
        entry = tensor[side]["pieces"].get(str(self.rank))
        if entry is None:
            return None
        buffer, offset, shape, lo = entry
        from m2n_layouts import DTYPE_BYTES

        return int_view(self.buffers[side][buffer], offset, shape, DTYPE_BYTES[tensor["dtype"]]), shape, lo

    def fill_sources(self):
        for k, t in enumerate(self.plan["tensors"]):
            got = self.piece(t, "src")
            if got is not None:
                fill_pattern(got[0], got[1], got[2], t["shape"], k)

    def describe(self):
        """Every tensor's source and destination descriptors (nccl.m2n.DistTensor), built once
        before the refits are timed, as NCCL's own M2N benchmark builds them; None where this rank
        holds no block of that side."""
        from nccl import m2n
        from m2n_layouts import M2N_DTYPES, REPLICATE

        def side(tensor, name):
            spec, piece = tensor[name], self.piece(tensor, name)
            return m2n.DistTensor(
                piece[0].data_ptr() if piece else None, next(iter(spec["pieces"].values()))[2],
                M2N_DTYPES[tensor["dtype"]], mesh=m2n.Mesh(spec["mesh"], start_rank=spec["start"]),
                placements=[m2n.Replicate() if p == REPLICATE else m2n.Shard(p) for p in spec["placements"]])

        self.descriptors = [(side(t, "src"), side(t, "dst")) for t in self.plan["tensors"]]

    def reshard_all(self, handle):
        """One refit: every tensor's reshard in one M2N group on this rank's stream, then a wait."""
        from nccl import m2n

        with m2n.group():
            for src, dst in self.descriptors:
                handle.reshard(self.comm, src, dst, stream=self.stream.cuda_stream)
        self.stream.synchronize()

    def wrong_blocks(self):
        import torch

        wrong = []
        for k, t in enumerate(self.plan["tensors"]):
            got = self.piece(t, "dst")
            if got is None:
                continue
            expected = torch.empty_like(got[0])
            fill_pattern(expected, got[1], got[2], t["shape"], k)
            if not torch.equal(expected, got[0]):
                wrong.append(t["name"])
        return wrong


def timed_refit(run, handle):
    """One refit from a common instant; returns (instant, start, end) in ns of CLOCK_MONOTONIC."""
    import torch.distributed as dist

    dist.barrier()
    instant = [time.monotonic_ns() + 5_000_000 if run.rank == 0 else None]
    dist.broadcast_object_list(instant, src=0)
    while time.monotonic_ns() < instant[0]:
        time.sleep(max(0.0, (instant[0] - time.monotonic_ns()) * 1e-9 - 2e-4))
    start = time.monotonic_ns()
    run.reshard_all(handle)
    return instant[0], start, time.monotonic_ns()


def rank_main(args) -> int:
    import torch.distributed as dist
    from nccl import m2n

    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    run = RankRun(plan, args.rank, args.rendezvous)
    run.fill_sources()
    run.describe()
    handle = m2n.init()
    samples = []
    for i in range(args.warmup + args.iterations):
        sample = timed_refit(run, handle)
        gathered = [None] * run.world
        dist.all_gather_object(gathered, sample)
        if i >= args.warmup:
            samples.append(gathered)
    wrong = run.wrong_blocks()
    all_wrong = [None] * run.world
    dist.all_gather_object(all_wrong, wrong)
    handle.destroy()
    if args.rank == 0:
        report(plan, samples, all_wrong, args.out)
    dist.destroy_process_group()
    return 0 if not any(all_wrong) else 1


def report(plan, samples, all_wrong, out):
    from m2n_layouts import DTYPE_BYTES

    # bytes delivered: every destination block, replicas included
    nbytes = sum(DTYPE_BYTES[t["dtype"]] * math.prod(shape)
                 for t in plan["tensors"] for _, _, shape, _ in t["dst"]["pieces"].values())
    from_instant = [(max(e for _, _, e in s) - s[0][0]) * 1e-9 for s in samples]
    first_to_last = [(max(e for _, _, e in s) - min(b for _, b, _ in s)) * 1e-9 for s in samples]
    spread = [(max(b for _, b, _ in s) - s[0][0]) * 1e-9 for s in samples]
    for i, (t, f) in enumerate(zip(from_instant, first_to_last)):
        print(f"m2n refit {i + 1}: {t * 1e3:.3f} ms from the common instant "
              f"({f * 1e3:.3f} ms first start to last end)")
    mean = sum(from_instant) / len(from_instant)
    best = min(from_instant)
    wrong = sorted({n for w in all_wrong for n in w})
    print(f"m2n reshard: {len(plan['tensors'])} tensors, {nbytes / 2**20:.1f} MiB delivered; "
          f"mean {mean * 1e3:.3f} ms, best {best * 1e3:.3f} ms, {nbytes / best / 1e9:.1f} GB/s at best; "
          f"start spread (mean) {sum(spread) / len(spread) * 1e3:.3f} ms; "
          + ("verified: every destination block holds the pattern" if not wrong
             else f"WRONG: {len(wrong)} tensors differ, first {wrong[0]}"))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"tensors": len(plan["tensors"]), "bytes_delivered": nbytes,
                       "seconds": from_instant, "first_start_to_last_end": first_to_last,
                       "start_spread": spread, "wrong": wrong}, f)


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.rank < 0:
        return launch(args)
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
