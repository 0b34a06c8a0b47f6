"""One rank of a refit from a Megatron-style trainer into an SGLang server through ferry.sglang.

Run by python/tests/test_sglang_refit.py in the environment tools/deps/vllm-venv.sh makes:

    sglang_refit_worker.py SERVER trainer|server RANK PORT MODEL_DIR

SERVER names one of SERVERS: "pp_draft", a TP2 PP2 DeepSeek-V3 server with attention DP 2 (world
rank RANK is PP rank RANK // 2, TP rank RANK % 2) whose last PP stage holds the NextN draft beside
its target (DeepseekV3ForCausalLMNextN, from the checkpoint's MTP layer, with its own
embed_tokens), or "tp", a TP2 server with attention DP 2 and no draft, or "tp_fp8", a TP2
server of an FP8 block-quantized checkpoint (quant=fp8_block: the trainer sends bf16, the refit
quantizes, and the reference loads the checkpoint quantized by vLLM's per_block_cast_to_fp8), or
"ep_eplb", two TP2 EP2 servers (RANK // 2 the server) with 2 redundant experts under EPLB, each
of which rebalances its experts before step 1's update with SGLang's own EPLB code
(sglang_harness.rebalance_experts, different expert counts a server), so that step 1 must plan
again with both servers' new maps, and step 2 must not; server 1 also starts elsewhere than
SGLang's initial placement (rebalanced before step 0, as --init-expert-location would place
them), so that the first plan holds one server's map and the other's initial placement. A
trainer rank (ferry.sglang.Sender, its Megatron TP2 shards filled from a random checkpoint
through ferry's source layout) sends STEPS updates, a new checkpoint each. A server rank builds
its models with SGLang's own classes (sglang_harness.py); each update reaches
ferry.sglang.load_weights through SGLang's own WeightUpdater, one a model, in the weight-update
session ferry.sglang.update_server opens, with the control the trainer makes as update_server
posts it to a server's URL and SGLang's workers read it. After each update it builds the same
rank again and loads that step's checkpoint as SGLang loads one at start (load_server: each
model's own load_weights, and the draft's own embed_tokens from the checkpoint; then
postprocess); every parameter of every model, and the w_kc / w_vc that post_load_weights
derives, must be byte-identical. Prints
"server rank R step S: N tensors byte-exact". Then it hands the loader what it must refuse: a
model it does not expect, as SGLang hands it a draft, and an update after the parameters were
rebound.
"""

from __future__ import annotations

import base64
import logging
import sys
from dataclasses import replace
from typing import Callable

import torch

import ferry
import ferry.sglang
from sglang_harness import (MODELS, as_bytes, build_server, checkpoint, fill_buffers,
                            fp8_checkpoint, load_server, rebalance_experts)

STEPS = 3
LOADER = {"custom_weight_loader": [ferry.sglang.LOAD_FORMAT]}

# name: (MODELS entry, the trainer's spec, the servers' spec, an SGLang server's arguments, the
# servers' ranks)
SERVERS = {
    "pp_draft": ("deepseek_v3_nextn", "megatron:tp=2,mtp=1", "sglang:tp=2,pp=2,attn_dp=2,mtp=1",
                 {"tp_size": 2, "pp_size": 2, "attn_dp_size": 2,
                  "enforce_shared_experts_fusion": True, "speculative_algorithm": "NEXTN"}, 4),
    "tp": ("deepseek_v3", "megatron:tp=2", "sglang:tp=2,attn_dp=2",
           {"tp_size": 2, "attn_dp_size": 2, "enforce_shared_experts_fusion": True}, 2),
    # an FP8 block-quantized checkpoint, served as loaded: ferry quantizes the trainer's bf16
    "tp_fp8": ("deepseek_v3_fp8", "megatron:tp=2", "sglang:tp=2,quant=fp8_block",
               {"tp_size": 2, "enforce_shared_experts_fusion": True}, 2),
    # two servers under EPLB, 258 physical experts (129 an EP rank), each rebalanced at step 1
    "ep_eplb": ("deepseek_v3", "megatron:tp=2", "sglang:tp=2,ep=2,redundant=2,engines=2",
                {"tp_size": 2, "ep_size": 2, "ep_num_redundant_experts": 2, "enable_eplb": True},
                4),
}
# server: the steps before whose update an EPLB server rebalances, each with expert counts of its
# own (the seed)
REBALANCED = {0: {1: 1}, 1: {0: 10, 1: 2}}


def spec_for(server: str, port: str, model_dir: str) -> ferry.sglang.RefitSpec:
    _, source, destination, _, _ = SERVERS[server]
    return ferry.sglang.RefitSpec(store=f"127.0.0.1:{port}", num_trainer_ranks=2, model=model_dir,
                                  source=source + ",expert_tensors=members",
                                  destination=destination + ",expert_tensors=members",
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


def sglang_update(models: list[torch.nn.Module], control: list[tuple[str, torch.Tensor]]) -> None:
    """One update of a server rank's `models` (its target, then any draft) as an SGLang 0.5.23
    server applies what ferry.sglang.update_server posts to its URL: the control by value, one
    base64 payload per TP rank, which SGLang's tokenizer manager normalizes
    (managers/tokenizer_control_mixin.py, normalize_serialized_named_tensor_payloads) and each
    worker unpickles its own of with SGLang's restricted unpickler (managers/tp_worker.py,
    deserialize_own_rank); then one SGLang WeightUpdater a model
    (model_executor/model_runner_components/weight_updater.py) runs the session's steps as the
    scheduler's does for each of its runners, target first
    (managers/scheduler_components/weight_updater.py _select_runners): begin_weight_update,
    update_weights_from_tensor with the launch's custom loaders, end_weight_update without
    post_load_weights, since a load ran."""
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
    updaters = [WeightUpdater(tp_rank=par.tp_rank, device="cpu", gpu_id=0, model_config=None,
                              custom_weight_loaders=get_model().custom_weight_loader,
                              get_model=lambda m=model: m, update_model_fields=unused,
                              recapture_cuda_graph=unused, get_model_runner=unused)
                for model in models]
    for updater in updaters:
        updater.begin_weight_update()
    for updater in updaters:
        success, message = updater.update_weights_from_tensor(
            named_tensors=named, load_format=ferry.sglang.LOAD_FORMAT)
        assert success, message
    for updater in updaters:
        updater.end_weight_update(run_post_load=False)


def postprocess(models: list[torch.nn.Module]) -> None:
    """What SGLang's loader does to a model once its weights are loaded, and end_weight_update
    after each update (model_loader/loader.py DefaultModelLoader.postprocess_weights): each
    quantization method's process_weights_after_loading (an FP8 model's KV-cache scales become
    1.0 there)."""
    from sglang.srt.model_loader.loader import DefaultModelLoader

    for model in models:
        DefaultModelLoader.postprocess_weights(model, torch.device("cpu"))


def differences(models: list[torch.nn.Module], references: list[torch.nn.Module]) -> list[str]:
    """The tensors of `models` that differ from `references`' (each its parameters and what
    post_load_weights derived), and the number compared."""
    bad, count = [], 0
    for model, reference in zip(models, references):
        got = {**dict(model.named_parameters()), **derived(model)}
        want = {**dict(reference.named_parameters()), **derived(reference)}
        if set(got) != set(want) or not derived(model):
            return [f"names differ: {sorted(set(got) ^ set(want))[:5]}"], 0
        bad += [n for n in want if not torch.equal(as_bytes(got[n]), as_bytes(want[n]))]
        count += len(want)
    return bad, count


def refused(models: list[torch.nn.Module], spec: ferry.sglang.RefitSpec,
            build: Callable[[str], torch.nn.Module], model_class: str) -> str | None:
    """What the loader must refuse after the updates, before waiting on any rank: a model it
    does not expect (SGLang hands a custom loader a server's draft model after its target), then
    an update after the parameters were rebound. Returns the first that went otherwise, or
    None."""
    control = ferry.sglang.control_tensors(replace(spec, round=STEPS))
    wrong = expect_refusal(lambda: ferry.sglang.load_weights(build(model_class), control),
                           "a second model")
    if wrong:
        return f"another model: {wrong}"
    for param in models[0].parameters():
        param.data = param.data.clone()
    wrong = expect_refusal(lambda: ferry.sglang.load_weights(models[0], control),
                           "no longer where")
    return f"rebound parameters: {wrong}" if wrong else None


def expect_refusal(load: Callable[[], None], expected: str) -> str | None:
    try:
        load()
    except ValueError as e:
        return None if expected in str(e) else str(e)
    return "loaded"


def server(name: str, rank: int, spec: ferry.sglang.RefitSpec) -> int:
    """Server rank `rank` of the servers' ranks: world rank rank % (ranks a server) of server
    rank // (ranks a server)."""
    from sglang_harness import sglang_rank

    model_name, _, destination_spec, server_args, ranks = SERVERS[name]
    per_server = ranks // ferry.sglang._spec_count(destination_spec, "engines")
    spec = replace(spec, server=rank // per_server)
    model_classes = MODELS[model_name][1]
    source = ferry.Layout.preset(spec.model, spec.source)
    destination = ferry.Layout.preset(spec.model, spec.destination)
    server_args = {**server_args, **LOADER}
    with sglang_rank(spec.model, rank % per_server, server_args) as build:
        models = build_server(build, model_classes)
        for step in range(STEPS):
            seed = REBALANCED[spec.server].get(step) if server_args.get("enable_eplb") else None
            if seed is not None:
                rebalance_experts(models[0], spec.model, server_args, seed)
            sglang_update(models, ferry.sglang.control_tensors(replace(spec, round=step)))
            references = build_server(build, model_classes)
            load_server(references, fp8_checkpoint(
                destination, checkpoint(source.tensors, seed=step + 1)))
            postprocess(references)
            bad, count = differences(models, references)
            if bad:
                print(f"server rank {rank} step {step}: {len(bad)} tensors differ: {bad[:5]}")
                return 1
            print(f"server rank {rank} step {step}: {count} tensors byte-exact", flush=True)
        wrong = refused(models, spec, build, model_classes.partition("+")[0])
        if wrong:
            print(f"server rank {rank}: {wrong}")
            return 1
    ferry.sglang.shutdown()
    return 0


def main() -> int:
    name, role, rank, port, model_dir = sys.argv[1:6]
    planning = logging.getLogger("ferry.sglang")  # "planning again" lines, which the test reads
    planning.addHandler(logging.StreamHandler(sys.stdout))
    planning.setLevel(logging.INFO)
    planning.propagate = False  # (SGLang's handlers would print them again)
    spec = spec_for(name, port, model_dir)
    if role == "trainer":
        trainer(int(rank), spec)
        return 0
    return server(name, int(rank), spec)


if __name__ == "__main__":
    sys.exit(main())
