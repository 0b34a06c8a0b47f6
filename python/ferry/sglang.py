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
                [lambda k=k: ferry.sglang.update_server(urls[k], sender.control(k))
                 for k in range(2)], sender.send)   # urls: "http://host:port" of each server
        else:
            sender.send()

update_server runs SGLang's weight-update session around the update: SGLang 0.5.23 refuses
update_weights_from_tensor outside begin_weight_update() / end_weight_update()
(managers/scheduler_components/weight_updater.py), and its end re-runs the quantization
methods' process_weights_after_loading (model_loader/loader.py, postprocess_weights). To a URL
it posts the control by value, so servers may run on any node.

The ferry ranks: trainer rank r is ferry rank r (rank 0 hosts the store); server k's rank
(PP rank p, TP rank t) is num_trainer_ranks + k * (ranks of a server) + p * tp + t, as the
destination layout numbers them. A server must be one replica (`dp=1`; attention DP is fine):
SGLang 0.5.23 refuses update_weights_from_tensor with --dp-size > 1
(managers/tokenizer_control_mixin.py), so run replicas as servers of their own (`engines=`).
Both sides build both layouts
from the same Hugging Face config (`model`, readable by every process) and specs; what the
servers add is where their experts are. Physical expert p of a server holds logical expert p
mod E until --init-expert-location places them elsewhere or EPLB (--enable-eplb) moves them
while it serves; each server's leading worker publishes its map when the refit plans
(ferry._sglang_eplb), and under EPLB every rank votes before each update whether a server's
experts moved since the plan, all of them planning again when one did. After each update the
loader runs the model's post_load_weights when it has one (DeepSeek's MLA derives w_kc/w_vc
from kv_b_proj there). DeepSeek-V3's NextN draft (mtp=1 in the destination) is updated with
its target: on the last PP stage, the only one with a draft, SGLang hands the loader the target
and then the draft, and the update lands at the draft's call.

An FP8 block-quantized checkpoint (DeepSeek-V3's quantization_config: fp8, 128x128 blocks) is
served as loaded, with the destination's quant=fp8_block: the trainer sends bf16 and ferry
quantizes each rank's 128x128 blocks into the FP8 weights and their float32 weight_scale_inv as
it writes them. That is what SGLang holds on Hopper; where it requantized the scales to UE8M0 for
DeepGEMM (SM100/SM120) the worker refuses it (check_as_loaded). Other quantizations and
other draft models are not supported (the layouts refuse them; a loader handed a model it does
not expect refuses it), nor are backends that rebind parameters after loading (a worker refuses
an update once a parameter it writes is no longer where it was registered), nor elastic EP,
which adds physical experts while serving (the layout refuses a map wider than the spec's).
"""

from __future__ import annotations

import base64
import json
import logging
import pickle
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Mapping

import torch

from . import _sglang_eplb as eplb
from ._arrays import moved_parameters, param_storage
from ._layout import Layout
from ._session import Refit, Session

logger = logging.getLogger("ferry.sglang")

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
    if _spec_count(spec.destination, "dp") > 1:
        raise ValueError(f"{spec.destination}: a server of several replicas (dp > 1) cannot be "
                         "updated from tensors: SGLang 0.5.23 asserts dp_size == 1 in "
                         "update_weights_from_tensor (managers/tokenizer_control_mixin.py); run "
                         "each replica as a server of its own (engines=N)")
    if "eplb_map" in spec.destination:
        raise ValueError(f"{spec.destination}: ferry.sglang reads the servers' EPLB maps from "
                         "the servers themselves; leave eplb_map out of the destination")
    source = Layout.preset(spec.model, spec.source)
    destination = Layout.preset(spec.model, spec.destination, first_rank=spec.num_trainer_ranks)
    return source, destination


@dataclass
class _Plan:
    """One plan of the refit and whether any server runs EPLB (`eplb`: then every rank votes
    before each update whether experts moved)."""

    refit: Refit
    eplb: bool


def _plan(session: Session, spec: RefitSpec, source: Layout, mine: str | None, runs_eplb: bool
          ) -> tuple[_Plan, dict[int, dict[str, Any]]]:
    """Every rank makes it together, trainer ranks and workers alike: each server's leading
    worker publishes its map (`mine`, eplb.contribution; None on the other ranks), every rank
    votes whether its server runs EPLB and then reads every server's map, builds the destination
    with them and plans. Returns the plan and the maps that differ from SGLang's initial
    placement, by server (eplb.gathered_maps), which the caller need not keep.

    One store key a server serves every plan, replaced rather than added to, so that planning
    again at every EPLB rebalance leaves the store no larger: a leading worker replaces its map
    only after the vote that precedes a re-plan (Sender.send, _Worker._follow_experts), which
    every rank reaches after reading the maps of the plan before; and every rank reads only
    after this plan's vote, which follows every leading worker's publish."""
    engines = _spec_count(spec.destination, "engines")
    if mine is not None:
        session._impl.publish(f"sglang/eplb_map/{spec.server}", mine)
    runs = session.any_rank(runs_eplb)
    maps = eplb.gathered_maps([session._impl.lookup(f"sglang/eplb_map/{k}")
                               for k in range(engines)])
    document = eplb.maps_document(maps, engines, _spec_count(spec.destination, "redundant", 0),
                                  spec.destination)
    destination = eplb.destination(spec.model, spec.destination, spec.num_trainer_ranks, document)
    return _Plan(session.refit(source, destination, gpus_per_node=spec.gpus_per_node), runs), maps


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
        self.plan: _Plan | None = None
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
        if self.plan is not None:
            self._register_sources()

    def control(self, server: int) -> list[tuple[str, torch.Tensor]]:
        """What to pass to server `server`'s update_weights_from_tensor for the next update."""
        return control_tensors(replace(self.spec, server=server, round=self.rounds))

    def send(self) -> None:
        """Runs this rank's part of the next update (joining and planning first, at the first;
        planning again with every rank when a server's EPLB moved experts); blocks until it is
        done."""
        if not self._tensors:
            raise RuntimeError(f"trainer rank {self.rank}: register() its buffers before send()")
        if self.plan is None:
            self.session = Session(self.rank, _world_size(self.spec, self._destination),
                                   self.spec.store, self.spec.token, self.spec.config)
            self._replan()
        elif self.plan.eplb and self.session.any_rank(False):  # the servers vote: moved?
            if self.rank == 0:
                logger.info("ferry.sglang: EPLB moved experts on a server; planning again")
            self._replan()
        self.plan.refit.run()
        self.rounds += 1

    def _replan(self) -> None:
        self.plan, _ = _plan(self.session, self.spec, self._source, None, False)
        self._register_sources()

    def _register_sources(self) -> None:
        for name, tensor in self._tensors.items():
            self.plan.refit.register(name, tensor, side="source")

    def finish(self) -> None:
        """Leaves the session (its last barrier: every rank, workers included, finishes)."""
        if self.session is not None:
            self.session.finish()
        self.session, self.plan = None, None


class _Worker:
    """One SGLang worker's rank of the refit: its session, plan and registered parameters.

    Where a worker holds a NextN draft (a destination with mtp=1, on the last PP stage: SGLang's
    managers/scheduler.py gives other stages no draft worker) SGLang hands the loader each update
    twice, the target model and then the draft (managers/scheduler_components/weight_updater.py
    _select_runners); the target's call only checks, and the draft's runs the plan into both,
    registering the draft's parameters at its first."""

    def __init__(self, model: torch.nn.Module, spec: RefitSpec, rank: int, source: Layout,
                 destination: Layout, holds_draft: bool, leads: bool) -> None:
        self.model, self.draft = model, None
        self.rank, self.destination = rank, spec.destination
        self.spec, self.source, self.leads = spec, source, leads
        self.session = Session(rank, _world_size(spec, destination), spec.store, spec.token,
                               spec.config)
        self.placement = eplb.current_map()
        self.plan = self._plan()
        self.bound: list[tuple[str, torch.nn.Parameter, tuple]] = []
        self.unbound = self._bind(model, [b.name for b in destination.buffers(rank)])
        self.draft_expected = holds_draft
        if self.unbound and not self.draft_expected:
            self._missing(self.unbound)
        self.rounds, self.pending = 0, None

    def _plan(self) -> _Plan:
        """The plan, with every rank, for the experts where they are now (self.placement): the
        server's leading rank (PP rank 0, TP rank 0) publishes its map, "" where it is SGLang's
        initial placement; every rank checks that the plan's map of its server is its own."""
        server = self.spec.server
        plan, maps = _plan(self.session, self.spec, self.source,
                           eplb.contribution(server, self.placement) if self.leads else None,
                           self.placement is not None and eplb.eplb_enabled())
        planned = maps.get(server)
        if self.placement is not None and (
                planned["map"] != self.placement.tolist() if planned is not None
                else not eplb.is_initial(self.placement, eplb.num_logical_experts())):
            raise ValueError(f"ferry rank {self.rank}: its EPLB map differs from the one server "
                             f"{server}'s leading rank sent; SGLang keeps one map a server")
        return plan

    def load(self, model: torch.nn.Module, round_: int) -> None:
        """One call of the loader: refuses, before any rank waits on this one, an update out of
        order, a model it does not expect, or one whose registered parameters moved (a backend
        that rebinds them after loading); else receives the update (the draft's call, with a
        draft) and runs post_load_weights of the models it wrote."""
        if model is self.model:
            self._check(round_)
            if self.draft_expected:
                self.pending = round_
                return
            self._receive([model])
            return
        if not self.draft_expected or (self.draft is not None and model is not self.draft):
            raise ValueError(f"{LOAD_FORMAT} was handed a second model, "
                             f"{type(model).__name__}: this server runs a draft model "
                             f"(speculative decoding), which {self.destination} does not hold "
                             "(ferry.sglang updates SGLang's NextN draft with mtp=1)")
        if self.pending != round_:
            raise ValueError(f"the draft's update {round_} arrived without the target's")
        if self.draft is None:
            still = self._bind(model, self.unbound)
            if still:
                self._missing(still)
            self.draft = model
        self._check(round_)
        self.pending = None
        self._receive([self.model, model])

    def _bind(self, model: torch.nn.Module, names: list[str]) -> list[str]:
        """Registers each of `names` that `model` has as its parameter (check_as_loaded);
        returns the rest."""
        params = dict(model.named_parameters())
        for name in names:
            if name in params:
                check_as_loaded(name, params[name], self.destination)
                self.plan.refit.register(name, params[name].data, side="destination")
                self.bound.append((name, params[name], param_storage(params[name])))
        return [name for name in names if name not in params]

    def _missing(self, names: list[str]) -> None:
        raise ValueError(f"ferry rank {self.rank}: the SGLang model has no parameter "
                         f"{names[0]!r} that {self.destination} gives this rank "
                         f"({len(names)} missing)")

    def _check(self, round_: int) -> None:
        if round_ != self.rounds:
            raise ValueError(f"ferry update {round_} arrived, this worker expects update "
                             f"{self.rounds}")
        moved = moved_parameters(self.bound)
        if moved:
            raise ValueError(f"parameters {moved[:3]} ({len(moved)} in all) are no longer where "
                             "ferry registered them: SGLang rebound them after loading (a "
                             "backend that repacks weights), which ferry.sglang does not support")

    def _receive(self, models: list[torch.nn.Module]) -> None:
        if self.plan.eplb and self.rounds > 0:  # (the first update's plan was just made)
            self._follow_experts()
        self.plan.refit.run()
        self.rounds += 1
        for model in models:
            post = getattr(model, "post_load_weights", None)
            if callable(post):
                post()

    def _follow_experts(self) -> None:
        """Under EPLB, before an update: every rank votes whether its server's experts moved
        since the plan; if any did, every trainer rank and worker plans again, and this worker
        registers its parameters with the new plan."""
        now = eplb.current_map()
        moved = now is not None and not torch.equal(now, self.placement)
        if not self.session.any_rank(moved):
            return
        if moved and self.leads:
            logger.info("ferry.sglang: EPLB moved experts of server %d since the last plan; "
                        "planning again", self.spec.server)
        self.placement = now
        self.plan = self._plan()
        for name, param, _ in self.bound:
            self.plan.refit.register(name, param.data, side="destination")


_worker: _Worker | None = None


def check_as_loaded(name: str, param: torch.Tensor, destination: str) -> None:
    """Refuses, naming it, an SGLang parameter that does not hold what `destination` says it
    loaded: FP8 weights where the spec says unquantized; block scales SGLang requantized to
    UE8M0 after loading (layers/quantization/fp8_utils.py requant_block_scale_ue8m0_for_deepgemm,
    which marks them format_ue8m0: DeepGEMM on SM100/SM120), where quant=fp8_block holds the
    float32 scales as loaded, which Hopper keeps; weights a kernel preshuffled after loading
    (is_shuffled: AITER, FP4 experts)."""
    fp8 = "quant=fp8_block" in destination
    if param.dtype == getattr(torch, "float8_e4m3fn", None) and not fp8:
        raise ValueError(f"SGLang parameter {name} holds FP8 weights, {destination} does not: "
                         "give the destination quant=fp8_block (ferry.sglang_spec does, given "
                         "the checkpoint's quantization_config)")
    if getattr(param, "format_ue8m0", False):
        raise ValueError(f"SGLang parameter {name}: SGLang requantized these block scales to "
                         "UE8M0 for DeepGEMM after loading (SM100/SM120 GPUs), which ferry's "
                         "SGLang layouts do not model: they hold the float32 scales as loaded; "
                         "serve with SGLANG_ENABLE_JIT_DEEPGEMM=0, which keeps them so "
                         "(layers/deep_gemm_wrapper/configurer.py)")
    if getattr(param, "is_shuffled", False):
        raise ValueError(f"SGLang parameter {name}: a kernel preshuffled these weights after "
                         "loading, which ferry's SGLang layouts do not model")


def worker_rank(spec: RefitSpec, destination_ranks_per_server: int, tp_rank: int, tp_size: int,
                pp_rank: int = 0, pp_size: int = 1) -> int:
    """The ferry rank of SGLang worker (pp_rank, tp_rank) of server `spec.server`, whose world
    rank is tp_size * pp_rank + tp_rank (SGLang's runtime_context.py spawn_world_rank). A server
    is one replica (_layouts refuses dp > 1); under attention DP, SGLang's dp_rank is the rank's
    attention-DP group inside it (managers/data_parallel_controller.py:
    compute_dp_attention_world_info), which adds no ranks."""
    return (spec.num_trainer_ranks + spec.server * destination_ranks_per_server +
            pp_rank * tp_size + tp_rank)


def load_weights(model: torch.nn.Module, named_tensors: list[tuple[str, Any]]) -> None:
    """SGLang's custom loader (--custom-weight-loader ferry.sglang.load_weights): receives one
    update into `model`'s parameters in place, joining the refit at the first (blocks until
    every rank joined and planned), then runs the model's post_load_weights if it has one. With
    a NextN draft (mtp=1) the update lands at the draft's call, in both models."""
    global _worker
    spec = read_control(named_tensors)
    if _worker is None:
        from sglang.srt.runtime_context import get_parallel, get_spec  # inside SGLang only
        parallel = get_parallel()
        check_draft(spec, getattr(get_spec(), "speculative_algorithm", None))
        source, destination = _layouts(spec)
        rank = worker_rank(spec, len(destination.ranks) // _spec_count(spec.destination,
                                                                         "engines"),
                           parallel.tp_rank, parallel.tp_size, parallel.pp_rank, parallel.pp_size)
        last_stage = parallel.pp_rank == parallel.pp_size - 1
        _worker = _Worker(model, spec, rank, source, destination,
                          holds_draft=last_stage and _spec_count(spec.destination, "mtp", 0) > 0,
                          leads=parallel.pp_rank == 0 and parallel.tp_rank == 0)
    _worker.load(model, spec.round)


def check_draft(spec: RefitSpec, speculative_algorithm: str | None) -> None:
    """Refuses a destination whose draft and the server's disagree: mtp=1 for a server without
    speculative decoding, whose loader would wait for a draft's call that never comes, or none
    for a server with a draft, which SGLang hands the loader too."""
    holds = _spec_count(spec.destination, "mtp", 0) > 0
    if holds and speculative_algorithm is None:
        raise ValueError(f"{spec.destination} holds SGLang's NextN draft (mtp=1), but this server "
                         "runs no speculative decoding (--speculative-algorithm NEXTN)")
    if not holds and speculative_algorithm is not None:
        raise ValueError(f"this server runs speculative decoding ({speculative_algorithm}), whose "
                         f"draft {spec.destination} does not hold: give the destination mtp=1 "
                         "(ferry.sglang_spec does for a NextN draft)")


def shutdown() -> None:
    """Leaves the refit's session from this SGLang worker (its last barrier: every rank
    finishes); call it before the worker process exits."""
    global _worker
    if _worker is not None:
        _worker.session.finish()
    _worker = None


def _spec_count(spec_text: str, key: str, default: int = 1) -> int:
    """The integer `key=N` of a spec string ("sglang:tp=8,engines=2"), `default` without one."""
    for item in spec_text.partition(":")[2].split(","):
        name, _, value = item.partition("=")
        if name.strip() == key:
            return int(value)
    return default


def update_server(server: Any, control: list[tuple[str, torch.Tensor]], *,
                  api_key: str | None = None, timeout: float | None = None) -> None:
    """One update of one SGLang server: opens SGLang's weight-update session, has its workers
    load `control` (Sender.control) with LOAD_FORMAT, and closes the session, also after a failed
    load; raises RuntimeError naming the step and SGLang's message when one fails. Blocks until
    the server answers (`timeout` seconds at most per request, None: no limit).

    `server` is the server's URL ("http://host:port"; `api_key`, its --admin-api-key or
    --api-key, when it has one), for a server on any node: the control travels by value, one
    copy per TP rank (payload). Or an sglang.Engine (or anything with its begin_weight_update,
    update_weights_from_tensor and end_weight_update), whose update_weights_from_tensor
    serializes the control through shared memory: only for a server on this node, called from a
    process that did not apply SGLang's monkey_patch_torch_reductions (which cannot serialize a
    CPU tensor)."""
    if isinstance(server, str):
        tp = _spec_count(read_control(control).destination, "tp")
        http = _HttpServer(server, api_key, timeout)
        steps = (lambda: http.post("begin_weight_update", {}),
                 lambda: http.post("update_weights_from_tensor", {
                     "serialized_named_tensors": [base64.b64encode(payload(control)).decode()] * tp,
                     "load_format": LOAD_FORMAT, "flush_cache": True}),
                 lambda: http.post("end_weight_update", {}))
    else:
        steps = (server.begin_weight_update,
                 lambda: server.update_weights_from_tensor(control, load_format=LOAD_FORMAT),
                 server.end_weight_update)
    _succeeded(steps[0](), "begin_weight_update")
    try:
        loaded = steps[1]()
    finally:
        ended = steps[2]()
    _succeeded(loaded, "update_weights_from_tensor")
    _succeeded(ended, "end_weight_update")


def payload(control: list[tuple[str, torch.Tensor]]) -> bytes:
    """`control` pickled by value (the tensor's bytes inside, no shared memory or CUDA handle),
    as one TP rank's entry of update_weights_from_tensor's serialized_named_tensors: SGLang's
    workers read it with their restricted unpickler (python/sglang/srt/utils/common.py,
    MultiprocessingSerializer.deserialize), wherever they run."""
    return pickle.dumps([(name, tensor.detach().cpu().contiguous()) for name, tensor in control])


class _HttpServer:
    """POSTs JSON to an SGLang server's endpoints (entrypoints/http_server.py), which answer
    {"success": ..., "message": ...}, with HTTP status 400 when success is false."""

    def __init__(self, url: str, api_key: str | None, timeout: float | None) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def post(self, endpoint: str, body: dict) -> Any:
        request = urllib.request.Request(f"{self.url}/{endpoint}", json.dumps(body).encode(),
                                         self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return _json_answer(answer.read(MAX_ANSWER_BYTES + 1), endpoint)
        except urllib.error.HTTPError as e:
            text = e.read(MAX_ANSWER_BYTES + 1)
            try:
                return _json_answer(text, endpoint)
            except RuntimeError:
                raise RuntimeError(f"SGLang {endpoint} failed: HTTP {e.code}: "
                                   f"{text[:200].decode(errors='replace')}") from None


MAX_ANSWER_BYTES = 1 << 20
"""The longest answer update_server reads from a server (SGLang's are a short JSON object)."""


def _json_answer(text: bytes, endpoint: str) -> Any:
    if len(text) > MAX_ANSWER_BYTES:
        raise RuntimeError(f"SGLang {endpoint} failed: an answer over MAX_ANSWER_BYTES "
                           f"({MAX_ANSWER_BYTES})")
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict) or "success" not in answer:
        raise RuntimeError(f"SGLang {endpoint} failed: not an SGLang answer: "
                           f"{text[:200].decode(errors='replace')}")
    return answer


def _succeeded(answer: Any, step: str) -> None:
    """Raises unless `answer`, an Engine's (success, message) or the HTTP server's
    {"success": ..., "message": ...}, reports success."""
    if isinstance(answer, Mapping):
        success, message = answer.get("success"), answer.get("message")
    elif isinstance(answer, tuple) and len(answer) == 2:
        success, message = answer
    else:
        raise RuntimeError(f"SGLang {step} answered {answer!r}, not (success, message)")
    if success is not True:
        raise RuntimeError(f"SGLang {step} failed: {message}")


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
