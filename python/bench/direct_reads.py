"""Direct reads on vs off for a Python refit of ordinary memory (numpy arrays) or of CUDA tensors
(torch, every rank on device 0), in one run.

Four processes on this machine, ranks 0-1 holding TENSORS split along dim 0 and ranks 2-3 wanting
them split along dim 1 (the destination fragments are strided: every row of a fragment is a
piece of a source row). Each configuration joins a fresh session, registers numpy arrays (not
memfd memory, so direct reads go through process_vm_readv), runs STEPS refits and checks every
destination element of the last. On CUDA tensors a direct read is one kernel reading the peer's
allocation through CUDA IPC; off, the bytes are staged through pinned memory and tcp. The two
configurations alternate for ROUNDS rounds (a shared
machine's load then weighs on both alike); prints, per configuration, the median over all refits
(each session's first left out) of the slowest rank's time, and the ratio.

    tools/ferry python python/bench/direct_reads.py [cuda]     # the driver (numpy, or CUDA)
    (internally: direct_reads.py worker RANK PORT DIRECT DEVICE)
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys

import numpy as np

import ferry

TENSORS = {f"w{i}": (2048, 2048) for i in range(4)}  # fp32, 64 MiB in all
SOURCES, DESTINATIONS, STEPS, ROUNDS = 2, 2, 6, 3
DEADLINE_S = 300


def shards() -> tuple[list[ferry.Shard], list[ferry.Shard]]:
    src, dst = [], []
    for name, (rows, cols) in TENSORS.items():
        for r in range(SOURCES):
            part = rows // SOURCES
            src.append(ferry.Shard(name, (rows, cols), np.float32, [r * part, 0], [(r + 1) * part, cols],
                                   r, "params"))
        for r in range(DESTINATIONS):
            part = cols // DESTINATIONS
            dst.append(ferry.Shard(name, (rows, cols), np.float32, [0, r * part], [rows, (r + 1) * part],
                                   SOURCES + r, "weights"))
    return src, dst


def expected(name: str, step: int) -> np.ndarray:
    rows, cols = TENSORS[name]
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + step


def buffers(layout: ferry.Layout, rank: int, device: str) -> dict:
    """Zeroed byte arrays for this rank's buffers: numpy, or torch tensors on `device`."""
    if device == "cpu":
        return {b.name: np.zeros(b.bytes, dtype=np.uint8) for b in layout.buffers(rank)}
    import torch
    return {b.name: torch.zeros(b.bytes, dtype=torch.uint8, device=device)
            for b in layout.buffers(rank)}


def as_numpy(view) -> np.ndarray:
    return view.cpu().numpy() if hasattr(view, "cpu") else view


def write(view, values: np.ndarray) -> None:
    if hasattr(view, "copy_"):
        import torch
        view.copy_(torch.from_numpy(values))
    else:
        view[...] = values


def worker(rank: int, port: int, direct: bool, device: str) -> int:
    """One rank: joins, runs STEPS refits, prints each refit's seconds; 0 when the data matches."""
    src_shards, dst_shards = shards()
    config = {"executor.direct_intra_node": "true" if direct else "false"}
    with ferry.Session(rank=rank, world_size=SOURCES + DESTINATIONS, store=f"127.0.0.1:{port}",
                       token="bench-direct-reads", config=config) as session:
        src, dst = ferry.Layout.from_shards(src_shards), ferry.Layout.from_shards(dst_shards)
        refit = session.refit(src, dst)
        layout = src if rank < SOURCES else dst
        arrays = buffers(layout, rank, device)
        for name, array in arrays.items():
            refit.register(name, array)
        for step in range(STEPS):
            for f in src.fragments(rank):
                box = tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))
                write(ferry.fragment_view(arrays[f.buffer], f, "fp32"), expected(f.tensor, step)[box])
            session.all_gather_shards([])  # a barrier: the sources are filled before anyone runs
            stats = refit.run(timeout=120)
            print(f"step {step} seconds {stats.seconds:.6f} direct_bytes {stats.bytes_read_direct}")
        for f in dst.fragments(rank):
            box = tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))
            if not np.array_equal(as_numpy(ferry.fragment_view(arrays[f.buffer], f, "fp32")),
                                  expected(f.tensor, STEPS - 1)[box]):
                print(f"rank {rank}: {f.tensor}{box} differs", file=sys.stderr)
                return 1
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_configuration(direct: bool, device: str) -> tuple[list[float], int]:
    """Runs the ranks (killed at the deadline); per refit after the first, the slowest rank's
    time, and the bytes the destination ranks read directly in the last refit."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen([sys.executable, __file__, "worker", str(r), str(port), str(int(direct)),
                               device],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(SOURCES + DESTINATIONS)]
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=DEADLINE_S)
            if p.returncode != 0:
                raise SystemExit(f"a rank failed ({p.returncode}):\n{out}")
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    times = [[float(line.split()[3]) for line in out.splitlines() if line.startswith("step ")]
             for out in outputs]
    direct_bytes = sum(int(out.splitlines()[-1].split()[5]) for out in outputs)
    return [max(t[s] for t in times) for s in range(1, STEPS)], direct_bytes


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "worker":
        return worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5])
    device = "cuda:0" if sys.argv[1:] == ["cuda"] else "cpu"
    total = sum(r * c * 4 for r, c in TENSORS.values())
    times = {True: [], False: []}
    read = {}
    for _ in range(ROUNDS):
        for direct in (True, False):
            refits, read[direct] = run_configuration(direct, device)
            times[direct] += refits
    median = {direct: statistics.median(t) for direct, t in times.items()}
    for direct in (True, False):
        print(f"{device}: direct reads {'on ' if direct else 'off'}: {median[direct] * 1e3:8.1f} ms per refit of "
              f"{total >> 20} MiB ({total / median[direct] / 2**30:5.2f} GiB/s), "
              f"{read[direct] >> 20} MiB read directly; refits (ms): "
              f"{' '.join(str(round(t * 1e3)) for t in times[direct])}")
    print(f"ratio off/on: {median[False] / median[True]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
