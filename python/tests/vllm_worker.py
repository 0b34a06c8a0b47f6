"""One rank of the vLLM backend test (test_vllm.py), run by the vLLM environment's python.

Ranks 0..1 are a Megatron-style TP2 trainer: a vLLM `WeightSource` whose metadata shards q/k/v,
gate/up, the embedding and the LM head on dim 0 and o/down on dim 1 over both ranks (norms
replicated), and whose `iter_local` yields each rank's shards, updated in place every step. The
trainer drives the workers through vLLM's `WeightTransferTrainerFactory` and a
`VLLMWeightSyncClient` over 127.0.0.1 sockets (vLLM's control plane is HTTP or Ray).

The other ranks are vLLM workers, two data-parallel replicas of TP2. With MODEL `llama` their
model is built from vLLM's own layers (QKVParallelLinear, MergedColumnParallelLinear,
RowParallelLinear, VocabParallelEmbedding, ParallelLMHead) on the CPU, named as vLLM's Llama names
them; norms are plain parameters, as in vLLM's RMSNorm. With `qwen3_moe` it is vLLM's own
Qwen3MoeForCausalLM (vllm_harness.py) with expert parallelism over the 4 workers, each
holding 2 of the 8 experts of every layer whole, and the trainer holds its experts as Megatron's
expert parallelism does: trainer rank r the r-th half of them, whole. With `deepseek_v3` it is
vLLM's own DeepseekV3ForCausalLM (sglang_harness.DEEPSEEK_V3's tiny widths: MLA, 256 experts,
a shared expert kept whole by vLLM's sequence-parallel MoE) serving as vLLM serves it, MLA's
W_UV and W_UK_T derived from kv_b_proj, and those must follow every update too; the trainer
holds MLA's down projections (q_a_proj, kv_a_proj_with_mqa) whole, as Megatron does. With
`nemotron_h` it is vLLM's own NemotronHForCausalLM (sglang_harness.NEMOTRON_H: Mamba-2 mixers,
MLP and attention layers) under TP2, its checkpoint named as Nemotron-H's (backbone.*, A_log),
which vLLM renames; its mixers' A is written as fp32 -exp(A_log) by the refit's Convert ops, and
must equal vLLM's torch.exp to within 1 ulp (ferry's is the C library's expf, core/base/
element_fn.h), every other byte exactly (the verdict names any A that differs by that ulp).
With `llama_fp8` it is vLLM's own LlamaForCausalLM of an FP8 block-quantized checkpoint
(quantization_config fp8, weight_block_size [128, 128]; widths that TP2 splits into whole
blocks): every projection holds e4m3 values and fp32 weight_scale_inv, which the refit quantizes
from the trainer's bf16, and the expected model loads the checkpoint as vLLM's
per_block_cast_to_fp8 quantizes it; its layers record Triton's block-scaled kernel, which
computes from the weights as loaded. `llama_fp8_ue8m0` is the same under DeepGEMM with E8M0
scales on Hopper: the expected model then requantizes to power-of-two scales as DeepGEMM's
process_weights_after_loading does (requant_weight_ue8m0_inplace). `llama_fp8_ue8m0_packed` is
the same on Blackwell (SM100), where that step also packs the scales into DeepGEMM's int32 UE8M0
codes (vllm_harness.deep_gemm_sm100): the worker's layers are so processed before the engine
plans, and the platform reports the SM100 family to ferry.vllm. `qwen3_moe_fp8_ue8m0_packed` is
`qwen3_moe_fp8` so served: DeepGEMM runs its linear layers and, as its MoE backend, its experts,
whose scales vLLM's prepare_fp8_moe_layer_for_deepgemm packs one matrix an expert.
`llama_fp8_online` serves the bf16 checkpoint with --quantization fp8_per_block: vLLM quantizes each
rank's partition as it loads (quantization/online/fp8.py), and the expected model is vLLM's load of
the bf16 checkpoint itself. `qwen3_moe_fp8` is vLLM's own Qwen3MoeForCausalLM of such a checkpoint
under expert parallelism: attention, router and experts FP8 (w13/w2 with one scale per 128x128 block
of each expert's matrices), Triton's FP8 expert kernel recorded; `qwen3_moe_fp8_online` the same
served from its bf16 checkpoint with --quantization fp8_per_block. `deepseek_v3_fp8` is vLLM's own
DeepseekV3ForCausalLM of an FP8 checkpoint: MLA's W_UV and W_UK_T are then bf16 copies dequantized
from the FP8 kv_b_proj, which the worker derives again after each update
(ferry.vllm.derive_mla_copies).
`deepseek_v3_mtp` and `deepseek_v3_fp8_mtp` serve those two with speculative decoding by vLLM's
MTP drafter (DeepSeekMTP, built from the checkpoint's MTP layer beside the target, sharing its
embedding and LM head): each step the trainer sends the model's update, then the drafter's in a
draft session (send_weights(draft=True); the workers' start_draft_weight_update retargets the
engine at the drafter as vllm/v1/worker/gpu_worker.py does), and the drafter is checked as the
model is; at the end the trainer sends a draft update into a model session, which every worker
must refuse and stay up.
`qwen3_moe_eplb` is vLLM's own Qwen3-MoE under EPLB with 4 redundant experts (12 physical
experts, 3 on each EP rank), its EPLB state made as vLLM's model runner makes it
(EplbState.add_model); before step 1's update the workers rearrange the experts as EPLB does
(EplbState's _commit_eplb_maps: each slot holds another logical expert, some of them twice),
so the update must find them moved, every rank plans again, and each slot must hold the
expert the new map puts there: the expected model loads the checkpoint with vLLM's expert
mapping taken from that map; step 2 keeps the map, and the plan. `deepseek_v3_mtp_eplb` is
`deepseek_v3_mtp` under EPLB likewise (256 + 4 experts), its drafter registered with the
EplbState as a model of its own, its draft plan made again at step 1 too (the expected
drafter loads the redundant experts vLLM 0.33's drafter loader omits:
vllm_harness.drafter_loads_replicas).
Each worker's engine comes from vLLM's `WeightTransferEngineFactory`. After every update a
worker loads the same step's full checkpoint into a second copy of its model through vLLM's own
weight loaders and requires every parameter of the refitted model to equal it byte for byte.

    python vllm_worker.py RANK STORE_PORT DIR [llama|qwen3_moe|qwen3_moe_eplb|deepseek_v3|
                                               nemotron_h|llama_fp8|llama_fp8_ue8m0|
                                               llama_fp8_ue8m0_packed|llama_fp8_online|
                                               qwen3_moe_fp8|qwen3_moe_fp8_online|
                                               qwen3_moe_fp8_ue8m0_packed|deepseek_v3_fp8|
                                               deepseek_v3_mtp|deepseek_v3_fp8_mtp|
                                               deepseek_v3_mtp_eplb]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
import types
from functools import cached_property
from multiprocessing.connection import Client, Listener

import torch

import vllm_harness  # first: it tells vLLM, before vLLM is imported, that it runs on the CPU
import vllm.distributed.parallel_state as parallel_state
from vllm.config.parallel import ParallelConfig
from vllm.config.weight_transfer import WeightTransferConfig
from vllm.platforms import current_platform
import vllm.utils.deep_gemm as vllm_deep_gemm
from vllm.distributed.weight_transfer import (ParamMeta, Shard, WeightSource,
                                              WeightTransferEngineFactory,
                                              WeightTransferTrainerFactory)

import ferry
import ferry.vllm
from sglang_harness import DEEPSEEK_V3, NEMOTRON_H
from sglang_harness import checkpoint as random_checkpoint
from tiny_llama import llama_shapes  # examples/tiny_llama.py, on PYTHONPATH

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB, LAYERS = 16, 8, 1, 2, 24, 100, 2
TRAINERS, STEPS, AUTH = 2, 3, b"ferry-vllm-test"
TP, DP = 2, 2  # the workers: two replicas of TP2 (one KV head: each TP rank holds it)
DTYPE = torch.bfloat16
MODEL, DIR = "llama", ""  # a HARNESS_MODELS name instead; the test's directory: from argv
# What the trainer and the workers refit of each vLLM model class (vllm_harness builds them).
HARNESS_MODELS = ("qwen3_moe", "qwen3_moe_eplb", "deepseek_v3", "nemotron_h", "llama_fp8",
                  "llama_fp8_ue8m0", "llama_fp8_ue8m0_packed", "llama_fp8_online", "qwen3_moe_fp8",
                  "qwen3_moe_fp8_online", "qwen3_moe_fp8_ue8m0_packed",
                  "deepseek_v3_fp8", "deepseek_v3_mtp", "deepseek_v3_fp8_mtp",
                  "deepseek_v3_mtp_eplb")
LLAMA_FP8_MODES = ("llama_fp8", "llama_fp8_ue8m0", "llama_fp8_ue8m0_packed",
                   "llama_fp8_online")
QWEN3_MOE_MODES = ("qwen3_moe", "qwen3_moe_eplb")  # vllm_harness.CONFIG's Qwen3-MoE
# The _eplb models: EPLB's redundant experts (E + 4 physical over the 4 EP ranks).
REDUNDANT = 4
ONLINE = "fp8_per_block"  # the --quantization of the _online modes: vLLM quantizes as it loads
# An FP8 block-quantized checkpoint's quantization_config (DeepSeek-V3's and Qwen3's FP8 releases).
FP8_BLOCKS = dict(quant_method="fp8", activation_scheme="dynamic", weight_block_size=[128, 128])
# An FP8 block-quantized Llama whose TP2 partitions are whole 128x128 blocks.
FP8_DIMS = dict(hidden=256, heads=4, kv_heads=2, head_dim=128, mlp=512, vocab=256, layers=2)
LLAMA_FP8 = dict(vocab_size=FP8_DIMS["vocab"], hidden_size=FP8_DIMS["hidden"],
                 intermediate_size=FP8_DIMS["mlp"], num_hidden_layers=FP8_DIMS["layers"],
                 num_attention_heads=FP8_DIMS["heads"], num_key_value_heads=FP8_DIMS["kv_heads"],
                 head_dim=FP8_DIMS["head_dim"], rms_norm_eps=1e-5, tie_word_embeddings=False,
                 torch_dtype="bfloat16", architectures=["LlamaForCausalLM"], model_type="llama",
                 max_position_embeddings=4096, quantization_config=FP8_BLOCKS)
# vllm_harness.CONFIG's Qwen3-MoE, FP8 block-quantized at widths of whole 128x128 blocks.
QWEN3_MOE_FP8 = dict(vllm_harness.CONFIG, hidden_size=256, moe_intermediate_size=256,
                     intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=128, vocab_size=256, quantization_config=FP8_BLOCKS)
# DeepSeek-V3 at widths TP2 splits into whole blocks (MLA's kv_b_proj [4 x (64 + 64), 128]),
# FP8 block-quantized, with 8 experts.
DEEPSEEK_V3_FP8 = dict(DEEPSEEK_V3, hidden_size=256, intermediate_size=512,
                       moe_intermediate_size=256, q_lora_rank=256, kv_lora_rank=128,
                       qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=64,
                       n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
                       vocab_size=256, quantization_config=FP8_BLOCKS)
CONFIGS = {"deepseek_v3": DEEPSEEK_V3,
           "deepseek_v3_mtp": dict(DEEPSEEK_V3, num_nextn_predict_layers=1),
           "deepseek_v3_mtp_eplb": dict(DEEPSEEK_V3, num_nextn_predict_layers=1),
           "nemotron_h": NEMOTRON_H, "llama_fp8": LLAMA_FP8,
           "llama_fp8_ue8m0": LLAMA_FP8, "llama_fp8_ue8m0_packed": LLAMA_FP8,
           "qwen3_moe_fp8": QWEN3_MOE_FP8, "qwen3_moe_fp8_ue8m0_packed": QWEN3_MOE_FP8,
           "deepseek_v3_fp8": DEEPSEEK_V3_FP8,
           "deepseek_v3_fp8_mtp": dict(DEEPSEEK_V3_FP8, num_nextn_predict_layers=1)}
# The _online modes serve the same models' bf16 checkpoints (vLLM quantizes them as it loads).
CONFIGS.update({f"{m}_online": {k: v for k, v in CONFIGS[m].items() if k != "quantization_config"}
                for m in ("llama_fp8", "qwen3_moe_fp8")})


def model_dir() -> str:
    """The directory of MODEL's config (deepseek_v3, nemotron_h)."""
    return vllm_harness.write_config(os.path.join(DIR, MODEL), CONFIGS[MODEL])


def drafting() -> bool:
    """Whether the workers serve MODEL with vLLM's MTP drafter beside it."""
    return MODEL.removesuffix("_eplb").endswith("_mtp")


def eplb() -> bool:
    """Whether the workers serve MODEL under EPLB."""
    return MODEL.endswith("_eplb")


def placement(step: int) -> list[int] | None:
    """Under EPLB, the logical expert of each physical slot at step `step`'s update (None:
    vLLM's initial arrangement): from step 1 on, physical p < E holds expert (3p + 1) mod E,
    elsewhere than at first, and the 4 redundant slots replicas of experts 0, 5, 2 and 7 (with
    8 experts: [1, 4, 7, 2, 5, 0, 3, 6, 0, 5, 2, 7], EP rank r slots 3r..3r+2)."""
    if not eplb() or step < 1:
        return None
    return [(3 * p + 1) % experts() for p in range(experts())] + [0, 5, 2, 7]


def checkpoint(step: int) -> dict[str, torch.Tensor]:
    """The full weights after trainer step `step`: random, different every step."""
    if MODEL in QWEN3_MOE_MODES:
        return vllm_harness.checkpoint(step)
    if MODEL in CONFIGS and MODEL not in LLAMA_FP8_MODES:  # names and shapes from the config
        drafter = ",mtp=1" if drafting() else ""  # the checkpoint's MTP layer too
        spec = f"vllm:tp=1{drafter},expert_tensors=members"
        tensors = ferry.Layout.preset(model_dir(), spec).tensors
        return random_checkpoint(tensors, seed=3000 + step)
    g = torch.Generator().manual_seed(1000 + step)
    dims = FP8_DIMS if MODEL in LLAMA_FP8_MODES else \
        dict(hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM, mlp=MLP,
             vocab=VOCAB, layers=LAYERS)
    shapes = llama_shapes(**dims)
    return {n: torch.randn(s, generator=g).to(DTYPE) for n, s in shapes.items()}


def quantized(name: str, w: torch.Tensor) -> bool:
    """Whether an FP8 model's checkpoint holds tensor `name` in FP8: what vLLM's model builds
    with the quant config. DeepSeek-V3's projections (its router, vLLM's GateLinear, takes none:
    vllm/model_executor/models/deepseek_v2.py); every other matrix but the embedding and the LM
    head elsewhere (Qwen3-MoE's router too)."""
    if MODEL.startswith("deepseek_v3"):  # (the MTP layer's eh_proj: an nn.Linear, deepseek_mtp.py)
        return ".layers." in name and name.endswith(("_proj.weight", "_proj_with_mqa.weight")) \
            and not name.endswith("eh_proj.weight")
    return w.dim() == 2 and not name.endswith(("embed_tokens.weight", "lm_head.weight"))


def served_checkpoint(step: int) -> dict[str, torch.Tensor]:
    """Step `step`'s checkpoint as the engine's model loads it: an FP8 model's quantized tensors
    (quantized()) by vLLM's own per_block_cast_to_fp8 (vllm/utils/deep_gemm.py), each with its
    weight_scale_inv, as FP8 block-quantized checkpoints hold them."""
    weights = checkpoint(step)
    if "fp8" not in MODEL or MODEL.endswith("_online"):  # (vLLM quantizes those itself)
        return weights
    from vllm.utils.deep_gemm import per_block_cast_to_fp8
    served = {}
    for name, w in weights.items():
        if quantized(name, w):
            served[name], served[f"{name}_scale_inv"] = per_block_cast_to_fp8(w, [128, 128])
        else:
            served[name] = w
    return served


def experts() -> int:
    return CONFIGS[MODEL]["n_routed_experts"] if MODEL.startswith("deepseek_v3") \
        else vllm_harness.EXPERTS


def megatron_dim(name: str) -> int | None:
    """The dim Megatron's TP shards a tensor on (None: replicated)."""
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 1
    replicated = ("mlp.gate.weight", "e_score_correction_bias", "q_a_proj.weight",
                  "kv_a_proj_with_mqa.weight")
    return None if "norm" in name or name.endswith(replicated) else 0


def trainer_meta(name: str, tensor: torch.Tensor) -> ParamMeta:
    """How the TP2 trainer holds `name`: an expert whole on the rank owning its half of the
    experts (Megatron's expert parallelism), anything else as megatron_dim shards it."""
    parts, shape = name.split("."), tuple(tensor.shape)
    if "experts" in parts:
        expert = int(parts[parts.index("experts") + 1])
        owner = expert * TRAINERS // experts()
        return ParamMeta(name, tensor.dtype, shape, owners=(owner,))
    dim = megatron_dim(name)
    if dim is None:
        return ParamMeta(name, tensor.dtype, shape)
    return ParamMeta(name, tensor.dtype, shape, owners=tuple(range(TRAINERS)),
                     placements=(Shard(dim),))


class MegatronTP2Source(WeightSource):
    """A TP2 trainer's shards under checkpoint names; `step` rewrites them in place."""

    def __init__(self, rank: int):
        self.rank = rank
        self.local = {m.name: torch.empty(0, dtype=DTYPE) for m in self.metadata
                      if m.owners is None or rank in m.owners}

    @cached_property
    def metadata(self) -> list[ParamMeta]:
        return [trainer_meta(name, tensor) for name, tensor in checkpoint(0).items()]

    def step(self, step: int) -> None:
        metas = {m.name: m for m in self.metadata}
        for name, full in checkpoint(step).items():
            meta = metas[name]
            if meta.owners is not None and self.rank not in meta.owners:
                continue
            dim = meta.placements[0].dim if meta.placements else None
            mine = full if dim is None else full.chunk(TRAINERS, dim)[self.rank]
            if self.local[name].numel() == 0:
                self.local[name] = mine.contiguous().clone()
            else:
                self.local[name].copy_(mine)

    def iter_local(self):
        yield from self.local.items()


class SocketClient:
    """A VLLMWeightSyncClient over every worker's control socket: each call runs on all
    workers (as vLLM's collective_rpc does) and returns when all answered."""

    def __init__(self, addresses):
        self.conns = [Client(a, authkey=AUTH) for a in addresses]

    def _call(self, method, arg=None):
        for c in self.conns:
            c.send((method, arg))
        errors = [r for r in (c.recv() for c in self.conns) if r != "ok"]
        if errors:
            raise RuntimeError(f"{method} failed on a worker: {errors[0]}")

    def init_weight_transfer_engine(self, init_info):
        self._call("init_weight_transfer_engine", init_info)

    def start_weight_update(self):
        self._call("start_weight_update")

    def start_draft_weight_update(self):  # the engine's call (vLLM's AsyncLLM, its HTTP route)
        self._call("start_draft_weight_update")

    def update_weights(self, update_info):
        self._call("update_weights", update_info)

    def finish_weight_update(self, weight_version=None):
        self._call("finish_weight_update")

    def shutdown(self):
        self._call("shutdown")


def trainer(args, workers: int) -> None:
    source = MegatronTP2Source(args.rank)
    source.step(0)
    client = SocketClient(wait_addresses(args.dir, workers)) if args.rank == 0 else None
    info = ferry.vllm.FerryTrainerInitInfo(
        store=f"127.0.0.1:{args.port}", num_trainer_ranks=TRAINERS, num_workers=workers,
        token="vllm-test", config={"deadline.refit": "60s"}, rank=args.rank)
    engine = WeightTransferTrainerFactory.trainer_init(info, client=client, source=source)
    assert isinstance(engine, ferry.vllm.FerryTrainerWeightTransferEngine)
    for step in range(STEPS):
        if step:
            source.step(step)
        for draft in (False, True) if drafting() else (False,):
            plan = engine.plans.get(draft)
            engine.send_weights(draft=draft)
            if plan is not None and engine.plans[draft] is not plan:
                print(f"trainer rank {args.rank} step {step}: "
                      f"{'drafter ' if draft else ''}planned again", flush=True)
            print(f"trainer rank {args.rank} step {step}: sent"
                  f"{' the drafter' if draft else ''}", flush=True)
    if client is not None and drafting():
        refuse_mismatched_update(client)
    if client is not None:
        ferry.vllm._concurrently(client.shutdown, engine.shutdown)
    else:
        engine.shutdown()


def refuse_mismatched_update(client) -> None:
    """A draft update sent into the model's session: every worker must refuse it, before it
    moves a byte, and stay up."""
    client.start_weight_update()
    try:
        client.update_weights({"round": STEPS, "draft": True})
    except RuntimeError as e:
        print(f"trainer rank 0: mismatched update refused: {e}", flush=True)
    else:
        raise AssertionError("a draft update in the model's session was accepted")
    client.finish_weight_update()


def wait_addresses(directory: str, workers: int, deadline_s: float = 120.0):
    paths = [os.path.join(directory, f"worker-{w}") for w in range(workers)]
    end = time.monotonic() + deadline_s
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > end:
            raise TimeoutError("workers did not open their control sockets")
        time.sleep(0.1)
    return [("127.0.0.1", int(open(p).read())) for p in paths]


def vllm_model(tp_rank: int, tp: int) -> torch.nn.Module:
    """vLLM's Llama parameters at TP rank `tp_rank` of `tp`, from vLLM's layers."""
    from vllm.model_executor.layers.linear import (MergedColumnParallelLinear,
                                                   QKVParallelLinear, RowParallelLinear)
    from vllm.model_executor.layers.vocab_parallel_embedding import (ParallelLMHead,
                                                                     VocabParallelEmbedding)
    # vLLM's layers read their TP rank and size from the TP group (parallel_state.get_tp_group).
    parallel_state._TP = types.SimpleNamespace(rank_in_group=tp_rank, world_size=tp)

    def norm():
        m = torch.nn.Module()
        m.weight = torch.nn.Parameter(torch.zeros(HIDDEN, dtype=DTYPE), requires_grad=False)
        return m

    def layer():
        m, attn, mlp = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
        kw = dict(bias=False, params_dtype=DTYPE)
        attn.qkv_proj = QKVParallelLinear(HIDDEN, HEAD_DIM, HEADS, KV_HEADS, **kw)
        attn.o_proj = RowParallelLinear(HEADS * HEAD_DIM, HIDDEN, **kw)
        mlp.gate_up_proj = MergedColumnParallelLinear(HIDDEN, [MLP, MLP], **kw)
        mlp.down_proj = RowParallelLinear(MLP, HIDDEN, **kw)
        m.self_attn, m.mlp = attn, mlp
        m.input_layernorm, m.post_attention_layernorm = norm(), norm()
        return m

    model, inner = torch.nn.Module(), torch.nn.Module()
    inner.embed_tokens = VocabParallelEmbedding(VOCAB, HIDDEN, params_dtype=DTYPE)
    inner.layers = torch.nn.ModuleList(layer() for _ in range(LAYERS))
    inner.norm = norm()
    model.model = inner
    model.lm_head = ParallelLMHead(VOCAB, HIDDEN, params_dtype=DTYPE)
    # vllm/model_executor/models/llama.py, LlamaForCausalLM.packed_modules_mapping
    model.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                                    "gate_up_proj": ["gate_proj", "up_proj"]}
    for p in model.parameters():
        p.data.zero_()
    return model


def load_with_vllm(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """What vLLM's Llama load_weights does with a checkpoint: fused shards through their
    loaders' shard ids, every other parameter through its own loader."""
    params = dict(model.named_parameters())
    fused = {"q_proj": ("qkv_proj", "q"), "k_proj": ("qkv_proj", "k"),
             "v_proj": ("qkv_proj", "v"), "gate_proj": ("gate_up_proj", 0),
             "up_proj": ("gate_up_proj", 1)}
    for name, w in weights.items():
        module = name.split(".")[-2]
        if module in fused:
            target, shard_id = fused[module]
            param = params[name.replace(module, target)]
            param.weight_loader(param, w, shard_id)
        else:
            param = params[name]
            loader = getattr(param, "weight_loader", None)
            if loader is None:
                param.data.copy_(w)
            else:
                loader(param, w)


def worker_model(directory: str, tp_rank: int, tp: int, dp_rank: int, dp: int):
    """The worker's model and the vLLM config it was built under."""
    if MODEL in QWEN3_MOE_MODES:
        return vllm_harness.build_qwen3_moe(directory, tp, tp_rank, dp, dp_rank, ep=True,
                                            redundant=REDUNDANT if eplb() else 0)
    if MODEL in CONFIGS:
        deep_gemm = "_ue8m0" in MODEL  # DeepGEMM with E8M0 scales, its linear and MoE kernels
        model, config = vllm_harness.build(
            model_dir(), tp, tp_rank, dp, dp_rank, ep=MODEL not in LLAMA_FP8_MODES,  # MoE's
            quantization=ONLINE if MODEL.endswith("_online") else None,
            redundant=REDUNDANT if eplb() else 0,
            moe_kernel="DEEPGEMM" if deep_gemm else "TRITON",
            fp8_kernel="DeepGemmE8M0" if deep_gemm else vllm_harness.FP8_KERNEL)
        vllm_harness.process_kv_scales(model)  # as vLLM's loader leaves a quantized model
        return model, config
    parallel = ParallelConfig(tensor_parallel_size=tp, data_parallel_size=dp,
                              data_parallel_rank=dp_rank)
    parallel.rank = tp_rank
    return vllm_model(tp_rank, tp), types.SimpleNamespace(parallel_config=parallel,
                                                          model_config=None)


def within_one_ulp(model, expected, name: str) -> bool:
    """Whether fp32 parameter `name` of both models differs by at most one unit in the last
    place anywhere (same-signed values' bit patterns are ordered as the values)."""
    got, want = (dict(m.named_parameters())[name].data.view(torch.int32) for m in (model, expected))
    return bool(((got - want).abs() <= 1).all() and ((got < 0) == (want < 0)).all())


def drafter_beside(model, config, weights: dict[str, torch.Tensor] | None = None,
                   experts_at: list[int] | None = None):
    """vLLM's MTP drafter beside `model` as vLLM serves it: built, loaded with `weights` by
    its own load_weights (none: left zeroed; under EPLB its experts placed as `experts_at`
    says, vllm_harness.load_placed), processed after loading (MLA's derived weights), then
    sharing the target's embedding and LM head (vllm/v1/spec_decode/llm_base_proposer.py),
    with the VllmConfig it was built under."""
    drafter, draft_config = vllm_harness.build_drafter(model, config)
    if weights is not None:
        with vllm_harness.drafter_loads_replicas(REDUNDANT if eplb() else 0):
            vllm_harness.load_placed(drafter, draft_config, weights, experts_at)
    vllm_harness.process_mla(drafter)
    vllm_harness.share_with_target(drafter, model, pp=1)
    return drafter, draft_config


def expected_models(where: tuple, step: int):
    """The worker's model as vLLM's loaders make it of step `step`'s checkpoint, and its
    drafter so loaded (None without one)."""
    expected, config = worker_model(*where)
    if MODEL not in HARNESS_MODELS:
        load_with_vllm(expected, checkpoint(step))
        return expected, None
    weights = served_checkpoint(step)
    vllm_harness.load_placed(expected, config, weights, placement(step))
    vllm_harness.process_mla(expected)
    if MODEL == "llama_fp8_ue8m0":
        vllm_harness.requantize_ue8m0(expected)
    if MODEL.endswith("_ue8m0_packed"):
        vllm_harness.deep_gemm_sm100(expected)
    if not drafting():
        return expected, None
    return expected, drafter_beside(expected, config, weights, placement(step))[0]


def verify(model, expected, step: int, rank: int) -> str:
    differ = vllm_harness.differing(model, expected)
    close = [n for n in differ if n.endswith(".mixer.A") and within_one_ulp(model, expected, n)]
    wrong = [n for n in differ if n not in close]
    if wrong:
        raise AssertionError(f"worker rank {rank} step {step}: {wrong} differ from what "
                             "vLLM's loaders make of the checkpoint")
    count = len(list(model.parameters()))
    return f"{count} parameters byte-exact" + (f" but {close}, within 1 ulp" if close else "")


class Served(types.SimpleNamespace):
    """A worker's engine and the models its updates land in: `model`, and with speculative
    decoding `drafter` (built under `draft_config`); `eplb`: the model's EPLB state, or None;
    `where` builds them again."""


def worker(args, tp: int, dp: int) -> None:
    index = args.rank - TRAINERS
    dp_rank, tp_rank = divmod(index, tp)
    where = (args.dir, tp_rank, tp, dp_rank, dp)
    model, vllm_config = worker_model(*where)
    if MODEL.endswith("_online"):  # its quantized weights exist once vLLM loaded a checkpoint
        vllm_harness.load_with_vllm(model, vllm_config, checkpoint(-1))
    vllm_harness.process_mla(model)  # as vLLM's loader leaves a served model
    if MODEL.endswith("_ue8m0_packed"):  # an SM100 engine: DeepGEMM's step, then the family
        vllm_harness.deep_gemm_sm100(model)
        current_platform.is_device_capability_family = lambda family, device_id=0: family == 100
        vllm_deep_gemm.is_deep_gemm_e8m0_used = lambda: True
    drafter, draft_config = drafter_beside(model, vllm_config) if drafting() else (None, None)
    models = [(model, vllm_config)] + ([(drafter, draft_config)] if drafter else [])
    eplb_state = vllm_harness.start_eplb(models) if eplb() else None
    engine = WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="ferry"), vllm_config, torch.device("cpu"), model)
    assert isinstance(engine, ferry.vllm.FerryWeightTransferEngine)
    served = Served(engine=engine, model=model, drafter=drafter, draft_config=draft_config,
                    eplb=eplb_state, where=where, rank=args.rank)
    with Listener(("127.0.0.1", 0), authkey=AUTH) as listener:
        path = os.path.join(args.dir, f"worker-{index}")
        with open(path + ".tmp", "w") as f:
            f.write(str(listener.address[1]))
        os.replace(path + ".tmp", path)
        with listener.accept() as conn:
            serve(conn, served)


def serve(conn, served: Served) -> None:
    """vLLM's worker side of the weight-sync RPCs (vllm/v1/worker/gpu_worker.py: a draft
    session retargets the engine at the drafter from start_draft_weight_update until
    finish_weight_update)."""
    engine = served.engine
    while True:
        method, arg = conn.recv()
        try:
            if method == "init_weight_transfer_engine":
                engine.init_transfer_engine(engine.parse_init_info(arg))
            elif method == "start_draft_weight_update":
                engine.set_weight_update_target(served.drafter, served.draft_config.model_config)
                engine.start_weight_update()
            elif method == "update_weights":
                draft = arg.get("draft", False)
                rearrange_if_due(served, arg["round"], draft)
                plan = worker_plan(engine, draft)
                engine.update_weights(arg)
                if plan is not None and worker_plan(engine, draft) is not plan:
                    print(f"worker rank {served.rank} step {arg['round']}: "
                          f"{'drafter ' if draft else ''}planned again", flush=True)
                report_update(served, arg["round"], draft)
            elif method == "finish_weight_update":
                engine.finish_weight_update()
                engine.reset_weight_update_target()
            elif method == "shutdown":
                engine.shutdown()
            else:
                getattr(engine, method)()
        except Exception as e:  # vLLM's worker answers the RPC with the error and stays up
            traceback.print_exc()
            conn.send(f"{type(e).__name__}: {e}")
            continue
        conn.send("ok")
        if method == "shutdown":
            return


def worker_plan(engine, draft: bool):
    """The plan the engine's model or drafter updates run (None before it is made)."""
    target = engine.draft if draft else engine.target
    return None if target is None else target.refit


def rearrange_if_due(served: Served, step: int, draft: bool) -> None:
    """Under EPLB, what vLLM does between two updates when it rearranges the experts: before
    the model update of a step whose placement() differs from the last step's, the maps of that
    placement committed as EplbState commits them."""
    if served.eplb is not None and not draft and placement(step) != placement(step - 1):
        vllm_harness.rearrange_experts(served.eplb, placement(step))


def report_update(served: Served, step: int, draft: bool) -> None:
    """Checks the model the update landed in against vLLM's load of the step's checkpoint."""
    expected, expected_drafter = expected_models(served.where, step)
    if draft:
        verdict = verify(served.drafter, expected_drafter, step, served.rank)
        print(f"worker rank {served.rank} step {step}: drafter {verdict}", flush=True)
    else:
        verdict = verify(served.model, expected, step, served.rank)
        print(f"worker rank {served.rank} step {step}: {verdict}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("rank", type=int)
    parser.add_argument("port", type=int)
    parser.add_argument("dir")
    parser.add_argument("model", nargs="?", default="llama", choices=["llama", *HARNESS_MODELS])
    args = parser.parse_args()
    global MODEL, DIR
    MODEL, DIR = args.model, args.dir
    torch.set_num_threads(1)
    ferry.vllm.register()
    if args.rank < TRAINERS:
        trainer(args, TP * DP)
    else:
        worker(args, TP, DP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
