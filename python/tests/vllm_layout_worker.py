"""One worker of a vLLM engine, built by vLLM's own model class, checked against ferry's `vllm:`
layout of that engine.

Run by python/tests/test_vllm_layouts.py in the environment tools/deps/vllm-venv.sh makes (it
holds PyPI's vLLM 0.33.0):

    vllm_layout_worker.py MODEL_DIR SPEC RANK PARALLEL_JSON

vLLM builds the class MODEL_DIR's config names for engine rank RANK (dp_rank * tp * pp +
pp_rank * tp + tp_rank) of an engine with PARALLEL_JSON's settings ("tp", "pp", "dp", "ep",
"placement", "redundant", "mtp": the MTP drafter beside the target on the last PP rank;
vllm_harness.py) and loads random checkpoint tensors through its own
load_weights. ferry's layout of the same engine (`ferry.Layout.preset(MODEL_DIR, SPEC)`) must
name exactly the worker's parameters, size each as vLLM does, and place every checkpoint
tensor's box where vLLM's loaders put it; and ferry.vllm_spec of vLLM's own config objects
must give that layout. Prints "rank R: N parameters byte-exact" and exits 0, or names what
differs and exits 1.
"""

from __future__ import annotations

import json
import sys

import vllm_harness  # first: it tells vLLM, before vLLM is imported, that it runs on the CPU
import ferry
from sglang_harness import checkpoint, fill_buffers, layout_differences, spec_mismatch, verdict


def store_transformed(layout: ferry.Layout, rank: int, weights: dict, buffers: dict) -> None:
    """Writes over `buffers` the tensors vLLM keeps transformed, as the layout marks them: a
    Mamba-2 mixer's A_log as A = -exp(A_log) in fp32 (vllm/model_executor/layers/mamba/
    mamba_mixer2.py, the A weight loader)."""
    for f in layout.fragments(rank):
        if f.tensor.endswith(".mixer.A_log"):
            box = weights[f.tensor][tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))]
            ferry.fragment_view(buffers[f.buffer], f, "fp32").copy_(-box.float().exp())


def spec_problems(model_dir: str, layout: ferry.Layout, rank: int, config, mtp: bool) -> list[str]:
    """ferry.vllm_spec of the engine's own ParallelConfig (and SpeculativeConfig with a
    drafter) must give the layout the case names."""
    speculative = vllm_harness.speculative_config(config) if mtp else None
    derived = ferry.vllm_spec(config.parallel_config, speculative_config=speculative)
    return spec_mismatch(model_dir, layout, rank, derived, "ferry.vllm_spec of vLLM's configs")


def main() -> int:
    model_dir, spec, rank, parallel = sys.argv[1:5]
    rank, parallel = int(rank), json.loads(parallel)
    tp, pp, dp = parallel["tp"], parallel.get("pp", 1), parallel.get("dp", 1)
    dp_rank, within = divmod(rank, tp * pp)
    pp_rank, tp_rank = divmod(within, tp)
    layout = ferry.Layout.preset(model_dir, spec + ",expert_tensors=members")
    weights = checkpoint(layout.tensors)
    model, config = vllm_harness.build(model_dir, tp, tp_rank, dp, dp_rank,
                                       parallel.get("ep", False), pp, pp_rank,
                                       parallel.get("placement", "linear"),
                                       parallel.get("redundant", 0))
    vllm_harness.load_with_vllm(model, config, weights)
    params = dict(model.named_parameters())
    if parallel.get("mtp") and pp_rank == pp - 1:  # the drafter runs on the last PP rank
        drafter, draft_config = vllm_harness.build_drafter(model, config)
        vllm_harness.load_with_vllm(drafter, draft_config, weights)
        vllm_harness.share_with_target(drafter, model, pp)
        shared = {id(p) for p in params.values()}  # the target's, under the drafter's names too
        params.update((n, p) for n, p in drafter.named_parameters() if id(p) not in shared)
    expected = fill_buffers(layout, rank, weights)
    store_transformed(layout, rank, weights, expected)
    problems = layout_differences("vLLM", params, layout, rank, expected)
    problems += spec_problems(model_dir, layout, rank, config, parallel.get("mtp", False))
    return verdict(rank, spec, problems, len(params))


if __name__ == "__main__":
    sys.exit(main())
