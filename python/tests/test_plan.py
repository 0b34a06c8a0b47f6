"""ferry.plan: offline planning, its statistics and JSON export, options and input errors."""

import json

import pytest

import ferry


@pytest.fixture(scope="module")
def layouts():
    src = ferry.Layout.preset("llama-3.1-8b", "megatron:tp=2,pp=2", scale="1/64")
    dst = ferry.Layout.preset("llama-3.1-8b", "vllm:tp=2,dp=2", scale="1/64", first_rank=4)
    return src, dst


def test_reshard_moves_each_destination_byte_once(layouts):
    src, dst = layouts
    plan = ferry.plan(src, dst)
    plan.validate()
    stats = plan.stats
    assert stats.strategy == "reshard" and stats.ranks == 8
    destination_bytes = sum(b.bytes for b in dst.buffers())
    assert sum(stats.bytes_by_link.values()) <= destination_bytes
    assert stats.ops > 0 and stats.planning_seconds > 0
    assert set(stats.phase_seconds) == {"fold", "intersect", "route", "select", "order", "emit"}


def test_gather_broadcast_moves_more_than_reshard(layouts):
    src, dst = layouts
    reshard = ferry.plan(src, dst).stats
    baseline = ferry.plan(src, dst, strategy="gather-broadcast").stats
    assert baseline.strategy == "gather-broadcast"
    assert sum(baseline.bytes_by_link.values()) > sum(reshard.bytes_by_link.values())


def test_topology_puts_ranks_on_nodes(layouts):
    src, dst = layouts
    assert ferry.plan(src, dst, gpus_per_node=8).stats.bytes_by_link["network"] == 0
    assert ferry.plan(src, dst, gpus_per_node=4).stats.bytes_by_link["network"] > 0


def test_json_export(layouts, tmp_path):
    src, dst = layouts
    plan = ferry.plan(src, dst)
    text = plan.to_json()
    parsed = json.loads(text)
    assert parsed["strategy"] == "reshard" and parsed["num_ranks"] == 8
    path = tmp_path / "plan.json"
    assert plan.to_json(path) is None
    assert json.loads(path.read_text()) == parsed
    assert plan.to_dot().startswith("digraph")


def test_config_dict_sets_planner_options(layouts):
    src, dst = layouts
    options = {"planner.hierarchical": False, "planner.network_chunk_bytes": "4KiB"}
    described = ferry.describe_config(options)
    assert "4KiB" in described or "4096" in described
    flat = ferry.plan(src, dst, gpus_per_node=2, config=options).stats
    tree = ferry.plan(src, dst, gpus_per_node=2).stats
    assert flat.bytes_by_link["network"] >= tree.bytes_by_link["network"]
    with pytest.raises(ferry.FerryError, match="planner.no_such_option"):
        ferry.plan(src, dst, config={"planner.no_such_option": 1})


def test_config_yaml_file(layouts, tmp_path):
    src, dst = layouts
    path = tmp_path / "ferry.yaml"
    path.write_text("planner:\n  hierarchical: false\n")
    assert "hierarchical" in ferry.describe_config(str(path))
    ferry.plan(src, dst, config=str(path)).validate()


def test_mismatched_layouts_are_refused():
    src = ferry.Layout.from_shards([ferry.Shard("w", (4,), "fp32", (0,), (4,), 0)])
    other_shape = ferry.Layout.from_shards([ferry.Shard("w", (5,), "fp32", (0,), (5,), 1)])
    with pytest.raises(ferry.FerryError, match="w"):
        ferry.plan(src, other_shape)
    with pytest.raises(ferry.FerryError, match="strategy|broadcast"):
        ferry.plan(src, src, strategy="teleport")
