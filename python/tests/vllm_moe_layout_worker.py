"""ferry.vllm's worker layout of a MoE model against vLLM itself, one process (the vLLM
environment's python): for each engine configuration and each of its workers, vLLM's own
Qwen3MoeForCausalLM is built at that rank (vllm_harness.py), ferry's boxes of its parameters
(ferry._vllm_layout.engine_shards) are laid out by ferry's Layout and filled from a checkpoint
through ferry's fragment views, and every parameter must equal, byte for byte, what vLLM's own
load_weights makes of the same checkpoint on a second copy of the model.

    python vllm_moe_layout_worker.py DIR [REFUSED_MODEL_DIR...]

Then each REFUSED_MODEL_DIR's model (vLLM's own class at TP rank 1 of 2) must be refused by name.
"""

from __future__ import annotations

import sys
import types

import torch

import ferry
from ferry._vllm_layout import engine_shards
from vllm_harness import build, build_qwen3_moe, checkpoint, differing, load_with_vllm

# (tp, dp, expert parallelism): experts TP-sharded over tp, then over tp x dp (vLLM flattens MoE
# TP across DP), then whole over tp and over tp x dp ranks (vLLM's linear placement: Qwen3-MoE
# has no expert groups, without which vLLM falls back from round-robin to it).
CASES = [(2, 1, False), (2, 2, False), (4, 1, True), (2, 2, True)]


def check(directory: str, tp: int, dp: int, ep: bool) -> int:
    weights = checkpoint(0)
    sent = {n: types.SimpleNamespace(shape=t.shape, dtype=t.dtype) for n, t in weights.items()}
    for dp_rank in range(dp):
        for tp_rank in range(tp):
            rank = dp_rank * tp + tp_rank
            model, _ = build_qwen3_moe(directory, tp, tp_rank, dp, dp_rank, ep)
            shards, buffers = engine_shards(model, sent, rank)
            for f in ferry.Layout.from_shards(shards).fragments(rank):
                box = tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))
                ferry.fragment_view(buffers[f.buffer], f, "bf16").copy_(weights[f.tensor][box])
            expected, config = build_qwen3_moe(directory, tp, tp_rank, dp, dp_rank, ep)
            load_with_vllm(expected, config, weights)
            wrong = differing(model, expected)
            if wrong:
                raise AssertionError(f"tp={tp} dp={dp} ep={ep}, worker {rank}: "
                                     f"{wrong} differ from vLLM's load_weights")
    return len(list(model.parameters()))


def check_refused(model_dir: str) -> str:
    """What ferry's worker layout says of a TP2 worker of `model_dir`'s model that it must
    refuse."""
    model, _ = build(model_dir, 2, 1)
    try:
        engine_shards(model, {}, 0)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"ferry's worker layout took {model_dir}'s model")


def main() -> int:
    torch.set_num_threads(1)
    for tp, dp, ep in CASES:
        count = check(sys.argv[1], tp, dp, ep)
        print(f"tp={tp} dp={dp} ep={ep}: {tp * dp} workers, {count} parameters each "
              "byte-exact", flush=True)
    for model_dir in sys.argv[2:]:
        print(f"refused {model_dir}: {check_refused(model_dir)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
