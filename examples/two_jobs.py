"""A refit between two separately launched jobs that share only the store address and a token:
how a trainer job and an inference fleet meet.

The trainer job (2 ranks, Megatron TP2 x EP2, expert TP1, of Qwen3-30B-A3B at scale 1/64) and the engine job
(2 ranks, vLLM TP2) are each started by their own launcher, with ranks 0..1 of their own. Both
know the two framework specs; each maps its job rank to a ferry rank (trainer 0-1, engine 2-3)
and joins one ferry session at --store with --token (the trainer's rank 0 hosts the store). The
trainer fills its buffers with a pattern per element and step; the engine checks every element
it receives. numpy only.

    torchrun --nproc-per-node 2 examples/two_jobs.py trainer --store HOST:PORT --token T \
        --gpus-per-node 2                               # on host A (HOST: A's address)
    torchrun --nproc-per-node 2 examples/two_jobs.py engine  --store HOST:PORT --token T \
        --gpus-per-node 2                               # on host B
    tools/ferry python examples/two_jobs.py      # starts both jobs here, as two launchers would
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import zlib

import numpy as np

import ferry
from rank_processes import wait_all

MODEL, SCALE = "qwen3-30b-a3b", "1/64"
TRAINER, ENGINE = "megatron:tp=2,ep=2,etp=1", "vllm:tp=2"  # 2 ranks each
JOB_RANKS = {"trainer": 2, "engine": 2}


def expected(f: ferry.FragmentInfo, shape: tuple[int, ...], step: int) -> np.ndarray:
    """The bf16 bit pattern (uint16) of every element of fragment f's box at `step`."""
    ranges = np.ix_(*[np.arange(lo, hi) for lo, hi in zip(f.lo, f.hi)])
    flat = np.ravel_multi_index(ranges, shape).astype(np.int64)
    seed = zlib.crc32(f.tensor.encode()) & 0xFFFF
    return ((flat * 31 + seed + step * 101) % 65521).astype(np.uint16)


def run(job: str, job_rank: int, store: str, token: str, steps: int, gpus_per_node: int) -> None:
    src = ferry.Layout.preset(MODEL, TRAINER, scale=SCALE)
    dst = ferry.Layout.preset(MODEL, ENGINE, scale=SCALE, first_rank=JOB_RANKS["trainer"])
    if len(src.ranks) != JOB_RANKS["trainer"] or len(dst.ranks) != JOB_RANKS["engine"]:
        raise SystemExit(f"{TRAINER} / {ENGINE} do not give {JOB_RANKS} ranks")
    rank = job_rank + (0 if job == "trainer" else JOB_RANKS["trainer"])
    world = sum(JOB_RANKS.values())
    mine = src if job == "trainer" else dst
    shapes = {t.name: t.shape for t in mine.tensors}
    # The session finds each rank's node by host name; the plan's topology must agree:
    # gpus_per_node 4 puts all four ranks on one node (both jobs on this host), 2 gives each job
    # a node of its own (each job on its own host).
    with ferry.Session(rank=rank, world_size=world, store=store, token=token) as session:
        refit = session.refit(src, dst, gpus_per_node=gpus_per_node)
        buffers = {b.name: np.zeros(b.bytes // 2, np.uint16) for b in mine.buffers(rank)}
        for name, array in buffers.items():
            refit.register(name, array)
        for step in range(steps):
            if job == "trainer":
                for f in src.fragments(rank):
                    view = ferry.fragment_view(buffers[f.buffer], f, "bf16")
                    view[...] = expected(f, shapes[f.tensor], step)
            stats = refit.run()
            if job == "engine":
                for f in dst.fragments(rank):
                    view = ferry.fragment_view(buffers[f.buffer], f, "bf16")
                    if not np.array_equal(view, expected(f, shapes[f.tensor], step)):
                        raise SystemExit(f"engine rank {job_rank} step {step}: {f.tensor} "
                                         f"{f.lo}..{f.hi} differs")
            print(f"{job} rank {job_rank} step {step}: ok, {stats.bytes_received} B received, "
                  f"{stats.bytes_sent} B sent in {stats.seconds * 1e3:.1f} ms", flush=True)


def launch_here(steps: int, deadline_s: float) -> int:
    """Both jobs on this machine: each its own group of processes with RANK/WORLD_SIZE of its own
    (as torchrun sets them), sharing only --store and --token; all killed at the deadline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        store = f"127.0.0.1:{s.getsockname()[1]}"
    procs = []
    for job, ranks in JOB_RANKS.items():
        for job_rank in range(ranks):
            env = dict(os.environ, RANK=str(job_rank), WORLD_SIZE=str(ranks))
            procs.append(subprocess.Popen(
                [sys.executable, __file__, job, "--store", store, "--token", "two-jobs",
                 "--steps", str(steps)], env=env))
    return wait_all(procs, deadline_s, "two_jobs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("job", nargs="?", choices=sorted(JOB_RANKS))
    parser.add_argument("--store", help="host:port of the ferry store (the trainer's rank 0)")
    parser.add_argument("--token", default="", help="shared by both jobs; strangers are refused")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpus-per-node", type=int, default=4,
                        help="ranks per host: 4 with both jobs on one host, 2 with one job each")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds, for all ranks")
    args = parser.parse_args()
    if args.job is None:
        return launch_here(args.steps, args.deadline)
    if not args.store:
        parser.error("--store host:port is required with a job")
    run(args.job, int(os.environ.get("RANK", "0")), args.store, args.token, args.steps,
        args.gpus_per_node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
