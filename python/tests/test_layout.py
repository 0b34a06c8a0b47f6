"""ferry.Layout: presets, files, shard lists and DTensors, read back and validated."""

import json

import numpy as np
import pytest

import ferry


def test_preset_names_source_and_destination_sides():
    src = ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2", scale="1/64")
    dst = ferry.Layout.preset("llama-3.1-8b", "vllm:tp=1,dp=2", scale=1 / 64, first_rank=2)
    assert src.ranks == [0, 1] and dst.ranks == [2, 3]
    assert {t.name for t in src.tensors} == {t.name for t in dst.tensors}
    assert any(b.name.endswith("linear_qkv.weight") for b in src.buffers(0))
    assert any(b.name.endswith("qkv_proj.weight") for b in dst.buffers(2))
    q = next(t for t in src.tensors if t.name == "model.layers.0.self_attn.q_proj.weight")
    assert q.shape == (64, 64) and q.dtype == "bf16"


def test_preset_from_a_hugging_face_config(tmp_path):
    # A Qwen3 (dense, q/k norms) config.json as the hub publishes them, with small dims.
    config = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "intermediate_size": 128, "vocab_size": 256, "tie_word_embeddings": False,
              "attention_bias": False, "torch_dtype": "bfloat16"}
    (tmp_path / "tiny-qwen3").mkdir()
    (tmp_path / "tiny-qwen3" / "config.json").write_text(json.dumps(config))
    src = ferry.Layout.preset(tmp_path / "tiny-qwen3", "megatron:tp=2")
    dst = ferry.Layout.preset(str(tmp_path / "tiny-qwen3" / "config.json"), "vllm:tp=2",
                              first_rank=2)
    shapes = {t.name: t.shape for t in dst.tensors}
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (32, 64)
    assert shapes["model.layers.1.self_attn.q_norm.weight"] == (16,)
    assert len(shapes) == 1 + 2 * 11 + 2  # embed; 11 tensors a layer; final norm and lm_head
    assert {t.name for t in src.tensors} == set(shapes)
    assert any(b.name.endswith("qkv_proj.weight") for b in dst.buffers(2))
    # Qwen2: no q/k norms, q/k/v biases (transformers' Qwen2Attention), fused into qkv_proj.bias
    config["model_type"] = "qwen2"
    (tmp_path / "qwen2.json").write_text(json.dumps(config))
    qwen2 = ferry.Layout.preset(tmp_path / "qwen2.json", "vllm:tp=2")
    shapes = {t.name: t.shape for t in qwen2.tensors}
    assert shapes["model.layers.1.self_attn.q_proj.bias"] == (64,)
    assert shapes["model.layers.1.self_attn.k_proj.bias"] == (32,)
    assert len(shapes) == 1 + 2 * 12 + 2  # 12 tensors a layer: no q/k norms, three biases
    assert any(b.name.endswith("qkv_proj.bias") for b in qwen2.buffers(0))
    config["model_type"] = "qwen2_moe"
    (tmp_path / "qwen2_moe.json").write_text(json.dumps(config))
    with pytest.raises(ferry.FerryError, match="model_type 'qwen2_moe'"):
        ferry.Layout.preset(tmp_path / "qwen2_moe.json", "vllm:tp=2")


def test_preset_errors_name_the_argument():
    with pytest.raises(ferry.FerryError, match="no-such-model"):
        ferry.Layout.preset("no-such-model", "megatron:tp=2")
    with pytest.raises(ferry.FerryError, match="tp"):
        ferry.Layout.preset("llama-3.1-8b", "megatron:tp=x")


def test_save_and_load_round_trip(tmp_path):
    src = ferry.Layout.preset("qwen3-30b-a3b", "megatron:tp=2,ep=2", scale="1/64")
    path = tmp_path / "src.yaml"
    src.save(path)
    loaded = ferry.Layout.load(path)
    assert loaded.to_yaml() == src.to_yaml()
    assert loaded.fragments() == src.fragments()
    assert ferry.Layout.from_yaml(src.to_yaml()).buffers() == src.buffers()


def test_load_missing_file_raises_with_the_path(tmp_path):
    with pytest.raises(ferry.FerryError, match="missing.yaml"):
        ferry.Layout.load(tmp_path / "missing.yaml")


def test_from_shards_places_boxes_contiguously_in_their_buffers():
    layout = ferry.Layout.from_shards([
        ferry.Shard("w", (4, 6), np.float32, (0, 0), (2, 6), rank=0, buffer="flat"),
        {"name": "b", "shape": (3,), "dtype": "int64", "lo": (0,), "hi": (3,), "rank": 0,
         "buffer": "flat"},
        ferry.Shard("w", (4, 6), "fp32", (2, 0), (4, 6), rank=1),
    ])
    layout.validate()
    assert layout.buffers() == [ferry.BufferInfo(0, "flat", 48 + 24), ferry.BufferInfo(1, "w", 48)]
    w0, b0 = layout.fragments(0)
    assert (w0.lo, w0.hi, w0.byte_offset, w0.strides) == ((0, 0), (2, 6), 0, (6, 1))
    assert (b0.tensor, b0.byte_offset) == ("b", 48)


def test_from_shards_refuses_bad_boxes_and_dtypes():
    with pytest.raises(ferry.FerryError, match="w"):
        ferry.Layout.from_shards([ferry.Shard("w", (4,), "fp32", (0,), (5,), 0)])
    with pytest.raises(ferry.FerryError, match="w"):
        ferry.Layout.from_shards([ferry.Shard("w", (4,), "fp32", (0,), (4,), 0),
                                  ferry.Shard("w", (5,), "fp32", (0,), (5,), 1)])
    with pytest.raises(TypeError, match="complex"):
        ferry.Layout.from_shards([ferry.Shard("w", (4,), np.complex64, (0,), (4,), 0)])


def test_a_shard_stored_transformed_takes_its_stored_dtypes_bytes():
    # vLLM's Mamba A: 4 bf16 A_log values stored as fp32 -exp, then a bf16 tensor after them
    layout = ferry.Layout.from_shards([
        ferry.Shard("A_log", (8,), "bf16", (4,), (8,), 0, "mixer", "neg_exp"),
        ferry.Shard("D", (8,), "bf16", (4,), (8,), 0, "mixer")])
    assert layout.buffers() == [ferry.BufferInfo(0, "mixer", 4 * 4 + 4 * 2)]
    assert [f.byte_offset for f in layout.fragments(0)] == [0, 16]
    assert layout.tensors[0] == ferry.TensorInfo("A_log", (8,), "bf16")  # the sender's dtype
    assert layout.stored_dtypes == {"A_log": "fp32"}
    with pytest.raises(ValueError, match="A_log: its shards disagree on its transform "
                                         "\\('neg_exp' and 'none'\\)"):
        ferry.Layout.from_shards([ferry.Shard("A_log", (8,), "bf16", (0,), (4,), 0, "A", "neg_exp"),
                                  ferry.Shard("A_log", (8,), "bf16", (4,), (8,), 1, "A")])
    with pytest.raises(ValueError, match="shard of A_log: unknown transform 'exp'"):
        ferry.Layout.from_shards([ferry.Shard("A_log", (8,), "bf16", (0,), (8,), 0, "A", "exp")])


def test_validate_reports_uncovered_elements():
    partial = ferry.Layout.from_shards([ferry.Shard("w", (4, 2), "fp32", (0, 0), (3, 2), 0)])
    with pytest.raises(ferry.FerryError, match="w"):
        partial.validate()


def test_from_dtensors():
    """Needs torch with DTensor (torch >= 2.0; Debian 12's torch 1.13 has none: skipped there)."""
    torch = pytest.importorskip("torch")
    dt = pytest.importorskip("torch.distributed.tensor", reason="this torch has no DTensor")
    import torch.distributed as dist
    from procs import free_port
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        mesh = dt.DeviceMesh("cpu", [0])
        w = dt.distribute_tensor(torch.zeros(4, 6), mesh, [dt.Shard(0)])
        b = dt.distribute_tensor(torch.zeros(6), mesh, [dt.Replicate()])
        layout = ferry.Layout.from_dtensors({"w": w, "b": b}, first_rank=3)
        assert layout.ranks == [3]
        assert [(f.tensor, f.lo, f.hi) for f in layout.fragments()] == [
            ("w", (0, 0), (4, 6)), ("b", (0,), (6,))]
    finally:
        dist.destroy_process_group()
