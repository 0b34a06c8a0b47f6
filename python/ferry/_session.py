"""ferry.Session and ferry.Refit: joining the ranks of a refit and running a plan, step after
step, on arrays the caller owns (zero-copy): numpy arrays, torch tensors on the CPU or a CUDA
device, and CUDA or host arrays of other libraries through __cuda_array_interface__ or DLPack.

Blocking and the GIL: Session(...) / Session.from_env wait for every rank (deadline.connect);
Refit.run waits for this rank's part of the plan (deadline.refit, or `timeout`). Both release the
GIL while they wait. A Session and its Refits are driven by one thread at a time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Mapping

from . import _ferry
from ._arrays import array_memory, dtype_matches, dtype_name
from ._layout import BlockScaled, Layout, Shard, layout_entry
from ._plan import Plan, Stats



def _stream_handle(stream: Any) -> int | None:
    """The cudaStream_t of a torch.cuda.Stream (.cuda_stream), a CuPy stream (.ptr) or an int."""
    if stream is None:
        return None
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            stream = getattr(stream, attribute)
            break
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise TypeError(f"stream must be a torch.cuda.Stream, a CuPy stream or a non-negative "
                        f"cudaStream_t handle, got {stream!r}")
    return stream


class Session:
    """One process's membership in a group of ranks: the rendezvous store (hosted by rank 0),
    the communicator with its transports, and the configuration.

    Session(rank=, world_size=, store="host:port", token=) joins explicitly; rank 0 listens on
    the store's port, unless `store_external`: then a store served by a process of its own
    (`ferry store --port P`, the same FERRY_TOKEN) is there, and rank 0 is an ordinary rank whose
    death does not take the store with it. `config`: None, a YAML file or a dict of options
    (`ferry config` lists them), applied over FERRY_* variables. `nodes`: the node of each rank
    (default: by host name)."""

    def __init__(self, rank: int, world_size: int, store: str, token: str = "",
                 config: str | Mapping[str, Any] | None = None, local_rank: int | None = None,
                 local_world_size: int | None = None, nodes: list[int] | None = None,
                 store_external: bool = False, _impl: Any = None):
        if _impl is None:
            host, sep, port = store.rpartition(":")
            if not sep or not port.isdigit():
                raise ValueError(f"store must be 'host:port', got {store!r}")
            _impl = _ferry.Session.join(
                rank, world_size, host, int(port), token, config,
                rank if local_rank is None else local_rank,
                world_size if local_world_size is None else local_world_size, nodes or [],
                store_external)
        self._impl = _impl

    @classmethod
    def from_env(cls, config: str | Mapping[str, Any] | None = None) -> "Session":
        """Joins as the launcher says: torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
        Open MPI (OMPI_COMM_WORLD_*), Slurm (SLURM_*); FERRY_STORE_ADDR/FERRY_STORE_PORT and
        FERRY_TOKEN override. Raises FerryError naming a missing variable."""
        return cls(0, 0, "", _impl=_ferry.Session.from_env(config))

    @property
    def rank(self) -> int:
        """This process's rank in the session, from 0."""
        return self._impl.rank

    @property
    def world_size(self) -> int:
        """The number of ranks in the session."""
        return self._impl.world_size

    def refit(self, src: Layout, dst: Layout, strategy: str = "reshard",
              topology: str | None = None, gpus_per_node: int | None = None) -> "Refit":
        """Plans once (with the session's planner options) and binds the plan to this session;
        every rank calls it with the same layouts. The plan's topology (a file, or every rank at
        `gpus_per_node` per node, default: the launcher's local world size) must agree with where
        the ranks really run."""
        for name, layout in (("src", src), ("dst", dst)):
            if not isinstance(layout, Layout):
                raise TypeError(f"{name} must be a ferry.Layout, got {type(layout).__name__}")
        per_node = gpus_per_node or self._impl.local_world_size
        plan_impl = self._impl.plan(src._impl, dst._impl, strategy, topology, per_node)
        return Refit(self, Plan(plan_impl, src, dst))

    def all_gather_shards(self, shards: Iterable[Shard | BlockScaled | Mapping[str, Any]]
                          ) -> list[Shard | BlockScaled]:
        """Every rank's shards (and BlockScaled buffers), in rank order, from each rank's own
        list (its `rank` fields default to this rank): what Layout.from_shards needs, so that
        each rank describes only the tensors it holds. Every rank of the session calls it, in
        the same order as its other gathers. Blocks (GIL released) until all ranks' lists
        arrived or deadline.store passes."""
        mine: list[dict[str, Any]] = []
        for s in (layout_entry(item, self.rank) for item in shards):
            if isinstance(s, BlockScaled):
                mine.append(dataclasses.asdict(s))
            else:
                mine.append({"name": s.name, "shape": list(s.shape),
                             "dtype": dtype_name(s.dtype), "lo": list(s.lo), "hi": list(s.hi),
                             "rank": int(s.rank), "buffer": s.buffer, "transform": s.transform})
        gathered = self._impl.all_gather(json.dumps(mine))
        return [layout_entry(row) for value in gathered for row in json.loads(value)]

    def any_rank(self, flag: bool) -> bool:
        """Whether any rank passed a true `flag`: a vote every rank of the session casts, in the
        same order as its other gathers and votes (two counters in the store a call, whatever
        the world size). Blocks (GIL released) until every rank voted or deadline.store
        passes."""
        if not isinstance(flag, bool):
            raise TypeError(f"any_rank takes a bool, got {type(flag).__name__}")
        return self._impl.any_rank(flag)

    def recreate(self, timeout: float = 60.0) -> None:
        """After a failed run: every rank calls it to replace the transports (a new epoch),
        waiting at most `timeout` seconds (positive) for the others."""
        self._impl.recreate(_seconds("timeout", timeout))

    def finish(self) -> None:
        """The last barrier (when rank 0 hosts the store, it must outlive the others' use of it;
        an external store, FERRY_STORE_EXTERNAL=1, outlives every rank).
        Call before the process exits; `with Session(...) as s:` does."""
        self._impl.finish()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()


class Refit:
    """A plan bound to a session: register this rank's buffers once, then run() every step.

    register() keeps a reference to each array, so its storage stays alive; ferry reads source
    arrays and writes destination arrays in place during run(), and nothing else may write them
    then (host or CUDA). Re-register an array after replacing it."""

    def __init__(self, session: Session, plan: Plan):
        self.session = session
        self.plan = plan
        self._impl = session._impl.bind(plan._impl)
        self._arrays: dict[tuple[str, str], Any] = {}
        rank = session.rank
        self._dtypes = {side: _buffer_dtypes(layout, rank)
                        for side, layout in (("source", plan.source),
                                             ("destination", plan.destination))}
        self._sizes = {side: {b.name: b.bytes for b in layout.buffers(rank)}
                       for side, layout in (("source", plan.source),
                                            ("destination", plan.destination))}

    def register(self, name: str, tensor: Any, side: str | None = None) -> None:
        """This rank's array behind buffer `name` of the source or destination layout (`side`
        is needed only when both layouts have a buffer of that name on this rank): a numpy
        array, a torch tensor on the CPU or a CUDA device, or an array exporting
        __cuda_array_interface__ (CuPy, Numba) or __dlpack__ (JAX, ...). It must be C-contiguous
        and writable, of at least the buffer's size and of its dtype (uint8 for raw bytes; numpy
        holds bf16/fp8 as int16/uint16/uint8). CUDA memory must be ordinary device memory (as
        torch's and CuPy's allocators give), and all of a rank's CUDA arrays on one device."""
        if side not in (None, "source", "destination"):
            raise ValueError(f"buffer {name!r}: side must be 'source' or 'destination', "
                             f"got {side!r}")
        side = side or self._side_of(name)
        if name not in self._sizes.get(side, {}):
            raise KeyError(f"no {side} buffer named {name!r} on rank {self.session.rank}")
        array = array_memory(tensor, f"buffer {name!r}")
        need = self._sizes[side][name]
        if array.nbytes < need:
            raise ValueError(f"buffer {name!r}: the array has {array.nbytes} bytes, the "
                             f"{side} layout needs {need} on rank {self.session.rank}")
        for dtype in self._dtypes[side][name]:
            if not dtype_matches(array, dtype):
                raise TypeError(f"buffer {name!r} holds {dtype} elements, the array is "
                                f"{array.dtype or 'of another dtype'}")
        self._check_one_device(name, side, array.device)
        self._impl.register(side, name, array.address, array.nbytes, array.device)
        self._arrays[(side, name)] = (tensor, array)

    def run(self, timeout: float | None = None, stream: Any = None) -> Stats:
        """Runs this rank's part of the plan; every rank calls it. Blocks (GIL released) until
        done, failed or `timeout` seconds (default: the config's deadline.refit). With CUDA
        arrays it first waits for all work this process queued on their device (any stream), so
        sources written by kernels need no synchronisation; with `stream` (a torch.cuda.Stream,
        a CuPy stream or a cudaStream_t as an int) it waits only for that stream's work, and the
        caller keeps other streams off the arrays meanwhile. On return the destinations are
        written. Raises
        FerryError naming an unregistered buffer or what failed; after a failure call
        session.recreate() on every rank before the next run. The stats include
        bytes_received_by_transport: the plan bytes each transport (and "direct_read") delivered
        to this rank, peer_cuda_mappings: the peers' CUDA allocations and VMM ranges this
        rank keeps mapped for direct reads (one per sender allocation or joined VMM range),
        bytes_read_packed: of bytes_read_direct, those read from senders' packed staging
        (executor.convert_on_sender), and gpu_batches: the GPU work submissions of the run."""
        seconds = 0.0 if timeout is None else _seconds("timeout", timeout)
        return Stats(**self._impl.run(seconds, _stream_handle(stream)))

    def complete_tensors(self) -> list[str]:
        """After run(): the names of the destination tensors this rank holds whose every
        fragment here that run wrote whole. After a failed run these hold the new weights and
        the others may hold old, new or partly written values (reload or refit them); after a
        successful run, every destination tensor of this rank; before any run, none. Each rank
        answers for its own fragments: a tensor sharded over ranks is whole where every one of
        them lists it."""
        return list(self._impl.complete_tensors())

    def run_rest(self, timeout: float | None = None) -> Stats:
        """After a failed run() and session.recreate(), on every rank: moves only what the
        failed run did not write whole. The ranks exchange their complete_tensors() through the
        store, plan the refit again without them (planning here, once per call) and run that on
        the registered arrays, whose sources must still hold what the failed run read. Then
        complete_tensors() lists every destination tensor of the rank again. Raises FerryError
        as run() does (call recreate() and run_rest() again), and for destinations with
        block-scaled (fp8_block) buffers, which need the whole refit."""
        return Stats(**self._impl.run_rest(timeout or 0.0))

    def _check_one_device(self, name: str, side: str, device: int) -> None:
        """One executor drives one CUDA device: a rank's CUDA arrays must share it."""
        for (other_side, other), (_, memory) in self._arrays.items():
            if device >= 0 and memory.device >= 0 and memory.device != device and \
                    (other_side, other) != (side, name):
                raise ValueError(f"buffer {name!r} is on CUDA device {device} but buffer "
                                 f"{other!r} is on device {memory.device}; a rank's CUDA arrays "
                                 "must share one device")

    def _side_of(self, name: str) -> str:
        sides = [s for s in ("source", "destination") if name in self._sizes[s]]
        if len(sides) == 1:
            return sides[0]
        if not sides:
            raise KeyError(f"rank {self.session.rank} has no buffer named {name!r} in either "
                           "layout")
        raise ValueError(f"both layouts have a buffer {name!r} on rank {self.session.rank}; "
                         "pass side='source' or side='destination'")


def _buffer_dtypes(layout: Layout, rank: int) -> dict[str, set[str]]:
    """The dtypes of the elements each of `rank`'s buffers holds: its fragments' and, for a
    block-scaled buffer's scales, fp32 (int32 for packed E8M0 codes)."""
    dtypes = {t.name: t.dtype for t in layout.tensors} | layout.stored_dtypes
    out: dict[str, set[str]] = {}
    for f in layout.fragments(rank):
        out.setdefault(f.buffer, set()).add(dtypes[f.tensor])
    for b in layout.block_scaled:
        if b.rank == rank:
            out[b.scales] = {"int32" if b.scale_fmt == "ue8m0_packed" else "fp32"}
    return out


def _seconds(what: str, value: Any) -> float:
    """`value` as a number of seconds above zero, or a TypeError / ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{what} must be a finite number of seconds above 0, got {value!r}")
    return float(value)
