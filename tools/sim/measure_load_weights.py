#!/usr/bin/env python3
"""Measures vLLM's per-tensor weight-loading CPU cost: the simulator's `tensor_load_overhead`.

NeMo RL's gather-and-broadcast hands every received bucket to vLLM's `load_weights` one
(name, tensor) at a time (NVIDIA-NeMo/RL nemo_rl/utils/packed_tensor.py, `post_unpack_func`), on
the consumer's one Python thread. This script builds real vLLM models on the CPU (vLLM's own
model classes, platform forced to vLLM's CpuPlatform; a world of one rank, so every expert is
local), with the real layer counts' structure but tiny dimensions (so the bytes copied are
negligible), and times `model.load_weights` over a checkpoint of HF-named tensors, as NeMo RL
calls it. Prints one line a model: tensors, seconds a pass (best of --repeats), microseconds a
tensor.

With --ep N, N local processes (gloo, 127.0.0.1) build Qwen3-MoE with vLLM's expert parallelism
over TP N, so each rank holds 1/N of the experts, and time every tensor of the checkpoint on its
own (the gap between two tensors handed to load_weights): median microseconds of the rank's own
experts' tensors, the other ranks' (which FusedMoE's loader skips) and the rest.

Run with vLLM's environment (tools/deps/vllm-venv.sh):
  /root/.cache/ferry/vllm-venv/bin/python tools/sim/measure_load_weights.py [--ep 2]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform

# A CUDA build of vLLM on a host without a GPU detects no platform; the CPU one builds its layers.
platforms._current_platform = CpuPlatform()

from vllm.config import (DeviceConfig, ModelConfig, ParallelConfig, VllmConfig,  # noqa: E402
                         set_current_vllm_config)
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402

# Tiny dimensions, the real models' expert counts and layer structure (HF config.json keys).
QWEN3_MOE = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=64,
                 intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, num_experts=128, num_experts_per_tok=8,
                 decoder_sparse_step=1, mlp_only_layers=[], vocab_size=256,
                 max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0,
                 norm_topk_prob=True, tie_word_embeddings=False, torch_dtype="bfloat16")
DEEPSEEK_V3 = dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                   hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                   num_attention_heads=4, num_key_value_heads=4, n_routed_experts=256,
                   n_shared_experts=1, num_experts_per_tok=8, n_group=8, topk_group=4,
                   first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=32, kv_lora_rank=32,
                   qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                   routed_scaling_factor=2.5, scoring_func="sigmoid", topk_method="noaux_tc",
                   norm_topk_prob=True, vocab_size=256, max_position_embeddings=512,
                   rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                   torch_dtype="bfloat16")


def build(config: dict, layers: int, tp: int = 1):
    """vLLM's model for `config` with `layers` decoder layers, on the CPU; with tp > 1, experts
    spread over the TP ranks (expert parallelism), the process group already initialised."""
    directory = tempfile.mkdtemp()
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(dict(config, num_hidden_layers=layers), f)
    model_config = ModelConfig(model=directory, skip_tokenizer_init=True, dtype="bfloat16",
                               enforce_eager=True)
    parallel = ParallelConfig(tensor_parallel_size=tp, enable_expert_parallel=tp > 1)
    vllm_config = VllmConfig(model_config=model_config, device_config=DeviceConfig("cpu"),
                             parallel_config=parallel)
    from vllm.model_executor.model_loader.utils import initialize_model
    with set_current_vllm_config(vllm_config):
        return initialize_model(vllm_config=vllm_config), vllm_config


def hf_checkpoint(config: dict, layers: int) -> dict[str, torch.Tensor]:
    """The HF checkpoint of the tiny model: every tensor NeMo RL would send, by its HF name."""
    h, v = config["hidden_size"], config["vocab_size"]
    t = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    deepseek = config["model_type"] == "deepseek_v3"
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (h,)
        t[p + "post_attention_layernorm.weight"] = (h,)
        heads = config["num_attention_heads"]
        if deepseek:
            qk = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
            q_lora, kv_lora = config["q_lora_rank"], config["kv_lora_rank"]
            t[p + "self_attn.q_a_proj.weight"] = (q_lora, h)
            t[p + "self_attn.q_a_layernorm.weight"] = (q_lora,)
            t[p + "self_attn.q_b_proj.weight"] = (heads * qk, q_lora)
            t[p + "self_attn.kv_a_proj_with_mqa.weight"] = (kv_lora + config["qk_rope_head_dim"], h)
            t[p + "self_attn.kv_a_layernorm.weight"] = (kv_lora,)
            t[p + "self_attn.kv_b_proj.weight"] = (
                heads * (config["qk_nope_head_dim"] + config["v_head_dim"]), kv_lora)
            t[p + "self_attn.o_proj.weight"] = (h, heads * config["v_head_dim"])
            experts = config["n_routed_experts"] if i >= config["first_k_dense_replace"] else 0
        else:
            d, kv = config["head_dim"], config["num_key_value_heads"]
            t[p + "self_attn.q_proj.weight"] = (heads * d, h)
            t[p + "self_attn.k_proj.weight"] = (kv * d, h)
            t[p + "self_attn.v_proj.weight"] = (kv * d, h)
            t[p + "self_attn.o_proj.weight"] = (h, heads * d)
            t[p + "self_attn.q_norm.weight"] = (d,)
            t[p + "self_attn.k_norm.weight"] = (d,)
            experts = config["num_experts"]
        if experts == 0:
            m = config["intermediate_size"]
            for name, shape in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
                t[p + f"mlp.{name}.weight"] = shape
            continue
        m = config["moe_intermediate_size"]
        t[p + "mlp.gate.weight"] = (experts, h)
        if deepseek:
            t[p + "mlp.gate.e_score_correction_bias"] = (experts,)
            for name, shape in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
                t[p + f"mlp.shared_experts.{name}.weight"] = shape
        for e in range(experts):
            for name, shape in (("gate_proj", (m, h)), ("up_proj", (m, h)), ("down_proj", (h, m))):
                t[p + f"mlp.experts.{e}.{name}.weight"] = shape
    return {name: torch.randn(shape, dtype=torch.bfloat16) for name, shape in t.items()}


def time_load(model, vllm_config, weights: dict[str, torch.Tensor], repeats: int) -> float:
    """Best wall time of `repeats` calls of model.load_weights over every tensor, in seconds.
    Fails unless every parameter of the model was loaded (a checkpoint name vLLM skipped would
    time nothing)."""
    best = float("inf")
    expected = {name for name, _ in model.named_parameters()}
    with set_current_vllm_config(vllm_config):
        for _ in range(repeats):
            begin = time.perf_counter()
            loaded = model.load_weights(iter(weights.items()))
            best = min(best, time.perf_counter() - begin)
            if expected - set(loaded):
                raise RuntimeError(f"parameters not loaded: {sorted(expected - set(loaded))}")
    return best


def per_tensor_seconds(model, vllm_config, weights: dict[str, torch.Tensor]) -> dict[str, float]:
    """Seconds load_weights spends on each tensor: the gap until it asks for the next one."""
    stamps = []

    def handed():
        for name, tensor in weights.items():
            stamps.append((name, time.perf_counter()))
            yield name, tensor
        stamps.append(("", time.perf_counter()))

    with set_current_vllm_config(vllm_config):
        model.load_weights(handed())
    return {name: t1 - t0 for (name, t0), (_, t1) in zip(stamps, stamps[1:])}


def ep_rank(rank: int, world: int, port: int, layers: int, repeats: int) -> None:
    """One rank of --ep: Qwen3-MoE over TP=EP `world`; prints its per-category medians (best of
    `repeats` passes per tensor). vLLM places experts linearly: rank r holds experts
    [r * E / world, (r + 1) * E / world)."""
    config = QWEN3_MOE
    parallel = ParallelConfig(tensor_parallel_size=world, enable_expert_parallel=True)
    with set_current_vllm_config(VllmConfig(parallel_config=parallel)):
        init_distributed_environment(world_size=world, rank=rank, local_rank=rank, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        initialize_model_parallel(world, 1)
    model, vllm_config = build(config, layers, tp=world)
    weights = hf_checkpoint(config, layers)
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, seconds in per_tensor_seconds(model, vllm_config, weights).items():
            best[name] = min(best.get(name, seconds), seconds)
    share = config["num_experts"] // world
    groups: dict[str, list[float]] = {}
    for name, seconds in best.items():
        kind = "rest"
        if ".experts." in name:
            expert = int(name.split(".experts.")[1].split(".")[0])
            kind = "own experts" if expert // share == rank else "other ranks' experts"
        groups.setdefault(kind, []).append(seconds)
    for kind, values in sorted(groups.items()):
        print(f"qwen3-moe ep={world} rank {rank}: {kind}: {len(values)} tensors, median "
              f"{statistics.median(values) * 1e6:.1f} us a tensor", flush=True)


def run_ep(world: int, layers: int, repeats: int) -> int:
    """Starts `world` ranks of this script (--rank), waits for them (at most 600 s) and returns
    the first failure's exit code."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [subprocess.Popen([sys.executable, __file__, "--ep", str(world), "--rank", str(r),
                               "--port", str(port), "--layers", str(layers),
                               "--repeats", str(repeats)]) for r in range(world)]
    codes = []
    for p in ranks:
        try:
            codes.append(p.wait(timeout=600))
        except subprocess.TimeoutExpired:
            for q in ranks:
                q.kill()
            return 1
    return next((c for c in codes if c != 0), 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=3, help="decoder layers a model")
    parser.add_argument("--repeats", type=int, default=5, help="passes a model; the best counts")
    parser.add_argument("--ep", type=int, default=1, help="ranks of expert parallelism (Qwen3-MoE)")
    parser.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.ep > 1 and args.rank < 0:
        return run_ep(args.ep, args.layers, args.repeats)
    if args.ep > 1:
        ep_rank(args.rank, args.ep, args.port, args.layers, args.repeats)
        return 0
    models = (("qwen3-moe", QWEN3_MOE), ("deepseek-v3", DEEPSEEK_V3))
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:0")
        initialize_model_parallel(1, 1)
    for name, config in models:
        model, vllm_config = build(config, args.layers)
        weights = hf_checkpoint(config, args.layers)
        seconds = time_load(model, vllm_config, weights, args.repeats)
        print(f"{name}: {len(weights)} tensors, {args.layers} layers, {seconds:.4f} s a pass, "
              f"{seconds / len(weights) * 1e6:.1f} us a tensor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
