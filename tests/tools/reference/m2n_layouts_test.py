"""m2n_layouts against cases worked by hand from nccl_m2n.h / nccl/m2n/api.py (nccl-extensions
0.1.0): a mesh is a row-major interval of ranks from its start rank, placements nest in mesh-axis
order as DTensor's do (`_shard_factors` multiplies the mesh dims that shard one tensor dim), every
shard is even, a rank's block is one contiguous buffer, at most 3 tensor and 2 mesh dims."""

import json

import yaml

import m2n_layouts as m


def frag(rank, box, buffer="b", offset=0, strides=None):
    return m.Fragment(rank, buffer, offset, tuple(tuple(b) for b in box),
                      tuple(strides) if strides else None)


def test_row_parallel_tp2_is_shard_1_on_a_mesh_of_two():
    # Megatron's RowParallelLinear: rank t holds columns [4t, 4t+4) of an [8, 8] weight.
    side = m.describe_side((8, 8), [frag(0, [[0, 8], [0, 4]]), frag(1, [[0, 8], [4, 8]])])
    assert side == m.Side(0, (2,), (1,), {0: ("b", 0, (8, 4), (0, 0)), 1: ("b", 0, (8, 4), (0, 4))})


def test_two_engines_of_tp2_are_replicate_then_shard_0_from_their_first_rank():
    # vLLM TP2 x DP2 on ranks 4..7: engine e, TP rank t is rank 4 + 2e + t, rows [4t, 4t+4).
    frags = [frag(4 + 2 * e + t, [[4 * t, 4 * t + 4], [0, 4]]) for e in range(2) for t in range(2)]
    side = m.describe_side((8, 4), frags)
    assert (side.start, side.mesh, side.placements) == (4, (2, 2), (m.REPLICATE, 0))


def test_two_mesh_axes_on_two_tensor_dims_nest_in_mesh_order():
    # Rank 1 = mesh coords (0, 1): mesh axis 1 splits the columns.
    frags = [frag(0, [[0, 2], [0, 2]]), frag(1, [[0, 2], [2, 4]]),
             frag(2, [[2, 4], [0, 2]]), frag(3, [[2, 4], [2, 4]])]
    assert m.describe_side((4, 4), frags).placements == (0, 1)
    # Rank 1 holding the lower-left block instead: mesh axis 0 splits the columns.
    frags = [frag(0, [[0, 2], [0, 2]]), frag(1, [[2, 4], [0, 2]]),
             frag(2, [[0, 2], [2, 4]]), frag(3, [[2, 4], [2, 4]])]
    assert m.describe_side((4, 4), frags).placements == (1, 0)


def test_two_axes_sharding_one_dim_split_the_outer_axis_first():
    # Mesh (2, 2), Shard(0) twice: coords (1, 0) is chunk 1 * 2 + 0 = 2 of 4, rows [4, 6) of 8.
    assert m.expected_box((8, 3), (2, 2), (0, 0), (1, 0)) == ((4, 6), (0, 3))
    assert m.expected_box((8, 3), (2, 2), (0, 0), (0, 1)) == ((2, 4), (0, 3))
    assert m.expected_box((7, 3), (2,), (0,), (0,)) is None  # uneven


def test_a_block_at_an_offset_keeps_its_buffer_and_offset():
    side = m.describe_side((4,), [frag(0, [[0, 4]], buffer="fused", offset=96)])
    assert side.pieces == {0: ("fused", 96, (4,), (0,))}


def test_what_m2n_cannot_express_is_named():
    interleaved = [frag(0, [[0, 2], [0, 4]]), frag(0, [[4, 6], [0, 4]], offset=16),
                   frag(1, [[2, 4], [0, 4]]), frag(1, [[6, 8], [0, 4]], offset=16)]
    assert "rank 0 holds 2 pieces" in m.describe_side((8, 4), interleaved)
    uneven = [frag(0, [[0, 3], [0, 4]]), frag(1, [[3, 5], [0, 4]])]
    assert "no even" in m.describe_side((5, 4), uneven)
    gap = [frag(0, [[0, 2]]), frag(2, [[2, 4]])]
    assert "not one interval" in m.describe_side((4,), gap)
    column_strip = [frag(0, [[0, 4], [0, 4]], strides=[8, 1]), frag(1, [[0, 4], [4, 8]], strides=[8, 1])]
    assert "not one contiguous block" in m.describe_side((4, 8), column_strip)
    assert "4 dimensions" in m.describe_side((1, 1, 1, 2), [frag(0, [[0, 1]] * 3 + [[0, 2]])])


def test_a_dtype_nccl_lacks_is_named():
    doc = layout([("i", (2,), "int16")], [{"tensor": "i", "box": [[0, 2]], "rank": 0, "byte_offset": 0}])
    supported, unsupported = m.plan(m.Layout(doc), m.Layout(doc))
    assert supported == [] and unsupported == [("i", 4, "dtype int16 (NCCL has no such type)")]


def layout(tensors, fragments, buffers=None):
    doc = {"format": "ferry-layout", "version": 1,
           "tensors": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in tensors],
           "fragments": fragments}
    if buffers is not None:
        doc["buffers"] = buffers
    return doc


def test_main_writes_the_plan_and_layouts_cut_to_the_expressible_tensors(tmp_path, capsys):
    tensors = [("w", (4, 2), "bf16"), ("fused", (4, 2), "bf16"), ("cast", (2,), "bf16")]
    src = layout(tensors, [
        {"tensor": "w", "box": [[0, 2], [0, 2]], "rank": 0, "buffer": "w", "byte_offset": 0},
        {"tensor": "w", "box": [[2, 4], [0, 2]], "rank": 1, "buffer": "w", "byte_offset": 0},
        {"tensor": "fused", "box": [[0, 1], [0, 2]], "rank": 0, "buffer": "f", "byte_offset": 0},
        {"tensor": "fused", "box": [[2, 3], [0, 2]], "rank": 0, "buffer": "f", "byte_offset": 4},
        {"tensor": "fused", "box": [[1, 2], [0, 2]], "rank": 1, "buffer": "f", "byte_offset": 0},
        {"tensor": "fused", "box": [[3, 4], [0, 2]], "rank": 1, "buffer": "f", "byte_offset": 4},
        {"tensor": "cast", "box": [[0, 2]], "rank": 0, "buffer": "c", "byte_offset": 0}],
        buffers=[{"rank": 0, "name": "w", "bytes": 64}, {"rank": 1, "name": "w", "bytes": 8},
                 {"rank": 0, "name": "f", "bytes": 8}, {"rank": 1, "name": "f", "bytes": 8},
                 {"rank": 0, "name": "c", "bytes": 4}])
    dst_tensors = [("w", (4, 2), "bf16"), ("fused", (4, 2), "bf16"), ("cast", (2,), "fp32")]
    dst = layout(dst_tensors, [
        {"tensor": "w", "box": [[0, 4], [0, 2]], "rank": 2, "buffer": "w", "byte_offset": 8},
        {"tensor": "fused", "box": [[0, 4], [0, 2]], "rank": 2, "buffer": "f", "byte_offset": 0},
        {"tensor": "cast", "box": [[0, 2]], "rank": 2, "buffer": "c", "byte_offset": 0}])
    for name, doc in (("src.in.yaml", src), ("dst.in.yaml", dst)):
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    assert m.main(["--src", str(tmp_path / "src.in.yaml"), "--dst", str(tmp_path / "dst.in.yaml"),
                   "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 3 tensors, 0.0 of 0.0 MiB" in printed
    assert "source: rank 0 holds 2 pieces" in printed
    assert "another dtype or shape on the source" in printed
    p = json.loads((out / "m2n_plan.json").read_text())
    assert p["world"] == 3
    [w] = p["tensors"]
    assert (w["name"], w["bytes"]) == ("w", 16)
    assert w["src"] == {"start": 0, "mesh": [2], "placements": [0],
                        "pieces": {"0": ["w", 0, [2, 2], [0, 0]], "1": ["w", 0, [2, 2], [2, 0]]}}
    assert w["dst"] == {"start": 2, "mesh": [1], "placements": ["R"],
                        "pieces": {"2": ["w", 8, [4, 2], [0, 0]]}}
    # Declared buffer sizes stay (64 B on rank 0); an undeclared one ends with its last piece.
    assert p["src_buffers"] == {"0": {"w": 64}, "1": {"w": 8}}
    assert p["dst_buffers"] == {"2": {"w": 24}}
    cut = yaml.safe_load((out / "src.yaml").read_text())
    assert [t["name"] for t in cut["tensors"]] == ["w"]
    assert {f["tensor"] for f in cut["fragments"]} == {"w"}
    assert cut["buffers"] == [{"rank": 0, "name": "w", "bytes": 64}, {"rank": 1, "name": "w", "bytes": 8}]


def test_a_file_that_is_not_a_layout_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("tensors: 3\n")
    assert m.main(["--src", str(tmp_path / "bad.yaml"), "--dst", str(tmp_path / "bad.yaml"),
                   "--out", str(tmp_path / "o")]) == 1
    assert "bad.yaml: not a ferry layout" in capsys.readouterr().err


def test_stacked_experts_kept_one_buffer_each_go_expert_by_expert():
    # ferry's experts.[0:2].w of shape [2, 2, 2]: the source keeps each expert in a buffer of its
    # own (Megatron's SequentialMLP, two pieces on rank 0); the destination stacks both on rank 1
    # (vLLM's FusedMoE), expert 1 starting 2 x 2 x 2 bytes in. Expert by expert, each is one block.
    name = "layers.0.experts.[0:2].w"
    src = m.Layout(layout([(name, (2, 2, 2), "bf16")], [
        {"tensor": name, "box": [[0, 1], [0, 2], [0, 2]], "rank": 0, "buffer": "e0", "byte_offset": 0},
        {"tensor": name, "box": [[1, 2], [0, 2], [0, 2]], "rank": 0, "buffer": "e1", "byte_offset": 0}]))
    dst = m.Layout(layout([(name, (2, 2, 2), "bf16")], [
        {"tensor": name, "box": [[0, 2], [0, 2], [0, 2]], "rank": 1, "buffer": "w13", "byte_offset": 0}]))
    supported, unsupported = m.plan(src, dst)
    assert unsupported == []
    assert [(e["name"], e["tensor"], e["shape"], e["bytes"]) for e in supported] == [
        ("layers.0.experts.0.w", name, [2, 2], 8), ("layers.0.experts.1.w", name, [2, 2], 8)]
    assert supported[1]["src"]["pieces"] == {"0": ["e1", 0, [2, 2], [0, 0]]}
    assert supported[1]["dst"]["pieces"] == {"1": ["w13", 8, [2, 2], [0, 0]]}


def test_stacked_experts_fall_back_whole_when_one_expert_cannot_go():
    name = "experts.[0:2].w"
    src = m.Layout(layout([(name, (2, 4), "bf16")], [
        {"tensor": name, "box": [[0, 1], [0, 4]], "rank": 0, "buffer": "e0", "byte_offset": 0},
        {"tensor": name, "box": [[1, 2], [0, 3]], "rank": 0, "buffer": "e1", "byte_offset": 0},
        {"tensor": name, "box": [[1, 2], [3, 4]], "rank": 0, "buffer": "e1", "byte_offset": 6}]))
    dst = m.Layout(layout([(name, (2, 4), "bf16")], [
        {"tensor": name, "box": [[0, 2], [0, 4]], "rank": 1, "buffer": "w", "byte_offset": 0}]))
    supported, [(tensor, nbytes, reason)] = m.plan(src, dst)
    assert supported == [] and (tensor, nbytes) == (name, 16)
    assert "expert by expert, source: rank 0 holds 2 pieces" in reason
