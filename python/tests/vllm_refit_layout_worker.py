"""ferry.vllm's worker layouts against vLLM itself, one process (the vLLM environment's
python): for each engine configuration and each of its workers, vLLM's own model class is built
at that rank (vllm_harness.py) and serves one checkpoint (loaded by vLLM's load_weights, MLA's
decode weights derived as vLLM's loader derives them); then ferry's boxes of its parameters
(ferry._vllm_layout.engine_shards) are laid out by ferry's Layout and a second checkpoint is
written through ferry's fragment views, in place (fp32 -exp(x) where a shard says neg_exp, as
vLLM keeps Mamba's A). Every parameter must then equal, byte for byte, what vLLM's own
load_weights (and MLA processing) makes of the second checkpoint on a fresh copy of the model:
Llama, Qwen2 and Qwen3's fused layers, Qwen3-MoE's expert slots, DeepSeek-V3's MLA (W_UV and
W_UK_T included) and Nemotron-H's Mamba-2 mixers under checkpoint names vLLM renames.

    python vllm_refit_layout_worker.py DIR      (the models' configs are written under DIR)

The MoE layers run Triton's expert kernel, as on a Hopper GPU (vllm_harness.instantiate). Where
MLA's weights are copies of kv_b_proj (DeepSeek-V3 serving fp32 activations), the writes are
followed by what the worker does after each update (ferry.vllm.derive_mla_copies). Then vLLM's
DeepSeek-V3 with the expert kernel vLLM picks on the CPU (which prepacks the weights) must be
refused by name.
"""

from __future__ import annotations

import functools
import os
import sys
import types

import torch

import vllm_harness  # first: it tells vLLM, before vLLM is imported, that it runs on the CPU
import ferry
from ferry._vllm_layout import engine_shards, mla_copies
from ferry.vllm import derive_mla_copies
from sglang_harness import DEEPSEEK_V3, LLAMA, NEMOTRON_H, QWEN2, QWEN3
from sglang_harness import checkpoint as random_checkpoint

# Each model's engine configurations, (tp, dp, expert parallelism):
CASES = {
    # fused q/k/v and gate/up; Qwen2's q/k/v biases and one KV head on both ranks; Qwen3's q/k
    # norms and tied embeddings
    "llama": [(2, 1, False)], "qwen2": [(2, 1, False)], "qwen3": [(2, 1, False)],
    # experts TP-sharded over tp, then over tp x dp (vLLM flattens MoE TP across DP), then whole
    # over tp and over tp x dp ranks (vLLM's linear placement: Qwen3-MoE has no expert groups,
    # without which vLLM falls back from round-robin to it)
    "qwen3_moe": [(2, 1, False), (2, 2, False), (4, 1, True), (2, 2, True)],
    # MLA; with TP2 x DP2 and expert parallelism vLLM's sequence-parallel MoE keeps the shared
    # expert whole on every rank; with fp32 activations, MLA's W_UV and W_UK_T are copies of
    # kv_b_proj, which the worker derives again after writing it
    "deepseek_v3": [(2, 1, False), (2, 2, True)], "deepseek_v3_mla_copies": [(2, 1, False)],
    # Mamba-2, MLP and attention layers: TP2 (its 2 groups, one a rank) and TP1; with one group
    # under TP2, which vLLM replicates on both ranks
    "nemotron_h": [(2, 1, False), (1, 1, False)], "nemotron_h_one_group": [(2, 1, False)],
}
# (LLAMA's 3 KV heads and 1010-token vocabulary split over no common TP: 2 KV heads here)
CONFIGS = {"llama": dict(LLAMA, num_key_value_heads=2), "qwen2": QWEN2, "qwen3": QWEN3,
           "deepseek_v3": DEEPSEEK_V3, "deepseek_v3_mla_copies": DEEPSEEK_V3,
           "nemotron_h": NEMOTRON_H,
           "nemotron_h_one_group": dict(NEMOTRON_H, n_groups=1)}


def serve(model, config, weights: dict[str, torch.Tensor], act=torch.bfloat16) -> None:
    """`model` as a vLLM engine of activations `act` holds it after loading `weights`."""
    vllm_harness.load_with_vllm(model, config, weights)
    vllm_harness.process_mla(model, act)


def metadata(weights: dict[str, torch.Tensor]) -> dict[str, types.SimpleNamespace]:
    """What a trainer says of the tensors it sends: their shapes and dtypes."""
    return {n: types.SimpleNamespace(shape=t.shape, dtype=t.dtype) for n, t in weights.items()}


def refit_in_place(model, weights: dict[str, torch.Tensor], rank: int) -> None:
    """`weights` written into `model`'s parameters where ferry's worker layout places them."""
    shards, buffers = engine_shards(model, metadata(weights), rank)
    layout = ferry.Layout.from_shards(shards)
    dtypes = {t.name: t.dtype for t in layout.tensors}
    neg_exp = {s.name for s in shards if s.transform == "neg_exp"}
    for f in layout.fragments(rank):
        box = weights[f.tensor][tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))]
        if f.tensor in neg_exp:
            ferry.fragment_view(buffers[f.buffer], f, "fp32").copy_(-torch.exp(box.float()))
        else:
            ferry.fragment_view(buffers[f.buffer], f, dtypes[f.tensor]).copy_(box)
    derive_mla_copies(mla_copies(model))  # what the worker does after each update


def check(build, before: dict, after: dict, tp: int, dp: int, ep: bool,
          act=torch.bfloat16) -> int:
    """Every worker of the engine refitted from `before` to `after` against vLLM; `build(tp,
    tp_rank, dp, dp_rank, ep)` makes a worker's model, serving activations `act`. Returns the
    parameters a worker has."""
    for dp_rank in range(dp):
        for tp_rank in range(tp):
            rank = dp_rank * tp + tp_rank
            model, config = build(tp, tp_rank, dp, dp_rank, ep)
            serve(model, config, before, act)
            refit_in_place(model, after, rank)
            expected, config = build(tp, tp_rank, dp, dp_rank, ep)
            serve(expected, config, after, act)
            wrong = vllm_harness.differing(model, expected)
            if wrong:
                raise AssertionError(f"tp={tp} dp={dp} ep={ep}, worker {rank}: "
                                     f"{wrong} differ from vLLM's load_weights")
    return len(list(model.parameters()))


def refusal(model, where: str, weights: dict | None = None) -> str:
    """What ferry's worker layout says of `model`, which it must refuse, against a trainer
    sending `weights`."""
    try:
        engine_shards(model, metadata(weights or {}), 0)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"ferry's worker layout took {where}")


def preset_checkpoints(model_dir: str) -> tuple[dict, dict]:
    """Two random checkpoints of the model `model_dir`'s config describes, under its
    checkpoint names (ferry's presets read them from the config as the `vllm:` layouts do)."""
    tensors = ferry.Layout.preset(model_dir, "vllm:tp=1,expert_tensors=members").tensors
    return random_checkpoint(tensors, 1), random_checkpoint(tensors, 2)


def main() -> int:
    torch.set_num_threads(1)
    directory = sys.argv[1]
    qwen3_moe_weights = vllm_harness.checkpoint(0), vllm_harness.checkpoint(1)
    for name, cases in CASES.items():
        if name == "qwen3_moe":
            build, weights = functools.partial(vllm_harness.build_qwen3_moe, directory), \
                qwen3_moe_weights
        else:
            model_dir = vllm_harness.write_config(os.path.join(directory, name), CONFIGS[name])
            build, weights = functools.partial(vllm_harness.build, model_dir), \
                preset_checkpoints(model_dir)
        act = torch.float32 if name.endswith("mla_copies") else torch.bfloat16
        for tp, dp, ep in cases:
            count = check(build, *weights, tp, dp, ep, act)
            print(f"{name} tp={tp} dp={dp} ep={ep}: {tp * dp} workers, {count} parameters "
                  "each byte-exact", flush=True)
    deepseek_dir = os.path.join(directory, "deepseek_v3")
    model, _ = vllm_harness.build(deepseek_dir, 2, 1, moe_kernel=None)
    print("refused the CPU MoE kernel: "
          f"{refusal(model, 'the CPU MoE kernel', preset_checkpoints(deepseek_dir)[0])}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
