"""ferry.sglang's exchange of the servers' EPLB maps (ferry/_sglang_eplb.py): what a server's
leading worker published is refused, naming the server, when it is too large, not a map, or
names another server; the destination is the preset where no server's experts moved, and otherwise
the layout of every server's map, the initial placement (physical p holding p mod E) for the
servers that sent none; maps wider than the spec (elastic EP) or disagreeing on the experts are
refused. Needs torch, not SGLang."""

import json
import os

import pytest

pytest.importorskip("torch")
eplb = pytest.importorskip("ferry._sglang_eplb")

import ferry  # noqa: E402
from sglang_harness import QWEN3_MOE  # noqa: E402

SPEC = "sglang:tp=2,ep=2,redundant=2,engines=2,expert_tensors=members"
E, P = 128, 130  # Qwen3-MoE's experts, and with 2 redundant ones


def entry(server=1, experts=E, rows=None) -> bytes:
    rows = rows if rows is not None else [[(p + 1) % E for p in range(P)]] * 2
    return json.dumps({"server": server, "experts": experts, "map": rows}).encode()


def test_maps_from_other_ranks_are_checked_before_use(monkeypatch):
    assert eplb.gathered_maps([b"", entry()])[1]["experts"] == E
    cases = [([b"", b"\xff"], "server 1's leading worker sent no EPLB map"),
             ([b"[1, 2]"], "expected server, experts and map"),
             ([entry()], "server 0's leading worker sent the EPLB map of server 1"),
             ([b"", entry(server=True)], "the EPLB map of server True"),
             ([b"", entry(experts=0)], "0 logical experts")]
    for published, reason in cases:
        with pytest.raises(ValueError, match=reason):
            eplb.gathered_maps(published)
    monkeypatch.setattr(eplb, "MAX_MAP_BYTES", 10)
    with pytest.raises(ValueError, match="server 1's leading worker sent an EPLB map of .* over "
                                         "MAX_MAP_BYTES"):
        eplb.gathered_maps([b"", entry()])


def test_the_destination_holds_every_servers_map(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE))
    model = str(tmp_path / "config.json")
    maps = eplb.gathered_maps([b"", entry()])
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    built = eplb.destination(model, SPEC, 4, eplb.maps_document(maps, 2, 2, SPEC))
    assert sorted(os.listdir(tmp_path)) == ["config.json"]  # the map's file is gone
    # by hand: server 0 (ranks 4, 5) as SGLang starts it, server 1 (ranks 6, 7) shifted by one
    initial = [[p % E for p in range(P)]] * 2
    moved = [[(p + 1) % E for p in range(P)]] * 2
    (tmp_path / "expected.json").write_text(json.dumps({"engines": [initial, moved]}))
    expected = ferry.Layout.preset(model, f"{SPEC},eplb_map={tmp_path / 'expected.json'}",
                                   first_rank=4)
    assert built.to_yaml() == expected.to_yaml()
    preset = ferry.Layout.preset(model, SPEC, first_rank=4)
    assert eplb.maps_document({}, 2, 2, SPEC) is None
    assert eplb.destination(model, SPEC, 4, None).to_yaml() == preset.to_yaml()
    assert built.to_yaml() != preset.to_yaml()
    server0 = [f for f in built.fragments(4) if f.buffer.endswith("experts.w13_weight")]
    assert server0 == [f for f in preset.fragments(4) if f.buffer.endswith("experts.w13_weight")]


def test_servers_that_disagree_with_the_spec_or_each_other_are_refused():
    maps = eplb.gathered_maps([entry(server=0, experts=64), entry()])
    with pytest.raises(ValueError, match="disagree on the number of logical experts"):
        eplb.maps_document(maps, 2, 2, SPEC)
    wider = eplb.gathered_maps([b"", entry(rows=[[p % E for p in range(P + 2)]] * 2)])
    with pytest.raises(ValueError, match="server 1's EPLB map has 132 physical experts a layer; "
                                         ".* holds 128 \\+ 2 redundant: elastic EP"):
        eplb.maps_document(wider, 2, 2, SPEC)
