"""The vLLM backend (ferry.vllm) through vLLM's real weight-transfer interface: vLLM 0.33.0 from
PyPI in the environment tools/deps/vllm-venv.sh makes (named by FERRY_VLLM_VENV), its factories
creating ferry's engines, a TP2 Megatron-style trainer (2 processes) refitting two TP2 vLLM
replicas (4 processes), three steps; every worker checks every parameter byte for byte against
what vLLM's loaders make of that step's checkpoint (vllm_worker.py). Once with a Llama built
from vLLM's own layers, once each with vLLM's own Qwen3-MoE and DeepSeek-V3 (MLA) classes under
expert parallelism (Qwen3-MoE also under EPLB, its experts moved between two updates;
DeepSeek-V3 also with its MTP drafter, updated in vLLM's draft sessions, and that again under
EPLB),
once with vLLM's own Nemotron-H (Mamba-2), twice with vLLM's own Llama
of an FP8 block-quantized checkpoint (the refit quantizes; float32 scales, then DeepGEMM's E8M0
ones), once each with vLLM's own Qwen3-MoE (FP8 experts) and DeepSeek-V3 (MLA's weights copies
of the FP8 kv_b_proj, derived again; and with its MTP drafter) of one, and with the first two
served from a bf16 checkpoint that vLLM quantizes as it loads (--quantization fp8_per_block)
(the FP8 cases are //python:vllm_fp8_test and :vllm_fp8_moe_test); and the worker layouts of Llama, Qwen2, Qwen3,
Qwen3-MoE, DeepSeek-V3 (MLA's derived weights included) and Nemotron-H in several engine
configurations, refitted in place, against vLLM's load_weights (vllm_refit_layout_worker.py);
and ferry.vllm.FerryHTTPClient's draft session against a recording HTTP server
(vllm_http_client_check.py), FerryRayClient's against Ray actors built on vLLM's own
RLOfflineMixin (vllm_ray_client_check.py).
Skipped, saying so, where the environment is missing. Slow: rank processes import vLLM and torch
(about 1-2 minutes each on 2 idle cores); children are killed at the deadline."""

import os
import re
import subprocess

import pytest

from procs import assert_all_ok, run_ranks

WORKER = os.path.join(os.path.dirname(__file__), "vllm_worker.py")

RANKS, STEPS = 6, 3  # 2 trainer ranks + 2 x TP2 workers; vllm_worker.STEPS
# The MTP drafter's (deepseek_mtp.py DeepSeekMTP): its MoE decoder layer's 16 as the target's,
# enorm, hnorm, eh_proj, shared_head.norm, and the target's embed_tokens and lm_head it shares
DRAFTER_PARAMETERS = {"deepseek_v3_mtp": 22, "deepseek_v3_fp8_mtp": 30,
                      "deepseek_v3_mtp_eplb": 22}


def vllm_python() -> str:
    venv = os.environ.get("FERRY_VLLM_VENV", "")
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(os.path.join(venv, ".ferry-requirements")):
        pytest.skip(f"no vLLM environment at FERRY_VLLM_VENV={venv!r}: tools/deps/vllm-venv.sh "
                    "makes it (.ci/run does)")
    return python


# (FP8 layers: each weight with its weight_scale_inv; Qwen3-MoE's router and experts too)
@pytest.mark.parametrize("model,parameters", [("llama", 15), ("qwen3_moe", 21),
                                              ("qwen3_moe_eplb", 21),
                                              ("deepseek_v3", 31), ("nemotron_h", 33),
                                              ("llama_fp8", 23), ("llama_fp8_ue8m0", 23),
                                              ("llama_fp8_ue8m0_packed", 23),
                                              ("llama_fp8_online", 23), ("qwen3_moe_fp8", 31),
                                              ("qwen3_moe_fp8_online", 31),
                                              ("qwen3_moe_fp8_ue8m0_packed", 31),
                                              ("deepseek_v3_fp8", 45),
                                              ("deepseek_v3_mtp", 31),
                                              ("deepseek_v3_mtp_eplb", 31),
                                              ("deepseek_v3_fp8_mtp", 45)])
def test_vllm_workers_receive_the_trainers_weights_byte_exact(tmp_path, model, parameters):
    python = vllm_python()
    results = run_ranks(lambda rank, port: [WORKER, str(rank), str(port), str(tmp_path), model],
                        RANKS, deadline_s=600, python=python)
    assert_all_ok(results)
    for r in results[2:]:
        for step in range(STEPS):
            assert re.search(rf"worker rank {r.rank} step {step}: {parameters} parameters "
                             "byte-exact", r.output), r.output
            if model in DRAFTER_PARAMETERS:  # each step's draft session, after the model's
                assert re.search(rf"worker rank {r.rank} step {step}: drafter "
                                 rf"{DRAFTER_PARAMETERS[model]} parameters byte-exact",
                                 r.output), r.output
    for r in results[:2]:
        assert f"trainer rank {r.rank} step {STEPS - 1}: sent" in r.output, r.output
    # Under EPLB the workers' experts move before step 1: every rank plans again then, only then,
    # and for the drafter's update too
    moved = {1} if model.endswith("_eplb") else set()
    for r in results:
        for what in ("", "drafter ") if model in DRAFTER_PARAMETERS else ("",):
            again = re.findall(rf"rank {r.rank} step (\d+): {what}planned again", r.output)
            assert {int(s) for s in again} == moved, r.output
    if model in DRAFTER_PARAMETERS:  # a draft update in the model's session, refused
        assert re.search("mismatched update refused: update_weights failed on a worker: "
                         "ValueError: the trainer sent a draft update but this worker's weight "
                         "update session targets the model", results[0].output), results[0].output


@pytest.mark.parametrize("client,timeout", [("http", 120), ("ray", 180)])
def test_client_opens_vllms_draft_sessions(client, timeout):
    python = vllm_python()
    check = os.path.join(os.path.dirname(__file__), f"vllm_{client}_client_check.py")
    result = subprocess.run([python, check], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0 and f"{client} client: ok" in result.stdout, \
        result.stdout + result.stderr


def test_worker_layouts_refit_in_place_as_vllms_own_loaders_load(tmp_path):
    python = vllm_python()
    layout_worker = os.path.join(os.path.dirname(__file__), "vllm_refit_layout_worker.py")
    result = subprocess.run([python, layout_worker, str(tmp_path)], capture_output=True,
                            text=True, timeout=300, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    # (model case, parameters a worker has): DeepSeek-V3's 27 and, in each of its 2 MLA layers,
    # W_UV and W_UK_T (views of kv_b_proj, or with fp32 activations copies the worker derives);
    # Nemotron-H's 2 Mamba-2 mixers (A as -exp(A_log)), 3 MLPs and attention
    cases = [("llama tp=2 dp=1 ep=False: 2 workers", 15),
             ("qwen2 tp=2 dp=1 ep=False: 2 workers", 17),
             ("qwen3 tp=2 dp=1 ep=False: 2 workers", 18),
             ("qwen3_moe tp=2 dp=1 ep=False: 2 workers", 21),
             ("qwen3_moe tp=2 dp=2 ep=False: 4 workers", 21),
             ("qwen3_moe tp=4 dp=1 ep=True: 4 workers", 21),
             ("qwen3_moe tp=2 dp=2 ep=True: 4 workers", 21),
             ("deepseek_v3 tp=2 dp=1 ep=False: 2 workers", 31),
             ("deepseek_v3 tp=2 dp=2 ep=True: 4 workers", 31),
             ("deepseek_v3_mla_copies tp=2 dp=1 ep=False: 2 workers", 31),
             ("nemotron_h tp=2 dp=1 ep=False: 2 workers", 33),
             ("nemotron_h tp=1 dp=1 ep=False: 1 workers", 33),
             ("nemotron_h_one_group tp=2 dp=1 ep=False: 2 workers", 33)]
    for case, parameters in cases:
        assert f"{case}, {parameters} parameters each byte-exact" in result.stdout, result.stdout
    # vLLM's CPU expert kernel: refused, the layer named
    assert re.search(r"refused the CPU MoE kernel: vLLM parameter \S*routed_experts.w13_weight: "
                     "the CPU MoE kernel rearranges the expert weights",
                     result.stdout), result.stdout
