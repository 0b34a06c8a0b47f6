"""ferry.megatron_spec, vllm_spec, sglang_spec: framework specs from the frameworks' config objects.

The objects stand in for Megatron-Core's TransformerConfig and DistributedDataParallelConfig and
vLLM's ParallelConfig, with their field names (megatron/core/model_parallel_config.py,
transformer/transformer_config.py, distributed/distributed_data_parallel_config.py;
vllm/config/parallel.py); every spec is then built into a layout, so the keys are ones ferry takes.
"""

from types import SimpleNamespace

import pytest

import ferry


def megatron_config(**fields):
    base = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                virtual_pipeline_model_parallel_size=None, context_parallel_size=1,
                expert_model_parallel_size=1, expert_tensor_parallel_size=None,
                num_layers_in_first_pipeline_stage=None, num_layers_in_last_pipeline_stage=None,
                pipeline_model_parallel_layout=None, num_moe_experts=None, moe_grouped_gemm=False,
                mtp_num_layers=None, mtp_use_repeated_layer=False)
    base.update(fields)
    return SimpleNamespace(**base)


def test_a_dense_trainer():
    spec = ferry.megatron_spec(megatron_config(tensor_model_parallel_size=2,
                                               pipeline_model_parallel_size=2))
    assert spec == "megatron:tp=2,pp=2,ep=1,cp=1,vocab_divisible_by=128"
    layout = ferry.Layout.preset("llama-3.1-8b", spec, scale="1/64")
    assert layout.ranks == [0, 1, 2, 3]


def test_deepseek_v3_as_the_nemo_rl_recipe_runs_it():
    # NeMo RL's DeepSeek-V3 recipe: PP16 with 3 and 2 layers on the first and last stage, EP16,
    # grouped GEMM experts, the distributed optimizer, Megatron-Bridge's unpadded vocabulary.
    config = megatron_config(pipeline_model_parallel_size=16, expert_model_parallel_size=16,
                             expert_tensor_parallel_size=1,
                             num_layers_in_first_pipeline_stage=3,
                             num_layers_in_last_pipeline_stage=2, num_moe_experts=256,
                             moe_grouped_gemm=True)
    ddp = SimpleNamespace(use_distributed_optimizer=True, overlap_grad_reduce=True)
    spec = ferry.megatron_spec(config, ddp, pad_vocab=False)
    assert spec == ("megatron:tp=1,pp=16,first=3,last=2,ep=16,etp=1,cp=1,experts=grouped,"
                    "buffers=distopt,overlap_grad_reduce=yes,vocab_divisible_by=128,pad_vocab=no")
    layout = ferry.Layout.preset("deepseek-v3", spec, scale="1/64")
    assert len(layout.ranks) == 256  # dp 16 by default: the smallest that EP16 x ETP1 divides


def test_expert_modules_and_the_layout_string():
    grouped = dict(num_moe_experts=128, moe_grouped_gemm=True)
    assert "experts=sequential" in ferry.megatron_spec(megatron_config(num_moe_experts=128))
    assert "experts=single_grouped" in ferry.megatron_spec(
        megatron_config(moe_single_grouped_weight=True, **grouped))
    assert "experts=legacy_grouped" in ferry.megatron_spec(
        megatron_config(moe_use_legacy_grouped_gemm=True, **grouped))
    spec = ferry.megatron_spec(megatron_config(pipeline_model_parallel_size=2,
                                               virtual_pipeline_model_parallel_size=2,
                                               pipeline_model_parallel_layout="Et*3|(tt|)*29,|L"))
    assert spec.endswith(",layout=Et*3|(tt|)*29,|L") and "vstages" not in spec


def test_bad_fields_are_named():
    with pytest.raises(ValueError, match="tensor_model_parallel_size"):
        ferry.megatron_spec(megatron_config(tensor_model_parallel_size="2"))
    with pytest.raises(ValueError, match="pipeline_model_parallel_layout"):
        ferry.megatron_spec(megatron_config(pipeline_model_parallel_layout=["E", "t"]))
    with pytest.raises(ValueError, match="expert_placement_strategy"):
        ferry.vllm_spec(SimpleNamespace(enable_expert_parallel=True,
                                        expert_placement_strategy="random"))
    with pytest.raises(ValueError, match="engines"):
        ferry.vllm_spec(SimpleNamespace(), engines=0)


def test_vllm_engines():
    # TP8 x DP2 with expert parallelism: FusedMoE spans tp * dp = 16 ranks.
    parallel = SimpleNamespace(tensor_parallel_size=8, pipeline_parallel_size=1,
                               data_parallel_size=2, enable_expert_parallel=True,
                               expert_placement_strategy="linear", enable_eplb=False)
    spec = ferry.vllm_spec(parallel, engines=2)
    assert spec == "vllm:tp=8,pp=1,dp=2,ep=16,engines=2"
    layout = ferry.Layout.preset("qwen3-30b-a3b", spec, scale="1/64")
    assert len(layout.ranks) == 32
    parallel.enable_eplb = True
    parallel.eplb_config = SimpleNamespace(num_redundant_experts=16)
    assert ferry.vllm_spec(parallel).endswith(",ep=16,redundant=16,engines=1")
    assert ferry.vllm_spec(SimpleNamespace(tensor_parallel_size=2)) == "vllm:tp=2,pp=1,dp=1,engines=1"


def test_vllm_mtp_drafter():
    # vllm/config/speculative.py: method "mtp" (deepseek_mtp normalized to it), the draft config's
    # n_predict MTP layers (DeepSeek-V3's num_nextn_predict_layers: 1)
    parallel = SimpleNamespace(tensor_parallel_size=2)
    speculative = SimpleNamespace(method="mtp", draft_model_config=SimpleNamespace(
        hf_config=SimpleNamespace(n_predict=1)))
    spec = ferry.vllm_spec(parallel, speculative_config=speculative)
    assert spec == "vllm:tp=2,pp=1,dp=1,mtp=1,engines=1"
    layout = ferry.Layout.preset("deepseek-v3", spec, scale="1/256")
    assert any(t.name.startswith("model.layers.61.eh_proj") for t in layout.tensors)
    with pytest.raises(ValueError, match="method 'eagle3'.*MTP drafter only"):
        ferry.vllm_spec(parallel, speculative_config=SimpleNamespace(method="eagle3"))


def test_vllm_all_to_all_backends():
    # vLLM 0.33's expert_map_manager.py determine_expert_placement_strategy: with dp > 1,
    # round-robin placement holds only under the DeepEP low-latency or NIXL EP backends.
    parallel = SimpleNamespace(tensor_parallel_size=4, data_parallel_size=2,
                               enable_expert_parallel=True, expert_placement_strategy="round_robin")
    assert ferry.vllm_spec(parallel) == "vllm:tp=4,pp=1,dp=2,ep=8,engines=1"  # falls back
    parallel.all2all_backend = "deepep_low_latency"
    assert "placement=round_robin" in ferry.vllm_spec(parallel)
    parallel.data_parallel_size = 1
    parallel.all2all_backend = "allgather_reducescatter"
    assert ferry.vllm_spec(parallel) == "vllm:tp=4,pp=1,dp=1,ep=4,placement=round_robin,engines=1"
    # ParallelConfig.use_sequence_parallel_moe does not hold for "naive" with tp, dp > 1
    parallel.data_parallel_size, parallel.all2all_backend = 2, "naive"
    with pytest.raises(ValueError, match="all2all_backend 'naive'.*not modelled"):
        ferry.vllm_spec(parallel)


def test_sglang_attention_dp_and_expert_parallelism():
    # SGLang 0.5.23's ServerArgs field names (python/sglang/srt/server_args.py): attention DP
    # splits the server's 8 ranks into 2 attention groups; the experts go over ep=4, moe_tp = 2.
    args = SimpleNamespace(tp_size=8, pp_size=1, dp_size=1, attn_dp_size=2,
                           enable_dp_attention=False, ep_size=4, ep_num_redundant_experts=0,
                           moe_dense_tp_size=None, enable_dp_lm_head=True,
                           disable_shared_experts_fusion=False)
    spec = ferry.sglang_spec(args, engines=2)
    assert spec == "sglang:tp=8,pp=1,dp=1,attn_dp=2,ep=4,dp_lm_head=yes,engines=2"
    layout = ferry.Layout.preset("qwen3-30b-a3b", spec, scale="1/64")
    assert len(layout.ranks) == 16  # attention DP adds no ranks: 8 a server
    # The older --dp-size 2 --enable-dp-attention is attention DP 2 in one server.
    old = SimpleNamespace(tp_size=8, dp_size=2, enable_dp_attention=True, ep_size=4)
    assert ferry.sglang_spec(old) == "sglang:tp=8,pp=1,dp=1,attn_dp=2,ep=4,engines=1"
    args.attn_dp_size = 1
    args.dp_size = 2
    args.enable_dp_lm_head = False
    args.disable_shared_experts_fusion = True
    args.moe_dense_tp_size = 1
    assert ferry.sglang_spec(args) == ("sglang:tp=8,pp=1,dp=2,ep=4,dense_tp=1,"
                                       "shared_experts=separate,engines=1")
    with pytest.raises(ValueError, match="enable_dp_attention"):
        ferry.sglang_spec(SimpleNamespace(enable_dp_attention="yes"))
    with pytest.raises(ValueError, match="ep_size"):
        ferry.sglang_spec(SimpleNamespace(ep_size=-1))


def test_sglang_all_to_all_backend():
    # --moe-a2a-backend deepep: SGLang makes ep span the TP group whatever ep_size says
    args = SimpleNamespace(tp_size=4, ep_size=1, moe_a2a_backend="deepep")
    spec = ferry.sglang_spec(args)
    assert spec == "sglang:tp=4,pp=1,dp=1,ep=1,a2a=deepep,engines=1"
    layout = ferry.Layout.preset("deepseek-v3", spec, scale="1/64")
    names = {b.name for b in layout.buffers(3)}
    assert "model.layers.5.mlp.shared_experts.gate_up_proj.weight" in names  # whole on each rank
    assert ferry.sglang_spec(SimpleNamespace(moe_a2a_backend="none")).endswith(",ep=1,engines=1")
    with pytest.raises(ferry.InvalidArgumentError, match="a2a"):
        ferry.Layout.preset("deepseek-v3", ferry.sglang_spec(
            SimpleNamespace(tp_size=4, moe_a2a_backend="flashinfer")), scale="1/64")


def test_sglang_fp8_block_checkpoint():
    # SGLang reads the checkpoint's quantization_config from the model, not from ServerArgs
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    args = SimpleNamespace(tp_size=2, quantization=None)
    spec = ferry.sglang_spec(args, quantization_config=fp8)
    assert spec == "sglang:tp=2,pp=1,dp=1,ep=1,quant=fp8_block,engines=1"
    scales = {b.name: b.bytes for b in ferry.Layout.preset("deepseek-v3", spec).buffers(0)
              if b.name.endswith("_scale_inv")}
    # o_proj [7168, 64 heads x 128]: 56 x 64 float32 block scales
    assert scales["model.layers.0.self_attn.o_proj.weight_scale_inv"] == 56 * 64 * 4
    with pytest.raises(ferry.InvalidArgumentError, match="q_a_proj.weight \\(32 rows"):
        ferry.Layout.preset("deepseek-v3", spec, scale="1/64")  # q_lora_rank 1536 / 64
    assert ferry.sglang_spec(SimpleNamespace(quantization="fp8"), quantization_config=fp8)
    with pytest.raises(ValueError, match="128x128 blocks only"):  # per-channel or per-tensor
        ferry.sglang_spec(args, quantization_config={"quant_method": "fp8"})
    with pytest.raises(ValueError, match="128x128 blocks only"):
        ferry.sglang_spec(args, quantization_config={"quant_method": "awq", "bits": 4})
    with pytest.raises(ValueError, match="quantizes it as it loads"):
        ferry.sglang_spec(SimpleNamespace(quantization="fp8"))


def test_sglang_pipeline_parallelism():
    # pp_size from ServerArgs; the layers' split from SGLANG_PP_LAYER_PARTITION, passed as given
    args = SimpleNamespace(tp_size=2, pp_size=2)
    spec = ferry.sglang_spec(args, partition="12,36")
    assert spec == "sglang:tp=2,pp=2,partition=12.36,dp=1,ep=1,engines=1"
    layout = ferry.Layout.preset("qwen3-30b-a3b", spec, scale="1/64")
    assert len(layout.ranks) == 4
    # PP rank 0 (ranks 0, 1) holds layers 0..11, PP rank 1 (ranks 2, 3) layers 12..47
    names = {r: {b.name for b in layout.buffers(r)} for r in layout.ranks}
    assert "model.layers.11.self_attn.qkv_proj.weight" in names[1]
    assert "model.layers.12.self_attn.qkv_proj.weight" in names[2]
    assert "model.layers.12.self_attn.qkv_proj.weight" not in names[1]
    with pytest.raises(ValueError, match="partition"):
        ferry.sglang_spec(args, partition="12;36")
    with pytest.raises(ferry.InvalidArgumentError, match="SGLANG_PP_LAYER_PARTITION"):
        ferry.Layout.preset("qwen3-30b-a3b", ferry.sglang_spec(args, partition="12,12"),
                            scale="1/64")


def test_sglang_nextn_draft():
    # --speculative-algorithm NEXTN (or EAGLE, which it aliases) drafts with the served
    # checkpoint's MTP layer: a DeepSeek-V3 draft's path defaults to the model's
    # (arg_groups/speculative_hook.py _handle_eagle_family)
    for algorithm in ("NEXTN", "EAGLE"):
        args = SimpleNamespace(tp_size=2, model_path="/ckpt", speculative_algorithm=algorithm)
        assert ferry.sglang_spec(args) == "sglang:tp=2,pp=1,dp=1,ep=1,mtp=1,engines=1"
    args.speculative_draft_model_path = "/ckpt"
    assert ferry.sglang_spec(args).endswith(",mtp=1,engines=1")
    args.speculative_draft_model_path = "/eagle-heads"
    with pytest.raises(ValueError, match="NextN draft of the served checkpoint"):
        ferry.sglang_spec(args)
    with pytest.raises(ValueError, match="'EAGLE3'"):
        ferry.sglang_spec(SimpleNamespace(tp_size=2, speculative_algorithm="EAGLE3"))
    layout = ferry.Layout.preset("deepseek-v3", "sglang:tp=2,mtp=1", scale="1/64")
    assert "model.decoder.self_attn.kv_b_proj.weight" in {b.name for b in layout.buffers(0)}
