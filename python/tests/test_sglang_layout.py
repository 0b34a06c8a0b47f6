"""ferry's SGLang layouts against SGLang itself: for each case, SGLang 0.5.23 (PyPI, in the
environment tools/deps/vllm-venv.sh makes, named by FERRY_VLLM_VENV) builds one rank of a server
with its own model class and loads random checkpoint tensors with its own load_weights; ferry's
layout of that server must name the same parameters, size them alike and put every checkpoint
byte where SGLang's loader put it, and ferry.sglang_spec of the case's ServerArgs must give that
layout (python/tests/sglang_layout_worker.py). The models are tiny
configs of the real architectures (sglang_harness.py); each case is one process on the CPU.
"""

from __future__ import annotations

import json
import os

import pytest

from procs import run_layout_cases
from sglang_harness import MODELS

WORKER = os.path.join(os.path.dirname(__file__), "sglang_layout_worker.py")

# (model, ferry spec, world rank, SGLang server arguments)
CASES = [
    # 1010 rows pad to 1152 over 3 ranks (64 does not divide by 3); one KV head a rank
    ("llama", "sglang:tp=3", 2, {"tp_size": 3}),
    # three KV heads over six ranks: each replicated on two
    ("llama", "sglang:tp=6", 5, {"tp_size": 6}),
    ("qwen3", "sglang:tp=2", 1, {"tp_size": 2}),
    ("qwen2", "sglang:tp=2", 1, {"tp_size": 2}),
    # attention DP: attention and embed_tokens over {0,1} and {2,3}; experts over ep=2, moe_tp=2
    ("qwen3_moe", "sglang:tp=4,attn_dp=2,ep=2", 3,
     {"tp_size": 4, "attn_dp_size": 2, "ep_size": 2}),
    # the older spelling of the same server
    ("qwen3_moe", "sglang:tp=4,dp=2,dp_attention=yes,ep=2", 2,
     {"tp_size": 4, "dp_size": 2, "enable_dp_attention": True, "ep_size": 2}),
    # 132 physical experts over ep=4: rank 3 holds 99..127 and replicas of 0..3
    ("qwen3_moe", "sglang:tp=4,ep=4,redundant=4", 3,
     {"tp_size": 4, "ep_size": 4, "ep_num_redundant_experts": 4}),
    # the shared expert fused after the 256 routed ones (SGLang's GPU default; on the CPU it
    # fuses only when told to)
    ("deepseek_v3", "sglang:tp=2", 1, {"tp_size": 2, "enforce_shared_experts_fusion": True}),
    # dense MLP whole on every rank, lm_head over the attention group, shared expert apart
    ("deepseek_v3", "sglang:tp=4,attn_dp=2,dense_tp=1,dp_lm_head=yes,shared_experts=separate", 3,
     {"tp_size": 4, "attn_dp_size": 2, "moe_dense_tp_size": 1, "enable_dp_lm_head": True,
      "disable_shared_experts_fusion": True}),
    # Pipeline parallelism, world rank tp * pp_rank + tp_rank, one layer a PP rank. Llama builds
    # lm_head on every PP rank: the first (embed_tokens, layer 0) and the last (layer 1, norm).
    ("llama", "sglang:tp=3,pp=2", 2, {"tp_size": 3, "pp_size": 2}),
    ("llama", "sglang:tp=3,pp=2", 5, {"tp_size": 3, "pp_size": 2}),
    # tied Qwen3: the last PP rank's own lm_head, loaded from embed_tokens; the first has none
    ("qwen3", "sglang:tp=1,pp=2", 0, {"tp_size": 1, "pp_size": 2}),
    ("qwen3", "sglang:tp=2,pp=2", 3, {"tp_size": 2, "pp_size": 2}),
    # Qwen3-MoE: lm_head on every PP rank, the experts over the stage's own ranks
    ("qwen3_moe", "sglang:tp=2,pp=2,ep=2", 2, {"tp_size": 2, "pp_size": 2, "ep_size": 2}),
    # DeepSeek-V3: the MoE layer, norm and lm_head on the last PP rank
    ("deepseek_v3", "sglang:tp=2,pp=2", 3,
     {"tp_size": 2, "pp_size": 2, "enforce_shared_experts_fusion": True}),
    # attention DP of dense models, by class: Llama's attention and embed_tokens over all tp
    # ranks, lm_head over the attention group; Qwen2's attention and lm_head over all tp,
    # embed_tokens over the group; Qwen3's attention and (tied) embed_tokens over the group
    ("llama", "sglang:tp=6,attn_dp=2,dp_lm_head=yes", 4,
     {"tp_size": 6, "attn_dp_size": 2, "enable_dp_lm_head": True}),
    ("qwen2", "sglang:tp=2,attn_dp=2,dp_lm_head=yes", 1,
     {"tp_size": 2, "attn_dp_size": 2, "enable_dp_lm_head": True}),
    ("qwen3", "sglang:tp=4,attn_dp=2,dp_lm_head=yes", 3,
     {"tp_size": 4, "attn_dp_size": 2, "enable_dp_lm_head": True}),
    # DeepEP: expert parallelism over all tp ranks, DeepSeek's shared expert whole on each
    ("deepseek_v3", "sglang:tp=2,a2a=deepep", 1, {"tp_size": 2, "moe_a2a_backend": "deepep"}),
    ("qwen3_moe", "sglang:tp=4,attn_dp=2,a2a=deepep", 3,
     {"tp_size": 4, "attn_dp_size": 2, "moe_a2a_backend": "deepep"}),
    # the NextN draft (DeepseekV3ForCausalLMNextN, the checkpoint's MTP layer) beside the target,
    # sharing its embed_tokens and lm_head: sharded as the target's MoE layers, with the shared
    # expert fused, under attention DP and EP with it apart, and under DeepEP
    ("deepseek_v3_nextn", "sglang:tp=2,mtp=1", 1,
     {"tp_size": 2, "enforce_shared_experts_fusion": True}),
    ("deepseek_v3_nextn", "sglang:tp=4,attn_dp=2,ep=2,shared_experts=separate,mtp=1", 3,
     {"tp_size": 4, "attn_dp_size": 2, "ep_size": 2, "disable_shared_experts_fusion": True}),
    ("deepseek_v3_nextn", "sglang:tp=2,a2a=deepep,mtp=1", 0,
     {"tp_size": 2, "moe_a2a_backend": "deepep"}),
    # with PP the draft is on the last stage, with its own embed_tokens (the target's is on the
    # first), loaded from the checkpoint's model.embed_tokens
    ("deepseek_v3_nextn", "sglang:tp=2,pp=2,mtp=1", 3,
     {"tp_size": 2, "pp_size": 2, "enforce_shared_experts_fusion": True}),
    # FP8 block-quantized checkpoints (quant=fp8_block): every decoder projection fp8 beside its
    # float32 weight_scale_inv as loaded; MLA's fused_qkv_a_proj_with_mqa with the scales its
    # loader concatenates; experts over ep=2 with FFN shards under attention DP; DeepSeek-V3's
    # shared expert fused after its 256 routed ones, scales and all
    ("qwen3_fp8", "sglang:tp=2,quant=fp8_block", 1, {"tp_size": 2}),
    ("qwen3_moe_fp8", "sglang:tp=4,attn_dp=2,ep=2,quant=fp8_block", 3,
     {"tp_size": 4, "attn_dp_size": 2, "ep_size": 2}),
    ("deepseek_v3_fp8", "sglang:tp=2,quant=fp8_block", 1,
     {"tp_size": 2, "enforce_shared_experts_fusion": True}),
    # with the NextN draft: its decoder fp8, its eh_proj (an nn.Linear for fp8) in bf16
    ("deepseek_v3_fp8_nextn", "sglang:tp=2,mtp=1,quant=fp8_block", 1,
     {"tp_size": 2, "enforce_shared_experts_fusion": True}),
]


def sglang_python() -> str:
    venv = os.environ.get("FERRY_VLLM_VENV", "")
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, ".ferry-requirements")
    if not venv or not os.path.exists(stamp) or "sglang==" not in open(stamp).read():
        pytest.skip(f"no SGLang environment at FERRY_VLLM_VENV={venv!r}: tools/deps/vllm-venv.sh "
                    "makes it (.ci/run does)")
    return python


# Cases run at once: each process holds SGLang (about 0.7 GB), and the machines that run the
# suite have 2 cores and 24 GB beside the other tests.
BATCH = 8


def test_sglang_loads_its_checkpoint_where_ferrys_layout_says(tmp_path):
    python = sglang_python()
    for name, (config, _) in MODELS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))

    def argv(case):
        model, spec, rank, server_args = case
        return [WORKER, str(tmp_path / model), spec, str(rank), json.dumps(server_args),
                MODELS[model][1]]

    failed = run_layout_cases(CASES, argv, BATCH, python)
    assert not failed, "\n".join(failed)
