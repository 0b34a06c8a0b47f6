"""One rank of the multi-process refit tests (test_refit.py): joins the session through ferry's
TCP store on 127.0.0.1, describes the shards it holds and gathers every rank's into the layouts
(Session.all_gather_shards, ferry.Layout.from_shards), votes twice (Session.any_rank), reads a
value rank 0 replaces between votes (the module's publish and lookup),
registers numpy arrays, CPU torch tensors or CUDA torch tensors (every rank on device 0), runs
the refit for several steps and checks every destination element against the value the source
held and that every tensor the rank holds is reported complete, and prints the bytes read
directly from peers and sent. Exits 0 when all match.

    refit_worker.py SCENARIO BACKEND RANK PORT [external]
    SCENARIO: 2to2 | 4to2, BACKEND: numpy | torch | cuda; `external`: the store at PORT is served
    by a `ferry store` process, not by rank 0
"""

from __future__ import annotations

import sys

import numpy as np

import ferry

# Global tensors: name -> (shape, numpy dtype).
# One source buffer holds them all, in this order (each dtype aligned).
TENSORS = {"e": ((4, 6, 3), np.float64), "w": ((12, 10), np.float32), "b": ((7,), np.int32)}


def rows(n: int, parts: int, i: int) -> tuple[int, int]:
    step = -(-n // parts)
    return min(i * step, n), min((i + 1) * step, n)


def shards(m: int, n: int) -> tuple[list[ferry.Shard], list[ferry.Shard]]:
    """Sources on ranks 0..m-1 split every tensor along dim 0; destinations on m..m+n-1 split
    w along dim 1, e along dim 2 and replicate b."""
    src, dst = [], []
    for name, (shape, dtype) in TENSORS.items():
        for r in range(m):
            lo, hi = rows(shape[0], m, r)
            src.append(ferry.Shard(name, shape, dtype, [lo] + [0] * (len(shape) - 1),
                                   [hi] + list(shape[1:]), r, "params"))
        for r in range(n):
            d = {"w": 1, "b": None, "e": 2}[name]
            lo, hi = [0] * len(shape), list(shape)
            if d is not None:
                lo[d], hi[d] = rows(shape[d], n, r)
            dst.append(ferry.Shard(name, shape, dtype, lo, hi, m + r, "weights_" + name))
    return src, dst


def expected(name: str, step: int) -> np.ndarray:
    shape, dtype = TENSORS[name]
    values = np.arange(np.prod(shape), dtype=np.int64).reshape(shape)
    return (values * (step + 1) + 1000 * step).astype(dtype)


def allocate(layout: ferry.Layout, rank: int, backend: str) -> dict:
    arrays = {}
    for b in layout.buffers(rank):
        if backend in ("torch", "cuda"):
            import torch
            device = "cuda:0" if backend == "cuda" else "cpu"
            arrays[b.name] = torch.zeros(b.bytes, dtype=torch.uint8, device=device)
        else:
            arrays[b.name] = np.zeros(b.bytes, dtype=np.uint8)
    return arrays


def dtype_of(layout: ferry.Layout) -> dict:
    return {t.name: t.dtype for t in layout.tensors}


def as_numpy(view):
    return view.cpu().numpy() if hasattr(view, "numpy") else view


def write(view, values: np.ndarray) -> None:
    """Fills a fragment's view (numpy, or torch on any device) with `values`."""
    if hasattr(view, "copy_"):
        import torch
        view.copy_(torch.from_numpy(np.ascontiguousarray(values)))
    else:
        view[...] = values


def main() -> int:
    scenario, backend, rank, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    external = sys.argv[5:] == ["external"]
    m, n = {"2to2": (2, 2), "4to2": (4, 2)}[scenario]
    src_shards, dst_shards = shards(m, n)
    with ferry.Session(rank=rank, world_size=m + n, store=f"127.0.0.1:{port}",
                       token="test-refit", store_external=external) as session:
        # Each rank describes only the shards it holds; the session gathers everyone's.
        gathered = session.all_gather_shards(
            [s for s in src_shards + dst_shards if s.rank == rank])
        src = ferry.Layout.from_shards([s for s in gathered if s.rank < m])
        dst = ferry.Layout.from_shards([s for s in gathered if s.rank >= m])
        whole = ferry.Layout.from_shards(src_shards)  # what one rank knowing everything builds
        assert sorted(src.fragments()) == sorted(whole.fragments()), "gathered layout differs"
        # A vote: true when one rank says so, false when none does, on every rank.
        votes = (session.any_rank(rank == m + n - 1), session.any_rank(False))
        assert votes == (True, False), f"rank {rank}: votes {votes}"
        # One key a value, replaced round after round: written before a vote, read after it.
        for round_ in range(2):
            if rank == 0:
                session._impl.publish("test/value", f"round {round_}")
            session.any_rank(False)
            seen = session._impl.lookup("test/value")
            assert seen == f"round {round_}".encode(), f"rank {rank}: {seen!r} in {round_}"
            session.any_rank(False)
        refit = session.refit(src, dst)
        arrays = {**allocate(src, rank, backend), **allocate(dst, rank, backend)}
        for name, array in arrays.items():
            refit.register(name, array)
        for step in range(3):
            for f in src.fragments(rank):
                view = ferry.fragment_view(arrays[f.buffer], f, dtype_of(src)[f.tensor])
                box = tuple(slice(l, h) for l, h in zip(f.lo, f.hi))
                write(view, expected(f.tensor, step)[box])
            stats = refit.run(timeout=30)
            for f in dst.fragments(rank):
                view = as_numpy(ferry.fragment_view(arrays[f.buffer], f, dtype_of(dst)[f.tensor]))
                box = tuple(slice(l, h) for l, h in zip(f.lo, f.hi))
                if not np.array_equal(view, expected(f.tensor, step)[box]):
                    print(f"rank {rank} step {step}: {f.tensor}{box} differs", file=sys.stderr)
                    return 1
            carried = sum(stats.bytes_received_by_transport.values())
            if carried != stats.bytes_received + stats.bytes_read_direct:
                print(f"rank {rank} step {step}: transports carried {carried} bytes, received "
                      f"{stats.bytes_received} + {stats.bytes_read_direct} read directly", file=sys.stderr)
                return 1
            # Host buffers map no peer CUDA memory; a rank that read CUDA buffers of other
            # processes keeps their allocations (or joined VMM ranges) mapped.
            mapped = stats.peer_cuda_mappings
            wrong = mapped > 0 if backend != "cuda" else stats.bytes_read_direct > 0 and mapped == 0
            if wrong:
                print(f"rank {rank} step {step}: {mapped} peer CUDA mappings with {backend} buffers "
                      f"and {stats.bytes_read_direct} bytes read directly", file=sys.stderr)
                return 1
            # On executor.convert_on_sender=auto, senders pack only for receivers on another GPU:
            # never on host memory, nor between processes of one GPU (every run of this worker).
            # Host buffers take no GPU work.
            if stats.bytes_read_packed != 0 or (backend != "cuda" and stats.gpu_batches != 0):
                print(f"rank {rank} step {step}: {stats.bytes_read_packed} bytes read from packed slots, "
                      f"{stats.gpu_batches} GPU submissions", file=sys.stderr)
                return 1
            held_bytes = sum(as_numpy(ferry.fragment_view(arrays[f.buffer], f, dtype_of(dst)[f.tensor])).nbytes
                             for f in dst.fragments(rank))
            if stats.bytes_delivered != held_bytes:
                print(f"rank {rank} step {step}: delivered {stats.bytes_delivered} bytes, holds {held_bytes}",
                      file=sys.stderr)
                return 1
            held = sorted({f.tensor for f in dst.fragments(rank)})
            if sorted(refit.complete_tensors()) != held:
                print(f"rank {rank} step {step}: complete tensors {refit.complete_tensors()}, "
                      f"holds {held}", file=sys.stderr)
                return 1
            print(f"rank {rank} step {step}: ok in {stats.seconds:.4f} s, "
                  f"{stats.bytes_read_direct} bytes read directly, {stats.bytes_sent} sent")
        # Nothing is missing after a successful run: run_rest() moves no byte.
        rest = refit.run_rest(timeout=30)
        moved = rest.bytes_received + rest.bytes_read_direct + rest.bytes_sent
        if moved or rest.bytes_delivered or sorted(refit.complete_tensors()) != held:
            print(f"rank {rank}: run_rest after a success moved {moved} bytes", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
