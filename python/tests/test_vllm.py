"""The vLLM backend (ferry.vllm) through vLLM's real weight-transfer interface: vLLM 0.33.0 from
PyPI in the environment tools/deps/vllm-venv.sh makes (named by FERRY_VLLM_VENV), its factories
creating ferry's engines, a TP2 Megatron-style trainer (2 processes) refitting two TP2 vLLM
replicas (4 processes), three steps; every worker checks every parameter byte for byte against
what vLLM's loaders make of that step's checkpoint (vllm_worker.py). Once with a Llama built
from vLLM's own layers, once each with vLLM's own Qwen3-MoE and DeepSeek-V3 (MLA) classes under
expert parallelism; and the
worker layouts of Qwen3-MoE and DeepSeek-V3 (MLA's derived weights included) in several engine
configurations, refitted in place, against vLLM's load_weights (vllm_moe_layout_worker.py).
Skipped, saying so, where the environment is missing. Slow: rank
processes import vLLM and torch (about 1-2 minutes each on 2 idle cores, //python:vllm_test);
children are killed at the deadline."""

import json
import os
import re
import subprocess

import pytest

from procs import assert_all_ok, run_ranks
from sglang_harness import DEEPSEEK_V3

WORKER = os.path.join(os.path.dirname(__file__), "vllm_worker.py")

# Nemotron-H's hybrid pattern at tiny widths: Mamba-2, MLP, attention, MLP, Mamba-2, MLP. The
# checkpoints' own configs name the attention head size attention_head_dim; transformers'
# NemotronHConfig, which vLLM reads, takes head_dim (default 128), so both are given.
NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
              "hybrid_override_pattern": "M-*-M-", "num_hidden_layers": 6, "hidden_size": 32,
              "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "attention_head_dim": 8, "mamba_num_heads": 8, "mamba_head_dim": 8,
              "n_groups": 2, "ssm_state_size": 8, "conv_kernel": 4, "expand": 2,
              "chunk_size": 128, "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2",
              "attention_bias": False, "mlp_bias": False, "use_bias": False,
              "mamba_proj_bias": False, "use_conv_bias": True, "residual_in_fp32": False,
              "layer_norm_epsilon": 1e-5, "vocab_size": 1000, "tie_word_embeddings": False,
              "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}

RANKS, STEPS = 6, 3  # 2 trainer ranks + 2 x TP2 workers; vllm_worker.STEPS


def vllm_python() -> str:
    venv = os.environ.get("FERRY_VLLM_VENV", "")
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(os.path.join(venv, ".ferry-requirements")):
        pytest.skip(f"no vLLM environment at FERRY_VLLM_VENV={venv!r}: tools/deps/vllm-venv.sh "
                    "makes it (.ci/run does)")
    return python


@pytest.mark.parametrize("model,parameters", [("llama", 15), ("qwen3_moe", 21),
                                              ("deepseek_v3", 31)])
def test_vllm_workers_receive_the_trainers_weights_byte_exact(tmp_path, model, parameters):
    python = vllm_python()
    results = run_ranks(lambda rank, port: [WORKER, str(rank), str(port), str(tmp_path), model],
                        RANKS, deadline_s=600, python=python)
    assert_all_ok(results)
    for r in results[2:]:
        for step in range(STEPS):
            assert re.search(rf"worker rank {r.rank} step {step}: {parameters} parameters "
                             "byte-exact", r.output), r.output
    for r in results[:2]:
        assert f"trainer rank {r.rank} step {STEPS - 1}: sent" in r.output, r.output


def test_moe_worker_layouts_match_vllms_own_loaders(tmp_path):
    python = vllm_python()
    layout_worker = os.path.join(os.path.dirname(__file__), "vllm_moe_layout_worker.py")
    for name, config in {"deepseek_v3": DEEPSEEK_V3, "nemotron_h": NEMOTRON_H}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    result = subprocess.run([python, layout_worker, str(tmp_path), str(tmp_path / "deepseek_v3"),
                             str(tmp_path / "nemotron_h")],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    for case in ("tp=2 dp=1 ep=False: 2 workers", "tp=2 dp=2 ep=False: 4 workers",
                 "tp=4 dp=1 ep=True: 4 workers", "tp=2 dp=2 ep=True: 4 workers"):
        assert f"qwen3_moe {case}, 21 parameters each byte-exact" in result.stdout, result.stdout
    # DeepSeek-V3's 27 parameters and, in each of its 2 MLA layers, W_UV and W_UK_T
    for case in ("deepseek_v3 tp=2 dp=1 ep=False: 2 workers",
                 "deepseek_v3 tp=2 dp=2 ep=True: 4 workers"):
        assert f"{case}, 31 parameters each byte-exact" in result.stdout, result.stdout
    # vLLM's own MLA weights derived as copies, and its own Nemotron-H: refused, layers named
    assert re.search(r"refused MLA copies: vLLM module \S*mla_attn: MLA keeps W_UV, W_UK_T as "
                     "copies of kv_b_proj", result.stdout), result.stdout
    assert re.search(r"refused \S*nemotron_h: vLLM module model.layers.0.mixer: a Mamba-2 mixer",
                     result.stdout), result.stdout
