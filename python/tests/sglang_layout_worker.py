"""One rank of an SGLang server, built by SGLang's own code, checked against ferry's SGLang layout.

Run by python/tests/test_sglang_layout.py in the environment tools/deps/vllm-venv.sh makes (it
holds PyPI's SGLang 0.5.23):

    sglang_layout_worker.py MODEL_DIR SPEC RANK SERVER_ARGS_JSON MODEL_CLASS

SGLang publishes the server arguments for world rank RANK and derives every parallel rank and
width from them (runtime_context.publish with SpawnRanks), initialises attention DP and the
initial expert locations as its ModelRunner does, and builds MODEL_CLASS (for example
sglang.srt.models.qwen3_moe.Qwen3MoeForCausalLM) on the CPU. Only the process-group handles are
stand-ins, since nothing here communicates. The model then loads random checkpoint tensors
through its own load_weights. ferry's layout of the same server (`ferry.Layout.preset(MODEL_DIR,
SPEC)`) must name exactly the rank's parameters, size each as SGLang does, and place every
checkpoint tensor's box where SGLang's loader put it: each parameter's bytes are compared with a
buffer that ferry's fragments of the same tensors fill. Prints "rank R: N parameters byte-exact"
and exits 0, or names what differs and exits 1.
"""

from __future__ import annotations

import importlib
import json
import sys
import types

import torch

import ferry


def stand_in_group(rank: int, size: int) -> types.SimpleNamespace:
    """A process-group handle for a rank that builds and loads a model without communicating."""
    return types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=size,
                                 rank_in_group=rank, rank=rank, ranks=list(range(size)),
                                 local_rank=rank, device_group=None, cpu_group=None)


def load_sglang_model(model_dir: str, rank: int, server_args: dict, model_class: str,
                      weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """SGLang's model of world rank `rank` under `server_args`, built on the CPU with its
    parameters zeroed, then loaded with `weights` by its own load_weights."""
    from transformers import AutoConfig

    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.eplb.expert_location import (compute_initial_expert_location_metadata,
                                                 set_global_expert_location_metadata)
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.layers.moe.utils import resolve_shared_experts_config
    from sglang.srt.runtime_context import SpawnRanks, get_model, get_parallel, publish
    from sglang.srt.server_args import ServerArgs

    module, name = model_class.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    args = ServerArgs(model_path=model_dir, device="cpu", skip_tokenizer_init=True,
                      load_format="dummy", **server_args)
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=rank))
    par = get_parallel()
    groups = {"pp_group": stand_in_group(0, 1), "attn_cp_group": stand_in_group(0, 1),
              "moe_dp_group": stand_in_group(0, 1),
              "tp_group": stand_in_group(par.tp_rank, par.tp_size),
              "attn_tp_group": stand_in_group(par.attn_tp_rank, par.attn_tp_size),
              "moe_tp_group": stand_in_group(par.moe_tp_rank, par.moe_tp_size),
              "moe_ep_group": stand_in_group(par.moe_ep_rank, par.moe_ep_size)}
    hf_config = AutoConfig.from_pretrained(model_dir)
    torch.set_default_dtype(torch.bfloat16)
    with par.override(**groups):
        initialize_dp_attention(args)  # as ModelRunner does
        set_global_expert_location_metadata(compute_initial_expert_location_metadata(
            model_config=ModelConfig.from_server_args(args), moe_ep_rank=par.moe_ep_rank))
        shared = resolve_shared_experts_config(cls, hf_config, None)
        with get_model().override(shared_experts=shared):
            model = cls(hf_config)
            for p in model.parameters():
                p.data.zero_()
            model.load_weights(iter(weights.items()))
    return model


def checkpoint(layout: ferry.Layout) -> dict[str, torch.Tensor]:
    """Random bf16 (fp32 where the checkpoint holds fp32) values for every checkpoint tensor."""
    gen = torch.Generator().manual_seed(1)
    return {t.name: torch.randn(t.shape, generator=gen).to(
        torch.float32 if t.dtype == "fp32" else torch.bfloat16) for t in layout.tensors}


def differences(model: torch.nn.Module, layout: ferry.Layout, rank: int,
                weights: dict[str, torch.Tensor]) -> list[str]:
    """What ferry's layout of `rank` says otherwise than the parameters SGLang loaded."""
    params = dict(model.named_parameters())
    buffers = {b.name: b for b in layout.buffers(rank)}
    problems = [f"SGLang has {n}, ferry does not" for n in sorted(set(params) - set(buffers))]
    problems += [f"ferry has {n}, SGLang does not" for n in sorted(set(buffers) - set(params))]
    dtypes = {t.name: t.dtype for t in layout.tensors}
    by_buffer: dict[str, list[ferry.FragmentInfo]] = {}
    for f in layout.fragments(rank):
        by_buffer.setdefault(f.buffer, []).append(f)
    for name in sorted(set(params) & set(buffers)):
        p, size = params[name], buffers[name].bytes
        if p.numel() * p.element_size() != size:
            problems.append(f"{name}: SGLang {tuple(p.shape)} {p.dtype}, ferry {size} bytes")
            continue
        expect = torch.zeros(size, dtype=torch.uint8)
        for f in by_buffer.get(name, []):
            box = weights[f.tensor][tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))]
            ferry.fragment_view(expect, f, dtypes[f.tensor]).copy_(box)
        if not torch.equal(p.detach().contiguous().view(-1).view(torch.uint8), expect):
            problems.append(f"{name}: bytes differ from ferry's fragments")
    return problems


def main() -> int:
    model_dir, spec, rank, server_args, model_class = sys.argv[1:6]
    rank = int(rank)
    layout = ferry.Layout.preset(model_dir, spec + ",expert_tensors=members")
    weights = checkpoint(layout)
    model = load_sglang_model(model_dir, rank, json.loads(server_args), model_class, weights)
    problems = differences(model, layout, rank, weights)
    if problems:
        print(f"rank {rank} under {spec}:\n  " + "\n  ".join(problems))
        return 1
    print(f"rank {rank}: {len(layout.buffers(rank))} parameters byte-exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
