"""The layouts of the vLLM backend without vLLM: the trainer's boxes from vLLM-style parameter
metadata (torch.chunk splits, 2-D meshes, replication) and a vLLM worker's boxes from modules
that carry the attributes vLLM's layers carry (fused QKV with replicated KV heads and Qwen2's
fused q/k/v biases, merged gate/up, row parallel, padded vocab), checked against hand-computed
boxes, and the errors that refuse what ferry cannot deliver. test_vllm.py runs both against vLLM
itself."""

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="the vLLM layouts are of torch modules")

from ferry import Layout, Shard
from ferry._source_layout import chunk_range, param_box, trainer_shards
from ferry._vllm_layout import engine_shards, eplb_placement


def meta(name, shape, owners=None, mesh_shape=None, placements=None):
    return SimpleNamespace(name=name, shape=shape, dtype=torch.bfloat16, owners=owners,
                           mesh_shape=mesh_shape, placements=placements)


def shard(dim):
    return SimpleNamespace(dim=dim)


REPLICATE = SimpleNamespace()


@pytest.mark.parametrize("n,parts", [(10, 4), (7, 3), (2, 4), (8, 2)])
def test_chunks_split_as_torch_chunk_does(n, parts):
    pieces = torch.arange(n).chunk(parts)
    for i in range(parts):
        start, stop = chunk_range(0, n, parts, i)
        want = pieces[i].tolist() if i < len(pieces) else []
        assert list(range(start, stop)) == want


def test_trainer_boxes_of_a_2d_mesh_shard_the_outer_axis_first():
    m = meta("w", (8, 6), owners=(4, 5, 6, 7), mesh_shape=(2, 2),
             placements=(shard(0), shard(0)))
    assert [param_box(m, r, 8) for r in (4, 5, 6, 7)] == [
        ([0, 0], [2, 6]), ([2, 0], [4, 6]), ([4, 0], [6, 6]), ([6, 0], [8, 6])]
    m = meta("w", (8, 6), owners=(0, 1, 2, 3), mesh_shape=(2, 2),
             placements=(REPLICATE, shard(1)))
    assert param_box(m, 2, 4) == ([0, 0], [8, 3]) and param_box(m, 3, 4) == ([0, 3], [8, 6])


def test_trainer_shards_skip_what_a_rank_does_not_own():
    metas = [meta("norm", (4,)), meta("w", (3, 2), owners=(0, 1, 2, 3),
                                      placements=(shard(0),))]
    assert [(s.name, list(s.lo), list(s.hi)) for s in trainer_shards(metas, 3, 4)] == \
        [("norm", [0], [4])]  # torch.chunk gives rank 3 nothing of 3 rows
    with pytest.raises(ValueError, match="outside the 4 trainer ranks"):
        trainer_shards(metas, 4, 4)


def linear(rows, cols, **attrs):
    module = torch.nn.Module()
    module.weight = torch.nn.Parameter(torch.zeros(rows, cols, dtype=torch.bfloat16))
    module.weight.output_dim, module.weight.input_dim = 0, 1
    for k, v in attrs.items():
        setattr(module, k, v)
    return module


def tp_model(tp_rank):
    """TP4 rank `tp_rank` of: 8 query heads and 2 KV heads of size 2 (each KV head on two
    ranks), MLP 8, hidden 4, vocab 10 padded to 64 (16 rows a rank)."""
    model, attn, mlp = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    attn.qkv_proj = linear(2 * 2 + 2 * 2, 4, tp_rank=tp_rank, tp_size=4, num_heads=2,
                           num_kv_heads=1, head_size=2, num_kv_head_replicas=2,
                           output_sizes=[16, 8, 8], gather_output=False)
    attn.o_proj = linear(4, 4, tp_rank=tp_rank, tp_size=4, input_is_parallel=True)
    mlp.gate_up_proj = linear(2 + 2, 4, tp_rank=tp_rank, tp_size=4, output_sizes=[8, 8],
                              gather_output=False)
    model.attn, model.mlp = attn, mlp
    indices = SimpleNamespace(org_vocab_start_index=min(16 * tp_rank, 10),
                              org_vocab_end_index=min(16 * tp_rank + 16, 10))
    model.embed = linear(16, 4, tp_rank=tp_rank, tp_size=4, shard_indices=indices)
    model.norm = torch.nn.Module()
    model.norm.weight = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    model.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                                    "gate_up_proj": ["gate_proj", "up_proj"]}
    return model


SENT = {n: SimpleNamespace(shape=s, dtype="bf16") for n, s in {
    "attn.q_proj.weight": (16, 4), "attn.k_proj.weight": (4, 4), "attn.v_proj.weight": (4, 4),
    "attn.o_proj.weight": (4, 16), "mlp.gate_proj.weight": (8, 4), "mlp.up_proj.weight": (8, 4),
    "embed.weight": (10, 4), "norm.weight": (4,)}.items()}


def boxes(shards):
    return [(s.buffer, s.name, list(s.lo), list(s.hi)) for s in shards]


def test_worker_boxes_follow_vllms_loaders():
    shards, _ = engine_shards(tp_model(3), SENT, rank=9)
    assert boxes(shards) == [
        ("attn.qkv_proj.weight", "attn.q_proj.weight", [12, 0], [16, 4]),
        ("attn.qkv_proj.weight", "attn.k_proj.weight", [2, 0], [4, 4]),  # KV head 3 // 2
        ("attn.qkv_proj.weight", "attn.v_proj.weight", [2, 0], [4, 4]),
        ("attn.o_proj.weight", "attn.o_proj.weight", [0, 12], [4, 16]),
        ("mlp.gate_up_proj.weight", "mlp.gate_proj.weight", [6, 0], [8, 4]),
        ("mlp.gate_up_proj.weight", "mlp.up_proj.weight", [6, 0], [8, 4]),
        ("embed.weight", "embed.weight", [10, 0], [10, 4]),  # rank 3 holds only padding
        ("norm.weight", "norm.weight", [0], [4])]
    assert all(s.rank == 9 for s in shards)
    embed = [b for b in boxes(engine_shards(tp_model(0), SENT, 0)[0]) if b[0] == "embed.weight"]
    assert embed == [("embed.weight", "embed.weight", [0, 0], [10, 4])]


def qwen2_tp_model(tp_rank):
    """tp_model with Qwen2's q/k/v biases: vllm/model_executor/models/qwen2.py builds qkv_proj
    with bias=True, a 1-D parameter of the rank's fused rows with output_dim 0
    (ColumnParallelLinear in vllm/model_executor/layers/linear.py)."""
    model = tp_model(tp_rank)
    qkv = model.attn.qkv_proj
    qkv.bias = torch.nn.Parameter(torch.zeros(2 * 2 + 2 * 2, dtype=torch.bfloat16))
    qkv.bias.output_dim = 0
    return model


QWEN2_SENT = dict(SENT, **{f"attn.{proj}.bias": SimpleNamespace(shape=(rows,), dtype="bf16")
                           for proj, rows in (("q_proj", 16), ("k_proj", 4), ("v_proj", 4))})


def test_a_qwen2_workers_qkv_bias_is_fused_as_its_weight():
    # QKVParallelLinear.weight_loader fills the bias as the weight's rows: TP4 rank 3 holds q bias
    # [3*4, 4*4) at 0, then KV head 3 // 2 = 1: k and v bias [2, 4) at 4 and 6.
    model = qwen2_tp_model(3)
    shards, buffers = engine_shards(model, QWEN2_SENT, rank=3)
    assert [b for b in boxes(shards) if b[0] == "attn.qkv_proj.bias"] == [
        ("attn.qkv_proj.bias", "attn.q_proj.bias", [12], [16]),
        ("attn.qkv_proj.bias", "attn.k_proj.bias", [2], [4]),
        ("attn.qkv_proj.bias", "attn.v_proj.bias", [2], [4])]
    assert buffers["attn.qkv_proj.bias"].data_ptr() == model.attn.qkv_proj.bias.data_ptr()
    every_rank = [s for r in range(4) for s in engine_shards(qwen2_tp_model(r), QWEN2_SENT, r)[0]]
    Layout.from_shards(every_rank).validate()  # the biases covered, KV biases on two ranks each


def test_worker_buffers_are_the_parameters_storage():
    model = tp_model(1)
    _, buffers = engine_shards(model, SENT, 0)
    for name, param in model.named_parameters():
        assert buffers[name].data_ptr() == param.data_ptr()


def test_a_destination_layout_from_every_tp_rank_covers_the_checkpoint():
    shards = [s for r in range(4) for s in engine_shards(tp_model(r), SENT, r)[0]]
    layout = Layout.from_shards(shards)
    layout.validate()  # every element of every checkpoint tensor is held somewhere
    sizes = {b.name: b.bytes for b in layout.buffers(1)}
    assert sizes["attn.qkv_proj.weight"] == 8 * 4 * 2


def test_what_ferry_cannot_deliver_is_refused_by_name():
    missing = {k: v for k, v in SENT.items() if k != "attn.v_proj.weight"}
    with pytest.raises(ValueError, match="qkv_proj.weight: the trainer sends no tensor "
                                         "'attn.v_proj.weight'"):
        engine_shards(tp_model(0), missing, 0)
    fp32 = dict(SENT, **{"norm.weight": SimpleNamespace(shape=(4,), dtype="fp32")})
    with pytest.raises(ValueError, match="norm.weight is torch.bfloat16 but the trainer sends"):
        engine_shards(tp_model(0), fp32, 0)
    wide = dict(SENT, **{"norm.weight": SimpleNamespace(shape=(5,), dtype="bf16")})
    with pytest.raises(ValueError, match="does not hold norm.weight"):
        engine_shards(tp_model(0), wide, 0)


class UnquantizedFusedMoEMethod(SimpleNamespace):
    """vLLM's method of unquantized experts (recognised by its name)."""


class CompressedTensorsW8A8Fp8MoEMethod:
    """One of vLLM's methods of quantized experts ferry.vllm does not write."""


def experts_model(expert_map, tp_rank=0, tp_size=1, intermediate=8, hidden=4, **config):
    """A MoE layer as vLLM 0.33's RoutedExperts holds it (vllm/model_executor/layers/fused_moe/
    routed_experts.py): `expert_map` global expert -> local slot (-1: elsewhere), w13_weight
    [slots, 2 * I/tp, H], w2_weight [slots, H, I/tp], checkpoint names gate/up/down_proj."""
    slots, part = sum(s >= 0 for s in expert_map), intermediate // tp_size
    experts = torch.nn.Module()
    experts.w13_weight = torch.nn.Parameter(torch.zeros(slots, 2 * part, hidden,
                                                        dtype=torch.bfloat16))
    experts.w2_weight = torch.nn.Parameter(torch.zeros(slots, hidden, part, dtype=torch.bfloat16))
    experts.layer_name, experts.local_num_experts = "mlp.experts", slots
    experts.ckpt_gate_proj_name, experts.ckpt_up_proj_name = "gate_proj", "up_proj"
    experts.ckpt_down_proj_name = "down_proj"
    experts.expert_map_manager = SimpleNamespace(
        num_fused_shared_experts=config.pop("fused_shared", 0),
        map_global_to_local=lambda e: expert_map[e])
    # UnquantizedFusedMoEMethod's kernel (fused_moe/oracle/unquantized.py UnquantizedMoeBackend)
    name, value = config.pop("kernel", ("TRITON", "TRITON"))
    experts.quant_method = UnquantizedFusedMoEMethod(
        unquantized_backend=SimpleNamespace(name=name, value=value))
    settings = dict(num_experts=len(expert_map), num_logical_experts=len(expert_map),
                    intermediate_size=intermediate, intermediate_size_per_partition=part,
                    tp_rank=tp_rank, tp_shard_with_padding=False,
                    moe_parallel_config=SimpleNamespace(tp_size=tp_size, enable_eplb=False))
    settings.update(config)
    experts.moe_config = SimpleNamespace(**settings)
    model, mlp = torch.nn.Module(), torch.nn.Module()
    mlp.experts = torch.nn.Module()
    mlp.experts.routed_experts = experts
    model.mlp = mlp
    return model


EXPERTS_SENT = {f"mlp.experts.{e}.{p}.weight": SimpleNamespace(shape=s, dtype="bf16")
                for e in range(4) for p, s in (("gate_proj", (8, 4)), ("up_proj", (8, 4)),
                                               ("down_proj", (4, 8)))}
W13, W2 = "mlp.experts.routed_experts.w13_weight", "mlp.experts.routed_experts.w2_weight"


def test_expert_slots_hold_the_experts_the_expert_map_places_there():
    # EP rank with experts 3 and 1 in slots 0 and 1: w13[s] = [gate; up] of its expert
    # (_load_w13: gate the first half, up the second), w2[s] = its down_proj (_load_w2).
    shards, buffers = engine_shards(experts_model([-1, 1, -1, 0]), EXPERTS_SENT, rank=5)
    assert boxes(shards) == [
        (W13, "mlp.experts.3.gate_proj.weight", [0, 0], [8, 4]),
        (W13, "mlp.experts.3.up_proj.weight", [0, 0], [8, 4]),
        (W13, "mlp.experts.1.gate_proj.weight", [0, 0], [8, 4]),
        (W13, "mlp.experts.1.up_proj.weight", [0, 0], [8, 4]),
        (W2, "mlp.experts.3.down_proj.weight", [0, 0], [4, 8]),
        (W2, "mlp.experts.1.down_proj.weight", [0, 0], [4, 8])]
    offsets = {(f.tensor, f.buffer): f.byte_offset
               for f in Layout.from_shards(shards).fragments(5)}
    assert offsets[("mlp.experts.1.up_proj.weight", W13)] == 3 * 8 * 4 * 2  # slot 1, second half
    assert buffers[W2].shape == (2, 4, 8)


def test_expert_tensor_parallelism_takes_each_experts_rows_of_its_rank():
    # MoE TP rank 1 of 2, no EP: gate/up rows [4, 8) of every expert, down_proj columns [4, 8).
    shards, _ = engine_shards(experts_model([0, 1, 2, 3], tp_rank=1, tp_size=2), EXPERTS_SENT, 0)
    assert boxes(shards)[:2] == [(W13, "mlp.experts.0.gate_proj.weight", [4, 0], [8, 4]),
                                 (W13, "mlp.experts.0.up_proj.weight", [4, 0], [8, 4])]
    assert boxes(shards)[-1] == (W2, "mlp.experts.3.down_proj.weight", [0, 4], [4, 8])
    every_rank = [s for r in range(2) for s in engine_shards(
        experts_model([0, 1, 2, 3], tp_rank=r, tp_size=2), EXPERTS_SENT, r)[0]]
    Layout.from_shards(every_rank).validate()


def eplb_model(table):
    """EP rank 1 of 2 under EPLB: 4 logical experts and 2 redundant ones, physical experts 3..5
    in its slots 0..2, and its MoE runner's router's EplbLayerState (vllm/distributed/eplb/
    eplb_state.py) holding `table` as logical_to_physical_map (None: not registered yet)."""
    model = experts_model([-1, -1, -1, 0, 1, 2], num_experts=6, num_logical_experts=4,
                          moe_parallel_config=SimpleNamespace(tp_size=1, enable_eplb=True))
    count = None if table is None else (table >= 0).sum(dim=1)
    model.mlp.experts.router = SimpleNamespace(eplb_state=SimpleNamespace(
        logical_to_physical_map=table, logical_replica_count=count))
    return model


def test_eplb_slots_hold_the_experts_the_current_map_places_there():
    # physical -> logical [2, 0, 3, 1, 2, 0] as vLLM's compute_logical_maps inverts it: each
    # logical expert's physical experts, -1 after them (vLLM pads to 1024 columns).
    table = torch.tensor([[1, 5, -1, -1], [3, -1, -1, -1], [0, 4, -1, -1], [2, -1, -1, -1]])
    model = eplb_model(table)
    shards, _ = engine_shards(model, EXPERTS_SENT, rank=1)
    assert [b[1] for b in boxes(shards) if b[0] == W2] == [
        "mlp.experts.1.down_proj.weight", "mlp.experts.2.down_proj.weight",
        "mlp.experts.0.down_proj.weight"]
    assert [b[1] for b in boxes(shards) if b[0] == W13][4:] == [
        "mlp.experts.0.gate_proj.weight", "mlp.experts.0.up_proj.weight"]
    assert eplb_placement(model) == {"mlp.experts.routed_experts": (1, 2, 0)}
    # a rearrangement rewrites the map in place (_commit_eplb_maps): physical 3..5 -> 3, 3, 1
    table.copy_(torch.tensor([[0, -1, -1, -1], [2, 5, -1, -1], [1, -1, -1, -1], [3, 4, -1, -1]]))
    model.mlp.experts.router.eplb_state.logical_replica_count = (table >= 0).sum(dim=1)
    assert eplb_placement(model) == {"mlp.experts.routed_experts": (3, 3, 1)}
    # before vLLM registers the map: the arrangement its loader loads, [0, 1, 2, 3, 0, 1]
    assert eplb_placement(eplb_model(None)) == {"mlp.experts.routed_experts": (3, 0, 1)}
    assert eplb_placement(experts_model([0, 1, 2, 3])) == {}  # no EPLB: nothing moves
    twice = torch.tensor([[3, -1], [3, -1], [0, 4], [2, 5]])
    with pytest.raises(ValueError, match="places expert 1 in physical slot 3 of 6, which is "
                                         "not free"):
        engine_shards(eplb_model(twice), EXPERTS_SENT, rank=1)
    unplaced = torch.tensor([[0, -1], [1, -1], [2, 4], [3, -1]])  # physical 5 holds nothing
    with pytest.raises(ValueError, match="EPLB maps no expert to physical slot 5"):
        engine_shards(eplb_model(unplaced), EXPERTS_SENT, rank=1)


def test_expert_layouts_ferry_cannot_keep_are_refused():
    cases = [
        (dict(moe_parallel_config=SimpleNamespace(tp_size=1, enable_eplb=True)),
         "EPLB is on but its MoE runner's router has no EPLB state"),
        (dict(fused_shared=1), "fused shared experts, or redundant experts without EPLB"),
        (dict(num_experts=6), "fused shared experts, or redundant experts without EPLB"),
        (dict(tp_shard_with_padding=True), "padded expert shards"),
        (dict(intermediate_size_per_partition=16), "is not split evenly"),
        # fused_moe/oracle/unquantized.py convert_to_unquantized_kernel_format
        (dict(kernel=("FLASHINFER_TRTLLM", "FlashInfer TRTLLM")),
         "the FlashInfer TRTLLM MoE kernel rearranges the expert weights"),
        (dict(kernel=("FLASHINFER_CUTLASS", "FlashInfer CUTLASS")), "CUTLASS MoE kernel"),
        (dict(kernel=("CPU", "CPU")), "the CPU MoE kernel rearranges"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            engine_shards(experts_model([0, 1, 2, 3], **config), EXPERTS_SENT, 0)
    model = experts_model([0, 1, 2, 3])
    model.mlp.experts.routed_experts.w13_weight.is_transposed = True  # GPTQ/AWQ K-first
    with pytest.raises(ValueError, match="only untransposed w13_weight and w2_weight"):
        engine_shards(model, EXPERTS_SENT, 0)
    model = experts_model([0, 1, 2, 3])
    model.mlp.experts.routed_experts.w13_bias = torch.nn.Parameter(torch.zeros(4, 16))
    with pytest.raises(ValueError, match="w13_bias: only untransposed"):
        engine_shards(model, EXPERTS_SENT, 0)
    model = experts_model([0, 1, 2, 3])
    model.mlp.experts.routed_experts.quant_method = CompressedTensorsW8A8Fp8MoEMethod()
    with pytest.raises(ValueError, match="layer mlp.experts.routed_experts is quantized by "
                                         "CompressedTensorsW8A8Fp8MoEMethod"):
        engine_shards(model, EXPERTS_SENT, 0)
    model = experts_model([0, 1, 2, 3], kernel=("BATCHED_TRITON", "BATCHED_TRITON"))
    assert len(engine_shards(model, EXPERTS_SENT, 0)[0]) == 12
    narrow = dict(EXPERTS_SENT, **{"mlp.experts.2.down_proj.weight":
                                   SimpleNamespace(shape=(3, 8), dtype="bf16")})
    with pytest.raises(ValueError, match="does not hold rows .0, 8. of dim 1 of "
                                         "mlp.experts.2.down_proj.weight"):
        engine_shards(experts_model([0, 1, 2, 3]), narrow, 0)


def mla_model(derive):
    """tp_model(0) with an MLA attention module whose kv_b_proj is attn.o_proj (4 x 4: 2 heads
    of qk_nope 1 and v 1 over kv_lora_rank 4) and W_UV, W_UK_T made by `derive` from
    kv_b_proj.weight as vLLM's MLAAttention.process_weights_after_loading makes them
    (mla_attention.py: split_kv_b_proj, then (L, N, V) -> (N, L, V) and (L, N, P) -> (N, P, L))."""
    model = tp_model(0)
    mla = torch.nn.Module()
    mla.kv_b_proj = model.attn.o_proj
    mla.process_weights_after_loading = lambda dtype: None
    w_uk, w_uv = derive(mla.kv_b_proj.weight).T.view(4, 2, 2).split([1, 1], dim=-1)
    mla.W_UV = torch.nn.Parameter(w_uv.transpose(0, 1), requires_grad=False)
    mla.W_UK_T = torch.nn.Parameter(w_uk.permute(1, 2, 0), requires_grad=False)
    model.attn.mla_attn = mla
    return model


def test_mla_decode_weights_viewing_kv_b_proj_follow_its_writes():
    model = mla_model(lambda weight: weight)
    shards, buffers = engine_shards(model, SENT, 0)
    assert "attn.mla_attn.W_UV" not in buffers and "attn.mla_attn.W_UK_T" not in buffers
    assert [s.name for s in shards if s.buffer == "attn.o_proj.weight"] == ["attn.o_proj.weight"]
    buffers["attn.o_proj.weight"].copy_(torch.arange(16.0).view(4, 4))  # a refit's write
    # W_UV[n, l, 0] = kv_b_proj.weight[2n + 1, l]; W_UK_T[n, 0, l] = kv_b_proj.weight[2n, l]
    assert model.attn.mla_attn.W_UV[1, :, 0].tolist() == [12.0, 13.0, 14.0, 15.0]
    assert model.attn.mla_attn.W_UK_T[0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_mla_copies_are_left_to_the_worker_and_other_forms_refused():
    from ferry._vllm_layout import mla_copies
    model = mla_model(lambda weight: weight.float())  # activations in another dtype: copies
    shards, buffers = engine_shards(model, SENT, 0)
    assert "attn.mla_attn.W_UV" not in buffers and "attn.mla_attn.W_UK_T" not in buffers
    assert mla_copies(model) == [model.attn.mla_attn]
    assert mla_copies(mla_model(lambda weight: weight)) == []  # views need nothing
    model = mla_model(lambda weight: weight)
    model.attn.mla_attn.W_UK_T_dcp_qrep = torch.zeros(2)  # DCP's all-gathered W_UK_T
    with pytest.raises(ValueError, match="MLA keeps W_UK_T_dcp_qrep derived from kv_b_proj in "
                                         "a form ferry does not derive again"):
        engine_shards(model, SENT, 0)
    model = mla_model(lambda weight: weight)
    model.attn.mla_attn.is_amx_bmm_enabled = True
    with pytest.raises(ValueError, match="the AMX MLA backend packs its own copies"):
        engine_shards(model, SENT, 0)


def test_layers_whose_storage_the_rules_would_get_wrong_are_refused():
    # A merged layer (MergedColumnParallelLinear: output_sizes) splits each output over TP on its
    # own; without packed_modules_mapping naming its parts it is not a plain column split.
    model = tp_model(0)
    model.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    with pytest.raises(ValueError, match="gate_up_proj.weight: merged from 2 outputs"):
        engine_shards(model, SENT, 0)
    # ... unless the trainer sends it fused under its own name (Phi-3's gate_up_proj): each
    # output's 1/TP of its rows, TP rank 0 of 4 rows [0, 2) of gate and [8, 10) of up.
    fused = dict(SENT, **{"mlp.gate_up_proj.weight": SimpleNamespace(shape=(16, 4), dtype="bf16")})
    shards, _ = engine_shards(model, fused, 0)
    assert [(list(s.lo), list(s.hi)) for s in shards if s.name == "mlp.gate_up_proj.weight"] == \
        [([0, 0], [2, 4]), ([8, 0], [10, 4])]
    # not a fused QKV, whose KV heads may be replicated over ranks: only its packing map says
    model.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    fused = dict(SENT, **{"attn.qkv_proj.weight": SimpleNamespace(shape=(32, 4), dtype="bf16")})
    with pytest.raises(ValueError, match="qkv_proj.weight: merged from 3 outputs"):
        engine_shards(model, fused, 0)


def mixer_model(groups_divide=True):
    """TP rank 1 of 2 of a Mamba-2 mixer as vLLM's MambaMixer2 builds it (mamba_mixer2.py):
    d_inner 4, n_groups * state 2, 2 heads, hidden 3, conv kernel 3; in_proj and conv1d
    MergedColumnParallelLinear over [z, x, B, C, dt] and [x, B, C] (global output sizes), A an
    fp32 parameter of its head, D and dt_bias of it, the gated norm 2 of its 4 channels."""
    model, mixer, norm = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    mixer.intermediate_size, mixer.ssm_state_size, mixer.num_heads = 4, 2, 2
    mixer.conv1d = torch.nn.Module()
    if groups_divide:
        mixer.in_proj = linear(7, 3, tp_rank=1, tp_size=2, output_sizes=[4, 4, 2, 2, 2])
        mixer.conv1d.output_sizes, conv_rows = [4, 2, 2], 4
    else:  # one group under TP 2: ColumnParallelLinears with vLLM's group-replicating loader,
        # in_proj 2 * 4/2 + 2 * 2 + 2/2 rows, conv1d 4/2 + 2 * 2
        mixer.in_proj = linear(9, 3, tp_rank=1, tp_size=2, gather_output=False)
        mixer.conv1d.gather_output, conv_rows = False, 6
    mixer.conv1d.tp_rank, mixer.conv1d.tp_size = 1, 2
    mixer.conv1d.weight = torch.nn.Parameter(torch.zeros(conv_rows, 1, 3, dtype=torch.bfloat16))
    mixer.conv1d.bias = torch.nn.Parameter(torch.zeros(conv_rows, dtype=torch.bfloat16))
    mixer.conv1d.weight.output_dim = mixer.conv1d.bias.output_dim = 0
    mixer.A = torch.nn.Parameter(torch.zeros(1, dtype=torch.float32))
    mixer.D = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    mixer.dt_bias = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    norm.tp_rank, norm.full_hidden_size, norm.per_rank_hidden_size = 1, 4, 2
    norm.weight = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    mixer.norm, model.mixer = norm, mixer
    return model


MIXER_SENT = {n: SimpleNamespace(shape=s, dtype="bf16") for n, s in {
    "mixer.in_proj.weight": (14, 3), "mixer.conv1d.weight": (8, 1, 3), "mixer.conv1d.bias": (8,),
    "mixer.A_log": (2,), "mixer.D": (2,), "mixer.dt_bias": (2,),
    "mixer.norm.weight": (4,)}.items()}


def test_a_mamba_mixer_holds_its_rank_of_each_segment():
    shards, buffers = engine_shards(mixer_model(), MIXER_SENT, rank=3)
    assert sorted((s.buffer, list(s.lo), list(s.hi), s.transform) for s in shards) == sorted([
        # z, x, B, C, dt: rows [2, 4) of [0, 4), [6, 8) of [4, 8), [9, 10), [11, 12), [13, 14)
        ("mixer.in_proj.weight", [2, 0], [4, 3], ""), ("mixer.in_proj.weight", [6, 0], [8, 3], ""),
        ("mixer.in_proj.weight", [9, 0], [10, 3], ""),
        ("mixer.in_proj.weight", [11, 0], [12, 3], ""),
        ("mixer.in_proj.weight", [13, 0], [14, 3], ""),
        # x, B, C of the convolution: [2, 4) of [0, 4), [5, 6) of [4, 6), [7, 8) of [6, 8)
        ("mixer.conv1d.weight", [2, 0, 0], [4, 1, 3], ""),
        ("mixer.conv1d.weight", [5, 0, 0], [6, 1, 3], ""),
        ("mixer.conv1d.weight", [7, 0, 0], [8, 1, 3], ""),
        ("mixer.conv1d.bias", [2], [4], ""), ("mixer.conv1d.bias", [5], [6], ""),
        ("mixer.conv1d.bias", [7], [8], ""),
        ("mixer.A", [1], [2], "neg_exp"), ("mixer.D", [1], [2], ""),
        ("mixer.dt_bias", [1], [2], ""), ("mixer.norm.weight", [2], [4], "")])
    assert [s.name for s in shards if s.buffer == "mixer.A"] == ["mixer.A_log"]
    layout = Layout.from_shards(shards)
    # in storage order: z (2 rows of 3 bf16), x (2 rows), B, C, dt (a row each)
    assert {tuple(f.lo): f.byte_offset for f in layout.fragments(3)
            if f.buffer == "mixer.in_proj.weight"} == {
        (2, 0): 0, (6, 0): 12, (9, 0): 24, (11, 0): 30, (13, 0): 36}
    assert {b.name: b.bytes for b in layout.buffers(3)}["mixer.A"] == 4  # one fp32 element
    assert buffers["mixer.A"].dtype == torch.float32


def test_checkpoint_names_are_mapped_as_the_models_mapper_renames_them():
    # nemotron_h.py hf_to_vllm_mapper: backbone -> model, A_log -> A (its renames alone)
    def rename(name):
        return name.replace("backbone.", "", 1).replace("A_log", "A")

    model = mixer_model()
    model.hf_to_vllm_mapper = SimpleNamespace(
        get_rename_mapper=lambda: SimpleNamespace(map_name=rename))
    sent = {f"backbone.{n}": v for n, v in MIXER_SENT.items()}
    shards, _ = engine_shards(model, sent, rank=3)
    assert {s.buffer: s.name for s in shards}["mixer.A"] == "backbone.mixer.A_log"
    assert {s.buffer: s.name for s in shards}["mixer.in_proj.weight"] == \
        "backbone.mixer.in_proj.weight"


def test_a_mamba_mixers_one_group_is_on_every_rank():
    # mamba_v2_sharded_weight_loader with duplicate_groups: z, x, dt 1/TP, B and C whole (the
    # same checkpoint, read as one group of state 2)
    shards, _ = engine_shards(mixer_model(groups_divide=False), MIXER_SENT, rank=3)
    rows = {}
    for s in shards:
        rows.setdefault(s.buffer, []).append((s.lo[0], s.hi[0]))
    assert rows["mixer.in_proj.weight"] == [(2, 4), (6, 8), (8, 10), (10, 12), (13, 14)]
    assert rows["mixer.conv1d.weight"] == rows["mixer.conv1d.bias"] == [(2, 4), (4, 6), (6, 8)]
    assert rows["mixer.A"] == [(1, 2)] and rows["mixer.norm.weight"] == [(2, 4)]


def test_mamba_mixers_ferry_cannot_keep_are_refused():
    sent = {n: v for n, v in MIXER_SENT.items() if n != "mixer.in_proj.weight"}
    with pytest.raises(ValueError, match="merged from 5 outputs.*no fused tensor of its name"):
        engine_shards(mixer_model(), sent, 0)
    model = mixer_model()
    model.mixer.A = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="mixer.A is torch.bfloat16 .* stores as fp32 neg_exp"):
        engine_shards(model, MIXER_SENT, 0)


# FP8 block-quantized linear layers (_vllm_fp8.py): vLLM's classes are recognised by name, so
# these stand-ins carry the names of vllm/model_executor/layers/quantization/fp8.py's method and
# vllm/model_executor/kernels/linear/scaled_mm/'s kernels.
class Fp8LinearMethod:
    def __init__(self, kernel, block_quant=True, is_scale_e8m0=False):
        self.fp8_linear, self.block_quant, self.is_scale_e8m0 = kernel, block_quant, is_scale_e8m0


class TritonFp8BlockScaledMMKernel:
    pass


class MarlinFP8ScaledMMLinearKernel:
    pass


class DeepGemmFp8BlockScaledMMKernel:
    def __init__(self, e8m0):
        self.is_deep_gemm_supported, self.use_deep_gemm_e8m0 = True, e8m0


class FlashInferFp8DeepGEMMDynamicBlockScaledKernel:
    def __init__(self, e8m0):
        self.fallback = DeepGemmFp8BlockScaledMMKernel(e8m0)


class AWQLinearMethod:
    pass


class E4m3Weight(torch.nn.Parameter):
    """An e4m3 weight where torch has no float8: one byte an element, its dtype given as
    ferry's name for e4m3."""

    @property
    def dtype(self):
        return "fp8_e4m3"


def e4m3_parameter(shape):
    """A zero e4m3 parameter (an E4m3Weight where torch has no float8: Debian's 1.13)."""
    if hasattr(torch, "float8_e4m3fn"):
        return torch.nn.Parameter(torch.zeros(shape, dtype=torch.float8_e4m3fn),
                                  requires_grad=False)
    return E4m3Weight(torch.zeros(shape, dtype=torch.uint8), requires_grad=False)


def deep_gemm_packed(matrices, rows, cols, full_storage=False):
    """Zero int32 scales laid out as DeepGEMM's get_mn_major_tma_aligned_packed_ue8m0_tensor
    lays out those of `matrices` [rows, cols] matrices (deepseek-ai/DeepGEMM
    csrc/jit_kernels/impls/smxx_layout.hpp): [G, rows, P] with strides [P * N4, 1, N4], P words
    of four 128-column blocks a row, N4 rows rounded up to 4; squeezed for one matrix. Its CUDA
    path allocates storage up to the last row only (empty_strided of those sizes), its torch
    fallback all G * P * N4 words (`full_storage`)."""
    words, stride = ((cols + 127) // 128 + 3) // 4, (rows + 3) // 4 * 4
    storage = torch.zeros(matrices * words * stride if full_storage else
                          (matrices - 1) * words * stride + (words - 1) * stride + rows,
                          dtype=torch.int32)
    packed = storage.as_strided((matrices, rows, words), (words * stride, 1, stride))
    return packed[0] if matrices == 1 else packed


def fp8_model(method, tp_rank=1, block=(128, 128), scale_shape=(2, 1), packed=False):
    """A column-parallel layer of TP2 as Fp8LinearMethod.create_weights leaves it: rows [256,
    512) of a [512, 128] weight at TP rank 1, e4m3 values and one fp32 scale_inv a 128x128
    block (BlockQuantScaleParameter); with `packed`, the scales as DeepGEMM's post-processing
    leaves them on SM100 (deep_gemm_packed)."""
    proj = linear(256, 128, tp_rank=tp_rank, tp_size=2, gather_output=False, input_size=128,
                  output_size=512, quant_method=method, weight_block_size=list(block))
    proj.weight = e4m3_parameter((256, 128))
    proj.weight.output_dim, proj.weight.input_dim = 0, 1
    scales = deep_gemm_packed(1, 256, 128) if packed else torch.zeros(scale_shape)
    proj.weight_scale_inv = torch.nn.Parameter(scales, requires_grad=False)
    model = torch.nn.Module()
    model.proj = proj
    return model


FP8_SENT = {"proj.weight": SimpleNamespace(shape=(512, 128), dtype="bf16")}


def test_an_fp8_layer_is_a_block_scaled_buffer_the_refit_quantizes_into():
    from ferry import BlockScaled
    model = fp8_model(Fp8LinearMethod(TritonFp8BlockScaledMMKernel()))
    shards, buffers = engine_shards(model, FP8_SENT, rank=5)
    assert shards[0].transform == "fp8_block" and boxes(shards[:1]) == [
        ("proj.weight", "proj.weight", [256, 0], [512, 128])]
    assert shards[1] == BlockScaled(5, "proj.weight", "proj.weight_scale_inv", rows=256, cols=128,
                                    scale_fmt="float32")
    assert buffers["proj.weight_scale_inv"].data_ptr() == model.proj.weight_scale_inv.data_ptr()
    dst = Layout.from_shards(shards)
    assert dst.stored_dtypes == {"proj.weight": "fp8_e4m3"}
    assert [(b.name, b.bytes) for b in dst.buffers()] == [("proj.weight", 256 * 128),
                                                          ("proj.weight_scale_inv", 8)]


def test_an_fp8_layers_scale_format_is_what_its_kernel_leaves(monkeypatch):
    import sys
    import types

    # vllm/platforms (the GPU's family) and vllm/utils/deep_gemm.py (E8M0 for DeepGEMM's experts)
    family = {"gpu": 90}
    platforms, deep_gemm = types.ModuleType("vllm.platforms"), types.ModuleType("deep_gemm")
    platforms.current_platform = SimpleNamespace(
        is_device_capability_family=lambda f: f == family["gpu"])
    deep_gemm.is_deep_gemm_e8m0_used = lambda: True
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setitem(sys.modules, "vllm.utils.deep_gemm", deep_gemm)

    def scale_fmt(kernel, packed=False):
        model = fp8_model(Fp8LinearMethod(kernel), packed=packed)
        shards, _ = engine_shards(model, FP8_SENT, rank=0)
        return shards[1].scale_fmt

    def expert_scale_fmt(backend, packed=False):
        model = fp8_experts_model(Fp8MoEMethod(backend), packed=packed)
        shards, _ = engine_shards(model, FP8_EXPERTS_SENT, 0)
        return {s.scale_fmt for s in shards if hasattr(s, "scale_fmt")}

    assert scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=False)) == "float32"
    assert scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=True)) == "ue8m0"
    assert scale_fmt(FlashInferFp8DeepGEMMDynamicBlockScaledKernel(e8m0=True)) == "ue8m0"
    assert expert_scale_fmt("DEEPGEMM") == {"ue8m0"}
    assert expert_scale_fmt("VLLM_CUTLASS") == {"float32"}
    family["gpu"] = 100  # Blackwell: DeepGEMM's packed codes with E8M0, fp32 without
    assert scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=True), packed=True) == "ue8m0_packed"
    assert expert_scale_fmt("BATCHED_DEEPGEMM", packed=True) == {"ue8m0_packed"}
    assert scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=False)) == "float32"
    with pytest.raises(ValueError, match=r"proj.weight_scale_inv is torch.float32 \[2, 1\] with "
                                         r"strides \[1, 1\], not DeepGEMM's packed E8M0 scales: "
                                         r"int32 \[256, 1\] with strides \[1, 256\]"):
        scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=True))
    family["gpu"] = 120  # DeepGEMM has no E8M0 layout there
    with pytest.raises(ValueError, match="layer proj: DeepGEMM with E8M0 scales on an SM120 GPU"
                                         ".* VLLM_USE_DEEP_GEMM_E8M0=0"):
        scale_fmt(DeepGemmFp8BlockScaledMMKernel(e8m0=True))
    with pytest.raises(ValueError, match="layer mlp.experts.routed_experts: DeepGEMM with E8M0"):
        expert_scale_fmt("BATCHED_DEEPGEMM")
    assert scale_fmt(TritonFp8BlockScaledMMKernel()) == "float32"


def test_the_harness_packs_scales_as_deep_gemm_on_sm100():
    """deep_gemm_layout.deep_gemm_sm100_transform, which test_vllm.py's Blackwell cases run
    where DeepGEMM's CUDA extension would, against words worked by hand from DeepGEMM's packing
    (csrc/jit_kernels/impls/smxx_layout.hpp): one [6, 640] matrix's five block columns, scales
    2^-8, 2^-7, 1, 2 and 2^-127 (subnormal: exponent field 0), N4 = 8 and P = 2."""
    from deep_gemm_layout import deep_gemm_sm100_transform
    sf = torch.tensor([[2.0**-8, 2.0**-7, 1.0, 2.0, 2.0**-127]])
    packed = deep_gemm_sm100_transform(sf, 6, 640, (1, 128, 128), 1)
    assert tuple(packed.shape) == (6, 2) and packed.stride() == (1, 8)
    word = 0x77 | 0x78 << 8 | 0x7f << 16 | 0x80 << 24  # biased exponents 119, 120, 127, 128
    assert packed[:, 0].tolist() == [word - (1 << 32)] * 6 and packed[:, 1].tolist() == [0] * 6
    # two [130, 128] matrices: two block rows each, one word a row, N4 = 132
    sf = torch.tensor([[[1.0], [0.5]], [[2.0], [4.0]]])
    two = deep_gemm_sm100_transform(sf, 130, 128, (1, 128, 128), 2)
    assert tuple(two.shape) == (2, 130, 1) and two.stride() == (132, 1, 132)
    assert [two[g, rows, 0].unique().tolist() for g in (0, 1)
            for rows in (slice(0, 128), slice(128, 130))] == [[127], [126], [128], [129]]


def test_deep_gemms_packed_scales_are_registered_with_their_padding():
    from ferry._vllm_fp8 import block_scaled

    def layer(scales):  # a [130, 640] weight: 5 block columns in 2 words a row, N4 = 132
        return SimpleNamespace(weight=torch.zeros(130, 640, dtype=torch.uint8),
                               weight_scale_inv=torch.nn.Parameter(scales, requires_grad=False))

    scales = deep_gemm_packed(1, 130, 640, full_storage=True)
    shard, array = block_scaled("proj", layer(scales), "weight", "ue8m0_packed", rank=2)
    assert shard.scale_fmt == "ue8m0_packed" and (shard.rows, shard.cols) == (130, 640)
    assert array.data_ptr() == scales.data_ptr() and array.is_contiguous()
    assert array.numel() * 4 == 2 * 132 * 4  # core/base/fp8_packed_scales.h: P * N4 words
    shards = [shard] + [Shard("w", (130, 640), "bf16", [0, 0], [130, 640], 2, "proj.weight",
                              "fp8_block")]
    assert dict((b.name, b.bytes) for b in Layout.from_shards(shards).buffers())[
        "proj.weight_scale_inv"] == array.numel() * 4
    with pytest.raises(ValueError, match="DeepGEMM's packed scales of 130 rows end before the "
                                         "padding rows up to 132"):
        block_scaled("proj", layer(deep_gemm_packed(1, 130, 640)), "weight", "ue8m0_packed", 2)
    row_major = torch.zeros(130, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"strides \[2, 1\], not DeepGEMM's packed"):
        block_scaled("proj", layer(row_major), "weight", "ue8m0_packed", 2)
    experts = SimpleNamespace(w13_weight=torch.zeros(3, 256, 128, dtype=torch.uint8),
                              w13_weight_scale_inv=deep_gemm_packed(3, 256, 128))
    shard, array = block_scaled("experts", experts, "w13_weight", "ue8m0_packed", rank=0)
    assert shard.matrices == 3 and array.numel() == 3 * 256


def test_fp8_layers_ferry_cannot_write_in_place_are_refused():
    def refused(model, match):
        with pytest.raises(ValueError, match=match):
            engine_shards(model, FP8_SENT, rank=0)

    triton = TritonFp8BlockScaledMMKernel()
    refused(fp8_model(Fp8LinearMethod(MarlinFP8ScaledMMLinearKernel())),
            "layer proj: the MarlinFP8ScaledMMLinearKernel kernel keeps the FP8 weights")
    refused(fp8_model(Fp8LinearMethod(triton, block_quant=False)),
            "layer proj is quantized by Fp8LinearMethod per tensor")
    refused(fp8_model(AWQLinearMethod()), "layer proj is quantized by AWQLinearMethod")
    refused(fp8_model(Fp8LinearMethod(triton), block=(64, 64)), r"FP8 blocks \[64, 64\]")
    refused(fp8_model(Fp8LinearMethod(triton, is_scale_e8m0=True)), "with E8M0 checkpoint")
    refused(fp8_model(Fp8LinearMethod(triton), scale_shape=(2, 2)),
            r"proj.weight_scale_inv is torch.float32 \[2, 2\], not fp32 \[2, 1\]")


class Fp8MoEMethod:
    """vLLM's FP8 expert method (quantization/fp8.py) as its create_weights leaves it."""

    def __init__(self, backend, block_shape=(128, 128), refine=None):
        self.block_quant, self.moe_block_shape = True, list(block_shape)
        self.weight_scale_refine = refine
        self.fp8_backend = SimpleNamespace(name=backend, value=backend)


def fp8_experts_model(method, packed=False):
    """experts_model's 4 experts at 128-wide blocks, FP8: w13 [4, 2 * 128, 128] and w2 [4, 128,
    128] e4m3 with one fp32 scale per 128x128 block of each expert's matrix (with `packed`, as
    DeepGEMM leaves them on SM100: deep_gemm_packed)."""
    model = experts_model([0, 1, 2, 3], intermediate=128, hidden=128)
    experts = model.mlp.experts.routed_experts
    experts.quant_method = method
    for leaf, shape in (("w13_weight", (4, 256, 128)), ("w2_weight", (4, 128, 128))):
        setattr(experts, leaf, e4m3_parameter(shape))
        scales = deep_gemm_packed(*shape) if packed else torch.zeros(4, shape[1] // 128, 1)
        setattr(experts, f"{leaf}_scale_inv", torch.nn.Parameter(scales, requires_grad=False))
    return model


FP8_EXPERTS_SENT = {f"mlp.experts.{e}.{p}.weight": SimpleNamespace(shape=s, dtype="bf16")
                    for e in range(4) for p, s in (("gate_proj", (128, 128)),
                                                   ("up_proj", (128, 128)),
                                                   ("down_proj", (128, 128)))}


def test_fp8_experts_are_block_scaled_stacks_of_their_matrices():
    from ferry import BlockScaled
    shards, _ = engine_shards(fp8_experts_model(Fp8MoEMethod("TRITON")), FP8_EXPERTS_SENT, 3)
    scaled = [s for s in shards if isinstance(s, BlockScaled)]
    assert scaled == [BlockScaled(3, W13, W13 + "_scale_inv", 256, 128, matrices=4),
                      BlockScaled(3, W2, W2 + "_scale_inv", 128, 128, matrices=4)]
    assert {s.transform for s in shards if not isinstance(s, BlockScaled)} == {"fp8_block"}
    assert Layout.from_shards(shards).stored_dtypes["mlp.experts.0.gate_proj.weight"] == \
        "fp8_e4m3"
    with pytest.raises(ValueError, match="the FLASHINFER_TRTLLM FP8 MoE kernel rearranges the "
                                         "expert weights .* serve with --moe-backend triton, or "
                                         "deep_gemm"):
        engine_shards(fp8_experts_model(Fp8MoEMethod("FLASHINFER_TRTLLM")), FP8_EXPERTS_SENT, 0)
    with pytest.raises(ValueError, match=r"FP8 expert blocks \[64, 128\] \(refined for the TP"):
        engine_shards(fp8_experts_model(Fp8MoEMethod("TRITON", (64, 128), (2, 1))),
                      FP8_EXPERTS_SENT, 0)


class Fp8PerBlockOnlineLinearMethod:
    """vLLM's online block FP8 method (quantization/online/fp8.py): no block_quant attribute,
    always 128x128 blocks."""

    def __init__(self, kernel):
        self.fp8_linear = kernel


class Fp8PerTensorOnlineLinearMethod:
    pass


def test_online_fp8_block_layers_are_written_as_the_offline_ones():
    model = fp8_model(Fp8PerBlockOnlineLinearMethod(TritonFp8BlockScaledMMKernel()))
    shards, _ = engine_shards(model, FP8_SENT, rank=0)
    assert shards[1].scale_fmt == "float32" and shards[0].transform == "fp8_block"
    with pytest.raises(ValueError, match="layer proj is quantized by "
                                         "Fp8PerTensorOnlineLinearMethod; ferry.vllm refits"):
        engine_shards(fp8_model(Fp8PerTensorOnlineLinearMethod()), FP8_SENT, rank=0)
