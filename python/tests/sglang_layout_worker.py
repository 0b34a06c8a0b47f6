"""One rank of an SGLang server, built by SGLang's own code, checked against ferry's SGLang layout.

Run by python/tests/test_sglang_layout.py in the environment tools/deps/vllm-venv.sh makes (it
holds PyPI's SGLang 0.5.23):

    sglang_layout_worker.py MODEL_DIR SPEC RANK SERVER_ARGS_JSON MODEL_CLASS[+DRAFT_CLASS]

SGLang builds MODEL_CLASS for world rank RANK of a server run with SERVER_ARGS_JSON
(sglang_harness.py), and DRAFT_CLASS beside it for a server with a speculative-decoding draft,
and loads random checkpoint tensors through their own load_weights (an FP8 block-quantized
checkpoint of them where the spec says quant=fp8_block: fp8_checkpoint). ferry's
layout of the same server (`ferry.Layout.preset(MODEL_DIR, SPEC)`) must name exactly the rank's
parameters, size each as SGLang does, and place every checkpoint tensor's box where SGLang's
loader put it: each parameter's bytes are compared with a buffer that ferry's fragments of the
same tensors fill (block-scaled buffers: their matrices quantized as the checkpoint was,
fill_fp8_buffers); and ferry.sglang_spec of SGLang's own ServerArgs must give that layout.
Prints "rank R: N parameters byte-exact" and exits 0, or names what differs and exits 1.
"""

from __future__ import annotations

import json
import os
import sys

import ferry
from sglang_harness import (build_server, checkpoint, fill_buffers, fill_fp8_buffers,
                            fp8_checkpoint, layout_differences, load_server, sglang_rank,
                            spec_mismatch, verdict)


# What an FP8 quant config adds to each attention layer beside the weights: its KV cache's
# scales (layers/quantization/kv_cache.py BaseKVCacheMethod), 1.0 unless a checkpoint has
# kv_scale tensors, which ferry does not send and leaves as they are.
KV_CACHE_SCALES = (".k_scale", ".v_scale")


def spec_problems(model_dir: str, layout: ferry.Layout, rank: int, server_args: dict,
                  drafted: bool) -> list[str]:
    """ferry.sglang_spec of SGLang's own ServerArgs of the case (with a draft beside the target:
    --speculative-algorithm NEXTN) and the checkpoint's quantization_config must give the layout
    the case names."""
    from sglang.srt.server_args import ServerArgs

    if drafted:
        server_args = dict(server_args, speculative_algorithm="NEXTN")
    args = ServerArgs(model_path=model_dir, device="cpu", skip_tokenizer_init=True,
                      load_format="dummy", **server_args)
    with open(os.path.join(model_dir, "config.json")) as f:
        quantization = json.load(f).get("quantization_config")
    return spec_mismatch(model_dir, layout, rank,
                         ferry.sglang_spec(args, quantization_config=quantization),
                         "ferry.sglang_spec of SGLang's ServerArgs")


def main() -> int:
    model_dir, spec, rank, server_args, model_classes = sys.argv[1:6]
    rank = int(rank)
    layout = ferry.Layout.preset(model_dir, spec + ",expert_tensors=members")
    weights = checkpoint(layout.tensors)
    with sglang_rank(model_dir, rank, json.loads(server_args)) as build:
        models = build_server(build, model_classes)  # the target, then any draft
        load_server(models, fp8_checkpoint(layout, weights))
        params = {name: p for model in models for name, p in model.named_parameters()
                  if not name.endswith(KV_CACHE_SCALES)}
    expected = fill_buffers(layout, rank, weights)
    fill_fp8_buffers(layout, rank, weights, expected)
    problems = layout_differences("SGLang", params, layout, rank, expected)
    problems += spec_problems(model_dir, layout, rank, json.loads(server_args),
                              "+" in model_classes)
    return verdict(rank, spec, problems, len(layout.buffers(rank)))


if __name__ == "__main__":
    sys.exit(main())
