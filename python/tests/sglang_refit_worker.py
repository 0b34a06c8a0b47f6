"""One rank of a refit from a Megatron-style trainer into an SGLang server through ferry.sglang.

Run by python/tests/test_sglang_refit.py in the environment tools/deps/vllm-venv.sh makes:

    sglang_refit_worker.py trainer|server RANK PORT MODEL_DIR

A trainer rank (ferry.sglang.Sender, its Megatron TP2 shards filled from a random checkpoint
through ferry's source layout) sends STEPS updates, a new checkpoint each. A server rank is world
rank RANK (PP rank RANK // 2, TP rank RANK % 2, and attention-DP rank RANK % 2) of a TP2 PP2
SGLang server with attention DP 2, built by SGLang's own DeepseekV3ForCausalLM
(sglang_harness.py); each update reaches it through ferry.sglang.load_weights, called with the
control tensor the trainer makes, as SGLang's weight updater calls a custom loader. After each
update it builds the same rank again and loads that step's checkpoint with SGLang's own
load_weights; every parameter, and the w_kc / w_vc that post_load_weights derives, must be
byte-identical. Prints "server rank R step S: N tensors byte-exact".
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

import ferry
import ferry.sglang
from sglang_harness import MODELS, as_bytes, checkpoint, fill_buffers

STEPS = 3
SERVER_ARGS = {"tp_size": 2, "pp_size": 2, "attn_dp_size": 2,
               "enforce_shared_experts_fusion": True}


def spec_for(port: str, model_dir: str) -> ferry.sglang.RefitSpec:
    return ferry.sglang.RefitSpec(store=f"127.0.0.1:{port}", num_trainer_ranks=2, model=model_dir,
                                  source="megatron:tp=2,expert_tensors=members",
                                  destination="sglang:tp=2,pp=2,attn_dp=2,"
                                              "expert_tensors=members",
                                  token="sglang-refit-test",
                                  # the server ranks join once SGLang is imported and their
                                  # model built: minutes when six processes share two cores
                                  config={"transport.network": "tcp", "deadline.connect": "400s"})


def trainer(rank: int, spec: ferry.sglang.RefitSpec) -> None:
    sender = ferry.sglang.Sender(spec, rank)
    source = ferry.Layout.preset(spec.model, spec.source)
    buffers = None
    for step in range(STEPS):
        buffers = fill_buffers(source, rank, checkpoint(source.tensors, seed=step + 1), buffers)
        if step == 0:
            sender.register(buffers)
        sender.send()
        print(f"trainer rank {rank} step {step}: sent", flush=True)
    sender.finish()


def derived(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What post_load_weights derives from kv_b_proj: each MLA layer's w_kc and w_vc."""
    out = {}
    for name, module in model.named_modules():
        for attr in ("w_kc", "w_vc"):
            value = getattr(module, attr, None)
            if isinstance(value, torch.Tensor):
                out[f"{name}.{attr}"] = value
    return out


def server(rank: int, spec: ferry.sglang.RefitSpec) -> int:
    from sglang_harness import sglang_rank

    _, model_class = MODELS["deepseek_v3"]
    source = ferry.Layout.preset(spec.model, spec.source)
    with sglang_rank(spec.model, rank, SERVER_ARGS, model_class) as build:
        model = build()
        for step in range(STEPS):
            control = ferry.sglang.control_tensors(replace(spec, round=step))
            ferry.sglang.load_weights(model, control)
            reference = build()
            reference.load_weights(iter(checkpoint(source.tensors, seed=step + 1).items()))
            got = {**dict(model.named_parameters()), **derived(model)}
            want = {**dict(reference.named_parameters()), **derived(reference)}
            if set(got) != set(want) or not derived(model):
                print(f"server rank {rank}: tensors differ: {sorted(set(got) ^ set(want))[:5]}")
                return 1
            bad = [n for n in want if not torch.equal(as_bytes(got[n]), as_bytes(want[n]))]
            if bad:
                print(f"server rank {rank} step {step}: {len(bad)} tensors differ: {bad[:5]}")
                return 1
            print(f"server rank {rank} step {step}: {len(want)} tensors byte-exact", flush=True)
    ferry.sglang.shutdown()
    return 0


def main() -> int:
    role, rank, port, model_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    spec = spec_for(port, model_dir)
    if role == "trainer":
        trainer(rank, spec)
        return 0
    return server(rank, spec)


if __name__ == "__main__":
    sys.exit(main())
