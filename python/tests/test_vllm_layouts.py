"""ferry's vLLM layouts against vLLM itself: for each case, vLLM 0.33.0 (PyPI, in the environment
tools/deps/vllm-venv.sh makes, named by FERRY_VLLM_VENV) builds one worker of an engine with the
model class its config names (and the MTP drafter beside it where speculative decoding runs one)
and loads random checkpoint tensors with its own load_weights; ferry's `vllm:` layout of that
engine must name the same parameters, size them alike and put every checkpoint byte where vLLM's
loaders put it, and ferry.vllm_spec of vLLM's own config objects must give that layout
(python/tests/vllm_layout_worker.py). The models are tiny configs of the real architectures, most
of them the SGLang tests' (sglang_harness.py); each case is one process on the CPU.
"""

from __future__ import annotations

import json
import os

from procs import run_layout_cases
from sglang_harness import DEEPSEEK_V3, LLAMA, NEMOTRON_H, QWEN2, QWEN3, QWEN3_MOE
from test_vllm import vllm_python

WORKER = os.path.join(os.path.dirname(__file__), "vllm_layout_worker.py")

# vLLM needs tp to divide the 64-padded vocabulary and the KV heads to divide tp or tp them:
# the SGLang tests' Llama (three KV heads, 1010 words) takes two KV heads here.
MODELS = {"llama": dict(LLAMA, num_key_value_heads=2),
          "llama_tied": dict(LLAMA, num_key_value_heads=2, tie_word_embeddings=True),
          "qwen3": QWEN3, "qwen2": QWEN2,
          "qwen3_moe": QWEN3_MOE, "deepseek_v3": DEEPSEEK_V3,
          "deepseek_v3_mtp": dict(DEEPSEEK_V3, num_nextn_predict_layers=1),
          "nemotron_h": NEMOTRON_H}

# (model, ferry spec, engine rank, vLLM parallel settings)
CASES = [
    # two KV heads over four ranks, each on two; rank 3's vocabulary rows [768, 1010) then padding
    ("llama", "vllm:tp=4", 3, {"tp": 4}),
    # tied embeddings (lm_head is embed_tokens); Qwen2's q/k/v biases, one KV head on both ranks
    ("qwen3", "vllm:tp=2", 1, {"tp": 2}),
    ("qwen2", "vllm:tp=2", 1, {"tp": 2}),
    # pipeline parallelism: the last stage's layer, norm and lm_head; tied Qwen3's first stage
    ("llama", "vllm:tp=2,pp=2", 2, {"tp": 2, "pp": 2}),
    ("llama_tied", "vllm:tp=2,pp=2", 2, {"tp": 2, "pp": 2}),  # tied: the last stage's own copy
    ("qwen3", "vllm:tp=2,pp=2", 0, {"tp": 2, "pp": 2}),
    # MoE without expert parallelism: every expert's FFN over tp x dp = 4 ranks; with it, whole
    # experts over the 4; under PP, over the stage's own ranks
    ("qwen3_moe", "vllm:tp=2,dp=2", 3, {"tp": 2, "dp": 2}),
    ("qwen3_moe", "vllm:tp=2,dp=2,ep=4", 2, {"tp": 2, "dp": 2, "ep": True}),
    ("qwen3_moe", "vllm:tp=2,pp=2,ep=2", 3, {"tp": 2, "pp": 2, "ep": True}),
    ("qwen3_moe", "vllm:tp=2,pp=2,dp=2,ep=4", 6, {"tp": 2, "pp": 2, "dp": 2, "ep": True}),
    # DeepSeek-V3: MLA's fused_qkv_a_proj, the shared expert over TP, the fp32 router bias
    ("deepseek_v3", "vllm:tp=2", 1, {"tp": 2}),
    # EP with tp and dp > 1 is sequence-parallel MoE: the shared expert whole on every rank
    ("deepseek_v3", "vllm:tp=2,dp=2,ep=4", 3, {"tp": 2, "dp": 2, "ep": True}),
    # round-robin placement (8 expert groups, dp 1): rank 1 holds experts 1, 5, 9, ...
    ("deepseek_v3", "vllm:tp=4,ep=4,placement=round_robin", 1,
     {"tp": 4, "ep": True, "placement": "round_robin"}),
    ("deepseek_v3", "vllm:tp=2,pp=2", 3, {"tp": 2, "pp": 2}),
    # EPLB before its first rearrangement: 256 + 2 physical experts, 129 a rank, the redundant
    # ones replicas of logical experts 0 and 1; Qwen3-MoE's 128 + 4 over tp x dp = 4
    ("deepseek_v3", "vllm:tp=2,ep=2,redundant=2", 1, {"tp": 2, "ep": True, "redundant": 2}),
    ("qwen3_moe", "vllm:tp=2,dp=2,ep=4,redundant=4", 3,
     {"tp": 2, "dp": 2, "ep": True, "redundant": 4}),
    # the MTP drafter (DeepSeekMTP, speculative method "mtp") on the last PP rank: the
    # checkpoint's layer 2 as model.layers.2.{enorm,hnorm,eh_proj,shared_head.norm,mtp_block},
    # sharing the target's lm_head and, with one PP rank, its embed_tokens (its own otherwise)
    ("deepseek_v3_mtp", "vllm:tp=2,mtp=1", 1, {"tp": 2, "mtp": True}),
    ("deepseek_v3_mtp", "vllm:tp=2,pp=2,mtp=1", 3, {"tp": 2, "pp": 2, "mtp": True}),
    ("deepseek_v3_mtp", "vllm:tp=2,dp=2,ep=4,mtp=1", 3,
     {"tp": 2, "dp": 2, "ep": True, "mtp": True}),
    # Nemotron-H: the Mamba-2 mixer's fused in_proj [z; x; B; C; dt] and conv1d [x; B; C] per
    # rank, its heads' A stored as A = -exp(A_log) in fp32; under PP the last stage's norm_f
    ("nemotron_h", "vllm:tp=2", 1, {"tp": 2}),
    ("nemotron_h", "vllm:tp=2,pp=2", 3, {"tp": 2, "pp": 2}),
]

# Cases run at once: each process holds vLLM (about 0.6 GB); the machines that run the suite have
# 2 cores and 24 GB beside the other tests.
BATCH = 6


def test_vllm_loads_its_checkpoint_where_ferrys_layout_says(tmp_path):
    python = vllm_python()
    for name, config in MODELS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))

    def argv(case):
        model, spec, rank, parallel = case
        return [WORKER, str(tmp_path / model), spec, str(rank), json.dumps(parallel)]

    failed = run_layout_cases(CASES, argv, BATCH, python)
    assert not failed, "\n".join(failed)
