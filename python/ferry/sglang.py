"""ferry as SGLang's weight loader: a trainer's weights written straight into the parameters of
running SGLang servers, every update, through one ferry plan made at the first.

SGLang (0.5.23) calls a custom loader inside each of its tensor-parallel worker processes when
the trainer asks a server to update its weights from tensors with that load format
(python/sglang/srt/model_executor/model_runner_components/weight_updater.py,
`update_weights_from_tensor`: `custom_loader(model, named_tensors)`); the loader must be named at
launch (`--custom-weight-loader ferry.sglang.load_weights`). What the trainer passes is a small
control tensor, not the weights: the weights go through ferry, each trainer rank sending its
own shards, and land in SGLang's parameters where SGLang's own loaders would put them (ferry's
`sglang:` layouts, checked against SGLang's model classes by //python:sglang_test).

    # SGLang: every server launched with --custom-weight-loader ferry.sglang.load_weights

    # every trainer rank r of M, holding its Megatron shards as {buffer name: tensor}
    spec = ferry.sglang.RefitSpec(store="trainer0:29600", num_trainer_ranks=M, token="job-7",
                                  model="/ckpt/cfg", source="megatron:tp=4,pp=2",
                                  destination="sglang:tp=8,engines=2")
    sender = ferry.sglang.Sender(spec, rank=r)   # joins at its first send
    for step in ...:
        train_step(); sender.register(my_tensors)   # {buffer name: tensor}, sender.buffers()
        if r == 0:
            ferry.sglang.concurrently(
                [lambda k=k: engines[k].update_weights_from_tensor(
                    sender.control(k), load_format=ferry.sglang.LOAD_FORMAT)
                 for k in range(2)], sender.send)
        else:
            sender.send()

The ferry ranks: trainer rank r is ferry rank r (rank 0 hosts the store); server k's rank
(replica d, PP rank p, TP rank t) is num_trainer_ranks + k * (ranks of a server) +
(d * pp + p) * tp + t, as the destination layout numbers them (under attention DP a server is
one replica). Both sides build both layouts
from the same Hugging Face config (`model`, readable by every process) and specs, so nothing else
is exchanged. After each update the loader runs the model's post_load_weights when it has one
(DeepSeek's MLA derives w_kc/w_vc from kv_b_proj there). Quantized servers and draft models are
not supported (the layouts refuse them).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Mapping

import torch

from ._layout import Layout
from ._session import Refit, Session

LOAD_FORMAT = "ferry.sglang.load_weights"
CONTROL = "ferry.sglang.control"
"""The name of the one tensor the trainer passes to update_weights_from_tensor."""


@dataclass(frozen=True)
class RefitSpec:
    """What every rank of the refit needs, the same on all of them but `server` and `round`."""

    store: str
    """"host:port" of ferry's store, hosted by trainer rank 0."""
    num_trainer_ranks: int
    model: str
    """The Hugging Face config.json (or its directory) that both sides' layouts are built from."""
    source: str
    """The trainer's spec, "megatron:..." (its ranks 0 .. num_trainer_ranks - 1)."""
    destination: str
    """Every server's spec, "sglang:...,engines=N" (ferry.sglang_spec of its ServerArgs)."""
    token: str = ""
    config: dict[str, Any] | None = None
    """ferry options for every rank (ferry.Session's `config`)."""
    gpus_per_node: int | None = None
    server: int = 0
    """The server (engine) a control tensor is for."""
    round: int = 0
    """The update's number, from 0: a worker refuses one out of order."""


def _layouts(spec: RefitSpec) -> tuple[Layout, Layout]:
    source = Layout.preset(spec.model, spec.source)
    destination = Layout.preset(spec.model, spec.destination, first_rank=spec.num_trainer_ranks)
    return source, destination


def _world_size(spec: RefitSpec, destination: Layout) -> int:
    return spec.num_trainer_ranks + len(destination.ranks)


def control_tensors(spec: RefitSpec) -> list[tuple[str, torch.Tensor]]:
    """The named tensors for SGLang's update_weights_from_tensor: `spec` as one uint8 tensor."""
    payload = json.dumps(asdict(spec)).encode()
    return [(CONTROL, torch.frombuffer(bytearray(payload), dtype=torch.uint8))]


MAX_CONTROL_BYTES = 1 << 16
"""The largest control tensor a worker reads (a RefitSpec is a few hundred bytes)."""

_FIELD_TYPES = {"store": str, "num_trainer_ranks": int, "model": str, "source": str,
                "destination": str, "token": str, "config": (dict, type(None)),
                "gpus_per_node": (int, type(None)), "server": int, "round": int}


def read_control(named_tensors: Iterable[tuple[str, Any]]) -> RefitSpec:
    """The RefitSpec the trainer sent; ValueError, naming what is wrong, when the tensors hold
    none, another, or one larger than MAX_CONTROL_BYTES or with a field of the wrong type."""
    entries = list(named_tensors)
    if len(entries) != 1 or entries[0][0] != CONTROL:
        names = [name for name, _ in entries][:3]
        raise ValueError(f"{LOAD_FORMAT} takes the one tensor {CONTROL!r} that "
                         f"ferry.sglang.Sender.control makes, got {names}")
    tensor = torch.as_tensor(entries[0][1])
    if tensor.numel() * tensor.element_size() > MAX_CONTROL_BYTES:
        raise ValueError(f"{CONTROL!r} holds {tensor.numel() * tensor.element_size()} bytes, over "
                         f"MAX_CONTROL_BYTES ({MAX_CONTROL_BYTES})")
    raw = bytes(tensor.to("cpu", torch.uint8).numpy().tobytes())
    try:
        fields = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{CONTROL!r} does not hold a ferry.sglang.RefitSpec: {e}") from None
    if not isinstance(fields, dict) or set(fields) - set(_FIELD_TYPES):
        raise ValueError(f"{CONTROL!r} does not hold a ferry.sglang.RefitSpec: fields "
                         f"{sorted(fields) if isinstance(fields, dict) else type(fields).__name__}")
    for name, value in fields.items():
        if not isinstance(value, _FIELD_TYPES[name]) or isinstance(value, bool):
            raise ValueError(f"{CONTROL!r}: field {name} is {value!r}, not of RefitSpec's type")
    try:
        return RefitSpec(**fields)
    except TypeError as e:
        raise ValueError(f"{CONTROL!r} does not hold a ferry.sglang.RefitSpec: {e}") from None


class Sender:
    """A trainer rank of the refit: register() its shards, then send() every update. The first
    send joins the session (rank 0 hosts the store), waits for every server's workers, which join
    at their first update, plans and registers: on rank 0 run the servers' update RPCs alongside
    each send (concurrently). Driven by one thread."""

    def __init__(self, spec: RefitSpec, rank: int) -> None:
        if not 0 <= rank < spec.num_trainer_ranks:
            raise ValueError(f"trainer rank {rank} is not in [0, {spec.num_trainer_ranks})")
        self.spec = spec
        self.rank = rank
        self._source, self._destination = _layouts(spec)
        self._tensors: dict[str, Any] = {}
        self.session: Session | None = None
        self.refit: Refit | None = None
        self.rounds = 0

    def buffers(self) -> list[str]:
        """The names of the buffers this rank sends: what register() wants."""
        return [b.name for b in self._source.buffers(self.rank)]

    def register(self, tensors: Mapping[str, Any]) -> None:
        """This rank's tensor behind each of its buffers (all of them; zero-copy, kept
        referenced). Register again only where a tensor's storage changed."""
        missing = sorted(set(self.buffers()) - set(tensors))
        if missing:
            raise KeyError(f"trainer rank {self.rank}: no tensor for buffers {missing[:5]} "
                           f"({len(missing)} in all)")
        self._tensors = {name: tensors[name] for name in self.buffers()}
        if self.refit is not None:
            self._register_sources()

    def control(self, server: int) -> list[tuple[str, torch.Tensor]]:
        """What to pass to server `server`'s update_weights_from_tensor for the next update."""
        return control_tensors(replace(self.spec, server=server, round=self.rounds))

    def send(self) -> None:
        """Runs this rank's part of the next update (joining and planning first, at the first);
        blocks until it is done."""
        if not self._tensors:
            raise RuntimeError(f"trainer rank {self.rank}: register() its buffers before send()")
        if self.refit is None:
            self.session = Session(self.rank, _world_size(self.spec, self._destination),
                                   self.spec.store, self.spec.token, self.spec.config)
            self.refit = self.session.refit(self._source, self._destination,
                                            gpus_per_node=self.spec.gpus_per_node)
            self._register_sources()
        self.refit.run()
        self.rounds += 1

    def _register_sources(self) -> None:
        for name, tensor in self._tensors.items():
            self.refit.register(name, tensor, side="source")

    def finish(self) -> None:
        """Leaves the session (its last barrier: every rank, workers included, finishes)."""
        if self.session is not None:
            self.session.finish()
        self.session, self.refit = None, None


class _Worker:
    """One SGLang worker's rank of the refit: its session, plan and registered parameters."""

    def __init__(self, model: torch.nn.Module, spec: RefitSpec, rank: int, source: Layout,
                 destination: Layout) -> None:
        self.session = Session(rank, _world_size(spec, destination), spec.store, spec.token,
                               spec.config)
        self.refit = self.session.refit(source, destination, gpus_per_node=spec.gpus_per_node)
        params = dict(model.named_parameters())
        for b in destination.buffers(rank):
            if b.name not in params:
                raise ValueError(f"ferry rank {rank}: the SGLang model has no parameter "
                                 f"{b.name!r} that {spec.destination} gives this rank")
            self.refit.register(b.name, params[b.name].data, side="destination")
        self.rounds = 0

    def receive(self, round_: int) -> None:
        if round_ != self.rounds:
            raise ValueError(f"ferry update {round_} arrived, this worker expects update "
                             f"{self.rounds}")
        self.refit.run()
        self.rounds += 1


_worker: _Worker | None = None


def worker_rank(spec: RefitSpec, destination_ranks_per_server: int, tp_rank: int, tp_size: int,
                dp_rank: int | None, pp_rank: int = 0, pp_size: int = 1,
                attn_dp_size: int = 1) -> int:
    """The ferry rank of SGLang worker (dp_rank, pp_rank, tp_rank) of server `spec.server`: a
    replica is tp_size * pp_size ranks, world rank tp_size * pp_rank + tp_rank inside it
    (SGLang's runtime_context.py spawn_world_rank). SGLang's dp_rank is the replica with
    --dp-size, but under attention DP the rank's attention-DP group inside the one replica
    (managers/data_parallel_controller.py: compute_dp_attention_world_info), which adds no
    ranks."""
    replica = (dp_rank or 0) if attn_dp_size == 1 else 0
    return (spec.num_trainer_ranks + spec.server * destination_ranks_per_server +
            replica * tp_size * pp_size + pp_rank * tp_size + tp_rank)


def load_weights(model: torch.nn.Module, named_tensors: list[tuple[str, Any]]) -> None:
    """SGLang's custom loader (--custom-weight-loader ferry.sglang.load_weights): receives one
    update into `model`'s parameters in place, joining the refit at the first (blocks until
    every rank joined and planned), then runs the model's post_load_weights if it has one."""
    global _worker
    spec = read_control(named_tensors)
    if _worker is None:
        from sglang.srt.runtime_context import get_parallel  # only inside an SGLang worker
        parallel = get_parallel()
        source, destination = _layouts(spec)
        rank = worker_rank(spec, len(destination.ranks) // _engines(spec.destination),
                           parallel.tp_rank, parallel.tp_size, parallel.dp_rank,
                           parallel.pp_rank, parallel.pp_size, parallel.attn_dp_size)
        _worker = _Worker(model, spec, rank, source, destination)
    _worker.receive(spec.round)
    post = getattr(model, "post_load_weights", None)
    if callable(post):
        post()


def shutdown() -> None:
    """Leaves the refit's session from this SGLang worker (its last barrier: every rank
    finishes); call it before the worker process exits."""
    global _worker
    if _worker is not None:
        _worker.session.finish()
    _worker = None


def _engines(destination: str) -> int:
    for item in destination.partition(":")[2].split(","):
        key, _, value = item.partition("=")
        if key.strip() == "engines":
            return int(value)
    return 1


def concurrently(rpcs: list[Callable[[], Any]], work: Callable[[], Any]) -> None:
    """Runs each of `rpcs` (the servers' update calls) on a thread while `work` (this rank's
    send) runs here; raises the first error. When `work` fails the threads are not waited for
    (a server whose peer failed may not answer)."""
    pool = ThreadPoolExecutor(max_workers=max(1, len(rpcs)), thread_name_prefix="ferry-sglang")
    try:
        futures = [pool.submit(rpc) for rpc in rpcs]
        work()
        for f in futures:
            f.result()
    finally:
        pool.shutdown(wait=False)
