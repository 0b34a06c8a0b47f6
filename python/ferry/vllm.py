"""ferry as a vLLM weight-transfer backend ("ferry"): the worker-side engine that receives a
trainer's weights straight into a vLLM worker's parameter storage, and the trainer-side engine
that sends them, both through one ferry plan made at init and run every update (and a second
one for vLLM's speculative drafter, made at its first update).

vLLM's RL weight-sync API (vllm/distributed/weight_transfer/, vLLM 0.33.0) drives both sides:

    # every vLLM worker process (and the trainer): make "ferry" known to vLLM's factories
    ferry.vllm.register()                  # or the wheel's vllm.general_plugins entry point
    llm = LLM(..., weight_transfer_config=WeightTransferConfig(backend="ferry"))

    # every trainer rank
    info = ferry.vllm.FerryTrainerInitInfo(store="trainer0:29600", num_trainer_ranks=2,
                                           num_workers=4, token="job-7", rank=my_rank)
    engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
    for step in ...:
        train_step()
        engine.send_weights()
        engine.send_weights(draft=True)    # with an MTP drafter (see below)

`source` is a vLLM `WeightSource` whose `iter_local` yields this rank's piece of each parameter
as its `ParamMeta` (owners, mesh, Shard/Replicate placements) declares it: vLLM's `ModuleSource`
over an FSDP2/DTensor module, or a Megatron-style source yielding each rank's tensor-parallel
shards under checkpoint (Hugging Face) names, and each expert it holds under that expert's names.
Every trainer rank sends its own shards; no rank gathers the full model. The workers' boxes
follow vLLM's loaders (ferry._vllm_layout), MoE layers' expert slots included; MLA's W_UV and
W_UK_T are views of kv_b_proj that each update reaches through it, or copies the worker derives
again after each update (derive_mla_copies); a Mamba-2 mixer's A is written as fp32 -exp(A_log)
by the plan's Convert ops, and FP8 block-quantized layers' e4m3 weights and scales are quantized
from the trainer's bf16 by its Quantize ops (ferry._vllm_fp8).

With speculative decoding by vLLM's MTP drafter (DeepSeek-V3's MTP layers: speculative method
"mtp"), the drafter is a model of its own, which vLLM updates in a draft session
(start_draft_weight_update, vllm/v1/worker/gpu_worker.py: the engine is retargeted at the drafter
until finish_weight_update). `send_weights(draft=True)` on every trainer rank runs one: the sender
opens it with the client's `start_draft_weight_update` (the engine's call of that name:
AsyncLLM.start_draft_weight_update, the HTTP route /start_draft_weight_update; vLLM's
HTTPVLLMWeightSyncClient and RayVLLMWeightSyncClient lack it: FerryHTTPClient and
FerryRayClient are those clients with it). The update writes the drafter's own
parameters, its MTP layers, from the checkpoint's MTP tensors the trainer sends
(model.layers.N.* for a model of N layers). The parameters the drafter shares with the target
(its embedding under one PP rank, each layer's shared_head.head) are the target's and come with
the target's update.

Under EPLB (--enable-eplb) each expert slot holds the logical expert its layer's current EPLB
map gives it (ferry._vllm_layout.expert_slots). vLLM moves experts between slots while it
serves (EplbState.rearrange), so before every update of a plan whose workers run EPLB each rank
votes (Session.any_rank) whether its experts moved since the plan, and if any did, every
trainer rank and worker plans again, as at init.

The ferry ranks: trainer rank r is ferry rank r (rank 0 hosts ferry's store at `store`); vLLM
worker w (over every data-parallel replica, as vLLM's NCCL backend numbers them) is ferry rank
num_trainer_ranks + w. At init every rank joins the ferry session, the trainer ranks' shards and
the workers' parameter boxes (ferry._vllm_layout) are exchanged through ferry's store, and every
rank makes the same plan; each update then runs it. The trainer's source tensors and the
workers' parameters are registered zero-copy (a trainer tensor that is not contiguous or not of
the wire dtype is staged in a copy made once).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (TrainerInitInfo,
                                                   TrainerWeightTransferEngine,
                                                   VLLMWeightSyncClient, WeightSource,
                                                   WeightTransferEngine,
                                                   WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)
from vllm.distributed.weight_transfer.clients import (HTTPVLLMWeightSyncClient,
                                                      RayVLLMWeightSyncClient)
from vllm.distributed.weight_transfer.factory import (WeightTransferEngineFactory,
                                                      WeightTransferTrainerFactory)

from ._arrays import moved_parameters, param_storage
from ._layout import Layout, Shard
from ._session import Refit, Session
from ._source_layout import trainer_shards
from ._vllm_layout import eplb_placement, engine_shards, mla_copies

BACKEND = "ferry"
logger = logging.getLogger(__name__)


@dataclass
class FerryWeightTransferInitInfo(WeightTransferInitInfo):
    """What every vLLM worker needs to join the trainer's ferry session (sent by the trainer's
    sender through `init_weight_transfer_engine`)."""

    store: str
    """"host:port" of ferry's store, hosted by trainer rank 0."""
    world_size: int
    """Trainer ranks plus vLLM workers."""
    rank_offset: int
    """The ferry rank of vLLM worker 0: the number of trainer ranks."""
    token: str = ""
    """The job's ferry token: ranks with another token are refused."""
    config: dict[str, Any] | None = None
    """ferry options (`ferry config` lists them), as for ferry.Session."""


@dataclass
class FerryWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """One update: its number, counted by the trainer from 0 for the model and for its drafter
    apart, and whether it is the drafter's; a worker refuses an update that is not the next one
    it expects (its plan would pair with another round's) or not for the model its session
    targets."""

    round: int = 0
    draft: bool = False


@dataclass
class _Target:
    """A model a worker's updates land in (vLLM's target model, or its speculative drafter):
    the plan bound to its parameters (but those in `skip`), where those lay when registered,
    its MLA layers whose derived weights are copies, the experts its MoE layers under EPLB held
    when it was made (`placement`), whether any worker's are under EPLB (`eplb`: then every
    update first checks that none moved), and the updates it received."""

    model: torch.nn.Module
    skip: set[int]
    refit: Refit
    bound: list[tuple[str, torch.nn.Parameter, tuple]]
    mla_copies: list[torch.nn.Module]
    placement: dict[str, tuple[int, ...]]
    eplb: bool
    rounds: int = 0


class FerryWeightTransferEngine(
        WeightTransferEngine[FerryWeightTransferInitInfo, FerryWeightTransferUpdateInfo]):
    """The worker side: one ferry rank per vLLM worker, writing the trainer's weights into the
    worker's parameters in place. start/finish_weight_update do nothing (no layerwise reload:
    the bytes land where vLLM's loaders would put them). Driven by one thread (vLLM's worker).

    Draft updates (vLLM's start_draft_weight_update, which retargets the engine at the
    speculative drafter through set_weight_update_target) run a second plan, bound to the
    drafter's own parameters (those it shares with the target come with the target's updates);
    it is made at the first draft update, which every trainer rank and worker joins."""

    init_info_cls = FerryWeightTransferInitInfo
    update_info_cls = FerryWeightTransferUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: torch.device,
                 model: torch.nn.Module) -> None:
        super().__init__(config, vllm_config, device, model)
        self.session: Session | None = None
        self.rank = -1
        self.target: _Target | None = None
        self.draft: _Target | None = None

    def worker_rank(self, init_info: FerryWeightTransferInitInfo) -> int:
        """This worker's ferry rank, numbered as vLLM's NCCL backend numbers workers
        (vllm/distributed/weight_transfer/nccl_common.py, `_worker_group_rank`)."""
        parallel = self.parallel_config
        return (init_info.rank_offset + parallel.data_parallel_index * parallel.world_size +
                parallel.rank)

    def init_transfer_engine(self, init_info: FerryWeightTransferInitInfo) -> None:
        """Joins the session, exchanges layouts and plans; blocks until every trainer rank and
        worker did (ferry's deadline.connect and deadline.store bound it)."""
        self.rank = self.worker_rank(init_info)
        self.session = Session(self.rank, init_info.world_size, init_info.store,
                               init_info.token, init_info.config)
        self.target = self._plan(self._default_model, skip=set())
        self.draft = None

    def _plan(self, model: torch.nn.Module, skip: set[int]) -> _Target:
        """The plan of the updates landing in `model`'s parameters (but those in `skip`): the
        trainer ranks' shards and every worker's parameter boxes (ferry._vllm_layout) exchanged
        through the session, then planned; every rank of the session makes it together."""
        source = self.session.all_gather_shards([])  # the trainer ranks' shards
        placement = eplb_placement(model, skip)
        shards, buffers = engine_shards(
            model, {s.name: s for s in source}, self.rank, skip,
            getattr(self._default_model, "packed_modules_mapping", None))
        destination = self.session.all_gather_shards(shards)
        eplb = self.session.any_rank(bool(placement))
        refit = self.session.refit(Layout.from_shards(source), Layout.from_shards(destination))
        for name, tensor in buffers.items():
            refit.register(name, tensor, side="destination")
        # every parameter, MLA's views of kv_b_proj included: where the plan writes and reads
        bound = [(name, param, param_storage(param)) for name, param in model.named_parameters()
                 if id(param) not in skip]
        return _Target(model, skip, refit, bound, mla_copies(model), placement, eplb)

    def _follow_experts(self, target: _Target) -> _Target:
        """Under EPLB, which moves experts between slots while vLLM serves (EplbState.rearrange),
        before an update: every rank votes whether its experts moved since `target`'s plan; if
        any did, every trainer rank and worker plans again (as at init) and the new plan
        replaces the old. Returns the plan the update runs."""
        now = eplb_placement(target.model, target.skip)
        moved = [name for name, slots in now.items() if target.placement.get(name) != slots]
        if not self.session.any_rank(bool(moved)):
            return target
        if moved:
            logger.info("ferry: EPLB moved the experts of %d MoE layers (%s, ...) since the "
                        "last plan; planning again", len(moved), moved[0])
        replanned = self._plan(target.model, target.skip)
        replanned.rounds = target.rounds
        if target is self.draft:
            self.draft = replanned
        else:
            self.target = replanned
        return replanned

    def start_weight_update(self) -> None:
        self._require_init()

    def finish_weight_update(self) -> None:
        self._require_init()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """Receives one update. Unlike the base class it does not synchronize the accelerator
        afterwards: ferry's run returns with the parameters written (CUDA included)."""
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: FerryWeightTransferUpdateInfo) -> None:
        target = self._session_target(update_info.draft)
        if update_info.round != target.rounds:
            kind = "draft " if update_info.draft else ""
            raise ValueError(f"ferry {kind}weight update {update_info.round} arrived, this "
                             f"worker expects {kind}update {target.rounds}")
        moved = moved_parameters(target.bound)
        if moved:
            raise ValueError(f"vLLM parameters {moved[:3]} ({len(moved)} in all) are no longer "
                             "where ferry registered them when it planned (something rebound or "
                             "reallocated them: a reload, process_weights_after_loading run "
                             "again); initialize the weight transfer engine again")
        if target.eplb:
            target = self._follow_experts(target)
        target.refit.run()
        derive_mla_copies(target.mla_copies)
        target.rounds += 1

    def _session_target(self, draft: bool) -> _Target:
        """Where an update lands: the target model's plan, or, in a draft session (the engine
        retargeted at the drafter), the drafter's, made at its first update."""
        target = self._require_init()
        drafting = self.model is not self._default_model
        if draft != drafting:
            raise ValueError(
                f"the trainer sent a {'draft' if draft else 'model'} update but this worker's "
                f"weight update session targets the {'drafter' if drafting else 'model'}: "
                "send_weights(draft=True) goes with start_draft_weight_update, send_weights() "
                "with start_weight_update")
        if not draft:
            return target
        if self.draft is None:
            self.draft = self._plan(self.model, {id(p) for p in self._default_model.parameters()})
        if self.draft.model is not self.model:
            raise ValueError("this draft session targets another drafter than the one ferry "
                             "planned its draft updates for; initialize the weight transfer "
                             "engine again")
        return self.draft

    def shutdown(self) -> None:
        """Leaves the session (its last barrier: every rank shuts down)."""
        if self.session is not None:
            self.session.finish()
        self.session, self.target, self.draft = None, None, None

    def _require_init(self) -> _Target:
        if self.target is None:
            raise RuntimeError("the ferry weight transfer engine is not initialized: call "
                               "init_weight_transfer_engine first")
        return self.target


@dataclass
class FerryTrainerInitInfo(TrainerInitInfo):
    """Every trainer rank's init info (`rank`, keyword-only, is the trainer rank)."""

    backend: ClassVar[str] = BACKEND
    store: str
    """"host:port" where trainer rank 0 hosts ferry's store (reachable by every worker)."""
    num_trainer_ranks: int
    num_workers: int
    """vLLM workers over every data-parallel replica (TP x PP x DP)."""
    token: str = ""
    config: dict[str, Any] | None = None
    """ferry options for every rank (ferry.Session's `config`)."""

    def worker_init_info(self) -> dict[str, Any]:
        """The workers' init payload (FerryWeightTransferInitInfo as a dict)."""
        return asdict(FerryWeightTransferInitInfo(
            store=self.store, world_size=self.num_trainer_ranks + self.num_workers,
            rank_offset=self.num_trainer_ranks, token=self.token, config=self.config))


@dataclass
class _TrainerPlan:
    """A plan a trainer rank sends through (the target model's, or the drafter's) and what it
    registered with it: each tensor's (address, elements), and the updates it sent."""

    refit: Refit
    eplb: bool = False
    """Whether a worker's MoE layers are under EPLB: every update then first votes whether its
    experts moved, and if so every rank plans again."""
    registered: dict[str, tuple[int, int]] = field(default_factory=dict)
    rounds: int = 0


class FerryTrainerWeightTransferEngine(TrainerWeightTransferEngine[FerryTrainerInitInfo]):
    """The trainer side: every trainer rank sends the shards it holds. The sender (rank 0)
    also drives the workers through the client, its RPCs running while ferry moves the bytes.
    Driven by one thread per rank."""

    init_info_cls = FerryTrainerInitInfo

    def __init__(self, *, client: VLLMWeightSyncClient, source: WeightSource,
                 is_sender: bool = True, rank: int = 0) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender, rank=rank)
        self.session: Session | None = None
        self.plans: dict[bool, _TrainerPlan] = {}  # by draft
        self._shards: dict[str, Shard] = {}
        self._staging: dict[str, torch.Tensor] = {}

    @classmethod
    def trainer_init(cls, init_info: FerryTrainerInitInfo, *, client: VLLMWeightSyncClient,
                     source: WeightSource | None = None) -> "FerryTrainerWeightTransferEngine":
        """Joins the ferry session with every worker and plans; on the sender, the workers'
        init RPC runs meanwhile (both wait for each other in the session's rendezvous)."""
        if source is None or not source.implements_iter_local():
            raise TypeError("the ferry backend sends each rank's own shards: it needs a "
                            "WeightSource that implements iter_local()")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender,
                     rank=init_info.rank)
        if not engine.is_sender:
            engine._join(init_info)
            return engine
        _concurrently(lambda: client.init_weight_transfer_engine(init_info.worker_init_info()),
                      lambda: engine._join(init_info))
        return engine

    def _join(self, info: FerryTrainerInitInfo) -> None:
        self.session = Session(info.rank, info.num_trainer_ranks + info.num_workers, info.store,
                               info.token, info.config)
        mine = trainer_shards(self.source.metadata, info.rank, info.num_trainer_ranks)
        self._shards = {s.name: s for s in mine}
        self.plans = {False: self._plan()}

    def _plan(self) -> _TrainerPlan:
        """This rank's shards and the workers' parameter boxes (of the model, or of its drafter)
        exchanged through the session, then planned; every rank makes it together."""
        source = self.session.all_gather_shards(list(self._shards.values()))
        destination = self.session.all_gather_shards([])  # the workers' parameter boxes
        eplb = self.session.any_rank(False)  # (the workers vote whether they run EPLB)
        return _TrainerPlan(self.session.refit(Layout.from_shards(source),
                                               Layout.from_shards(destination)), eplb)

    def _follow_experts(self, draft: bool) -> None:
        """Under EPLB, before an update: the workers vote whether their experts moved since the
        plan (this rank votes no); if any did, every rank plans again, and this rank registers
        its tensors with the new plan."""
        if not self.session.any_rank(False):
            return
        if self.is_sender:
            logger.info("ferry: EPLB moved experts on a vLLM worker; planning again")
        replanned = self._plan()
        replanned.rounds = self.plans[draft].rounds
        self.plans[draft] = replanned
        self._register_local(replanned)

    def send_weights(self, *, draft: bool = False) -> None:
        """One update on every trainer rank: registers what `iter_local` yields (again only
        where a tensor's storage moved), then runs the plan; the sender wraps it in the
        workers' start/update/finish RPCs. Blocks until this rank's part and, on the sender,
        the workers' update are done.

        With `draft` the update lands in the workers' speculative drafter (vLLM's MTP drafter:
        the checkpoint's MTP layers), its parameters that are not the target's: the sender
        opens the workers' session with the client's start_draft_weight_update (which calls
        the engine's: AsyncLLM.start_draft_weight_update, or the HTTP route of that name). Its
        plan is made at the first draft update, on every trainer rank and worker together."""
        if not self.plans:
            raise RuntimeError("trainer_init must run before send_weights")
        start = self.client.start_weight_update if self.is_sender else None
        if draft and self.is_sender:
            start = getattr(self.client, "start_draft_weight_update", None)
            if not callable(start):
                raise TypeError(f"send_weights(draft=True): the client "
                                f"{type(self.client).__name__} has no start_draft_weight_update "
                                "to open the workers' draft session (ferry.vllm.FerryHTTPClient "
                                "and FerryRayClient are vLLM's clients with it)")
        sent = self.plans.get(draft)
        if sent is not None:  # (a registration error leaves the workers' session unopened)
            self._register_local(sent)

        def work() -> None:
            if sent is None:  # the first draft update: planned with the workers' drafters
                self.plans[draft] = self._plan()
                self._register_local(self.plans[draft])
            if self.plans[draft].eplb:
                self._follow_experts(draft)
            self.plans[draft].refit.run()

        if not self.is_sender:
            work()
            self.plans[draft].rounds += 1
            return
        start()
        update = asdict(FerryWeightTransferUpdateInfo(round=sent.rounds if sent else 0,
                                                      draft=draft))
        _concurrently(lambda: self.client.update_weights(update), work)
        self.client.finish_weight_update()
        self.plans[draft].rounds += 1

    def _register_local(self, sent: _TrainerPlan) -> None:
        seen = set()
        for name, tensor in self.source.iter_local():
            shard = self._shards.get(name)
            if shard is None:
                raise ValueError(f"trainer rank {self.rank}: iter_local yielded {name!r}, "
                                 "which its metadata does not give this rank")
            box = tuple(h - l for l, h in zip(shard.lo, shard.hi))
            if tuple(tensor.shape) != box:
                raise ValueError(f"trainer rank {self.rank}: {name} is {list(tensor.shape)}, "
                                 f"its metadata gives this rank {list(box)}")
            self._register(sent, name, tensor, shard.dtype)
            seen.add(name)
        missing = sorted(set(self._shards) - seen)
        if missing:
            raise ValueError(f"trainer rank {self.rank}: iter_local did not yield "
                             f"{missing[:5]} ({len(missing)} in all) that it owns")

    def _register(self, sent: _TrainerPlan, name: str, tensor: torch.Tensor, dtype: Any) -> None:
        if not tensor.is_contiguous() or tensor.dtype != dtype:
            staging = self._staging.get(name)
            if staging is None:
                staging = torch.empty(tensor.shape, dtype=dtype, device=tensor.device)
                self._staging[name] = staging
            staging.copy_(tensor)
            tensor = staging
        key = (tensor.data_ptr(), tensor.numel())
        if sent.registered.get(name) != key:
            sent.refit.register(name, tensor, side="source")
            sent.registered[name] = key

    def shutdown(self) -> None:
        """Leaves the session (its last barrier: every rank shuts down)."""
        if self.session is not None:
            self.session.finish()
        self.session, self.plans = None, {}


class FerryHTTPClient(HTTPVLLMWeightSyncClient):
    """vLLM's HTTP weight-sync client (a `vllm serve` server's RL routes) with the draft
    session's route too, which send_weights(draft=True) opens: POST /start_draft_weight_update
    (vllm/entrypoints/rl/online/api_router.py)."""

    def start_draft_weight_update(self) -> None:
        self._post("start_draft_weight_update")


class FerryRayClient(RayVLLMWeightSyncClient):
    """vLLM's Ray weight-sync client (vLLM `LLM` or `AsyncLLM` Ray actors, one or a list, each
    call on all of them) with the draft session too, which send_weights(draft=True) opens: each
    actor's start_draft_weight_update (vllm/entrypoints/rl/offline.py RLOfflineMixin, whose
    collective_rpc runs it on every worker; AsyncLLM's of that name)."""

    def start_draft_weight_update(self) -> None:
        import ray
        ray.get([h.start_draft_weight_update.remote() for h in self.handles])


def _concurrently(rpc, work) -> None:
    """Runs `rpc` on a thread while `work` runs here; raises the first error. When `work`
    fails the thread is not waited for (its peer may never answer, as vLLM's NCCL backend
    notes)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ferry-vllm-rpc")
    try:
        future = pool.submit(rpc)
        work()
        future.result()
    finally:
        pool.shutdown(wait=False)


_register_lock = threading.Lock()


def derive_mla_copies(modules: list[torch.nn.Module]) -> None:
    """MLA's W_UV and W_UK_T derived again, in place, from each module's kv_b_proj as vLLM's
    MLAAttention.process_weights_after_loading derives them after loading
    (vllm/model_executor/layers/attention/mla_attention.py split_kv_b_proj: dequantized in the
    dtype the copies hold, W_UV = [L, N, V] as [N, L, V], W_UK_T = [L, N, P] as [N, P, L]), for
    the modules whose copies do not view kv_b_proj (_vllm_layout.mla_copies)."""
    from vllm.model_executor.layers.attention.mla_attention import split_kv_b_proj
    with torch.no_grad():
        for m in modules:
            w_uk, w_uv = split_kv_b_proj(m.kv_b_proj, m.W_UV.dtype, m.kv_lora_rank,
                                         m.num_heads, m.qk_nope_head_dim, m.v_head_dim)
            m.W_UV.copy_(w_uv.transpose(0, 1))
            m.W_UK_T.copy_(w_uk.permute(1, 2, 0))


def register() -> None:
    """Registers the "ferry" backend in vLLM's worker and trainer factories; idempotent. Every
    process that creates an engine needs it before: the vLLM workers (through the wheel's
    `vllm.general_plugins` entry point, or the caller's own plugin) and the trainer."""
    with _register_lock:
        for factory, cls in ((WeightTransferEngineFactory, "FerryWeightTransferEngine"),
                             (WeightTransferTrainerFactory, "FerryTrainerWeightTransferEngine")):
            try:
                factory.register_engine(BACKEND, __name__, cls)
            except ValueError:
                pass  # already registered
