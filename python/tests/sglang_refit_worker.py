"""One rank of a refit from a Megatron-style trainer into an SGLang server through ferry.sglang.

Run by python/tests/test_sglang_refit.py in the environment tools/deps/vllm-venv.sh makes:

    sglang_refit_worker.py trainer|server RANK PORT MODEL_DIR

A trainer rank (ferry.sglang.Sender, its Megatron TP2 shards filled from a random checkpoint
through ferry's source layout) sends STEPS updates, a new checkpoint each. A server rank is world
rank RANK (PP rank RANK // 2, TP rank RANK % 2, and attention-DP rank RANK % 2) of a TP2 PP2
SGLang server with attention DP 2, built by SGLang's own DeepseekV3ForCausalLM
(sglang_harness.py); each update reaches ferry.sglang.load_weights through SGLang's own
WeightUpdater, in the weight-update session ferry.sglang.update_server opens, with the control
the trainer makes as update_server posts it to a server's URL and SGLang's workers read it. After
each update it builds the same rank again and loads that step's checkpoint with SGLang's own
load_weights; every parameter, and the w_kc / w_vc that post_load_weights derives, must be
byte-identical. Prints "server rank R step S: N tensors byte-exact". Then it hands the loader
what it must refuse: a second model, as SGLang does a server's draft model, and an update after
a parameter was rebound.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import replace
from typing import Callable

import torch

import ferry
import ferry.sglang
from sglang_harness import MODELS, as_bytes, checkpoint, fill_buffers

STEPS = 3
SERVER_ARGS = {"tp_size": 2, "pp_size": 2, "attn_dp_size": 2,
               "enforce_shared_experts_fusion": True,
               "custom_weight_loader": [ferry.sglang.LOAD_FORMAT]}


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


def sglang_update(model: torch.nn.Module, control: list[tuple[str, torch.Tensor]]) -> None:
    """One update of `model` as an SGLang 0.5.23 server applies what ferry.sglang.update_server
    posts to its URL: the control by value, one base64 payload per TP rank, which SGLang's
    tokenizer manager normalizes (managers/tokenizer_control_mixin.py,
    normalize_serialized_named_tensor_payloads) and each worker unpickles its own of with SGLang's
    restricted unpickler (managers/tp_worker.py, deserialize_own_rank); then SGLang's
    WeightUpdater (model_executor/model_runner_components/weight_updater.py) runs the session's
    steps as the scheduler's does (managers/scheduler_components/weight_updater.py):
    begin_weight_update, update_weights_from_tensor with the launch's custom loaders,
    end_weight_update without post_load_weights, since a load ran."""
    from sglang.srt.model_executor.model_runner_components.weight_updater import WeightUpdater
    from sglang.srt.runtime_context import get_model, get_parallel
    from sglang.srt.utils.common import (MultiprocessingSerializer,
                                         normalize_serialized_named_tensor_payloads)
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

    def unused(*_args, **_kwargs):
        raise AssertionError("a tensor update does not call this")

    par = get_parallel()
    posted = [base64.b64encode(ferry.sglang.payload(control)).decode()] * par.tp_size
    monkey_patch_torch_reductions()  # as deserialize_own_rank does first
    named = MultiprocessingSerializer.deserialize(
        normalize_serialized_named_tensor_payloads(posted)[par.tp_rank])
    updater = WeightUpdater(tp_rank=par.tp_rank, device="cpu", gpu_id=0, model_config=None,
                            custom_weight_loaders=get_model().custom_weight_loader,
                            get_model=lambda: model, update_model_fields=unused,
                            recapture_cuda_graph=unused, get_model_runner=unused)
    updater.begin_weight_update()
    success, message = updater.update_weights_from_tensor(named_tensors=named,
                                                          load_format=ferry.sglang.LOAD_FORMAT)
    updater.end_weight_update(run_post_load=False)
    assert success, message


def refused(model: torch.nn.Module, spec: ferry.sglang.RefitSpec, build) -> str | None:
    """What the loader must refuse after the updates, before waiting on any rank: a second
    model (SGLang hands a custom loader a server's draft model after its target), then an update
    after the parameters were rebound. Returns the first that went otherwise, or None."""
    control = ferry.sglang.control_tensors(replace(spec, round=STEPS))
    wrong = expect_refusal(lambda: ferry.sglang.load_weights(build(), control), "a second model")
    if wrong:
        return f"a draft model: {wrong}"
    for param in model.parameters():
        param.data = param.data.clone()
    wrong = expect_refusal(lambda: ferry.sglang.load_weights(model, control), "no longer where")
    return f"rebound parameters: {wrong}" if wrong else None


def expect_refusal(load: Callable[[], None], expected: str) -> str | None:
    try:
        load()
    except ValueError as e:
        return None if expected in str(e) else str(e)
    return "loaded"


def server(rank: int, spec: ferry.sglang.RefitSpec) -> int:
    from sglang_harness import sglang_rank

    _, model_class = MODELS["deepseek_v3"]
    source = ferry.Layout.preset(spec.model, spec.source)
    with sglang_rank(spec.model, rank, SERVER_ARGS, model_class) as build:
        model = build()
        for step in range(STEPS):
            control = ferry.sglang.control_tensors(replace(spec, round=step))
            sglang_update(model, control)
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
        wrong = refused(model, spec, build)
        if wrong:
            print(f"server rank {rank}: {wrong}")
            return 1
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
