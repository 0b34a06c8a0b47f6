"""Where SGLang servers keep their experts, for ferry.sglang: each server's current
physical-to-logical expert map, published by its leading worker through the session's store
and read by every rank, turned into the destination layout (the `sglang:` spec's eplb_map,
tools/models/eplb_map.h).

SGLang (0.5.23, python/sglang/srt) keeps one ExpertLocationMetadata a server process: physical
expert p of decoder layer l holds logical expert physical_to_logical_map[l][p]. It starts as
init_trivial (p holds p mod E), or where --init-expert-location puts it, and EPLB
(--enable-eplb: eplb/eplb_manager.py) rewrites it together with the weights it moves
(eplb/expert_location_updater.py), between forward passes, on the scheduler's thread that also
runs a weight update. Every rank of a server holds the same map: the expert counts EPLB balances
are all-reduced over the server's ranks (eplb/expert_distribution.py) and every rank computes the
same rebalance. SGLang's own loader writes each logical expert to every physical expert the map
gives it (eplb/expert_location.py logical_to_all_physical), which is what ferry's layout then
does. Elastic EP, which adds physical experts while serving, is not modelled: its map is wider
than the spec's and maps_document refuses it.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import torch

from ._layout import Layout

MAX_MAP_BYTES = 64 << 20
"""The largest map a server may publish (tools/models/eplb_map.h kMaxEplbMapFileBytes)."""


def current_map() -> torch.Tensor | None:
    """This SGLang process's physical_to_logical_map (a CPU copy, layers x physical experts);
    None for a model without MoE layers (SGLang then keeps no metadata)."""
    from sglang.srt.eplb.expert_location import get_global_expert_location_metadata

    metadata = get_global_expert_location_metadata()
    if metadata is None:
        return None
    return metadata.physical_to_logical_map_cpu.clone()


def eplb_enabled() -> bool:
    """Whether this SGLang server runs EPLB (--enable-eplb), which moves experts while it serves."""
    from sglang.srt.runtime_context import get_exec

    return bool(get_exec().moe.enable_eplb)


def num_logical_experts() -> int:
    from sglang.srt.eplb.expert_location import get_global_expert_location_metadata

    return get_global_expert_location_metadata().num_logical_experts


def is_initial(held: torch.Tensor | None, experts: int) -> bool:
    """Whether `held` is SGLang's initial placement (init_trivial: physical p holds p mod E)."""
    return held is None or torch.equal(held, torch.arange(held.shape[-1]).expand_as(held) % experts)


def contribution(server: int, held: torch.Tensor | None) -> str:
    """What a server's leading rank publishes when the refit plans: its map, as JSON, unless the
    experts sit where the `sglang:` preset puts them (then nothing, "")."""
    if held is None:
        return ""
    experts = num_logical_experts()
    if is_initial(held, experts):
        return ""
    return json.dumps({"server": server, "experts": experts, "map": held.tolist()})


def gathered_maps(published: list[bytes]) -> dict[int, dict[str, Any]]:
    """The servers' maps from what each server's leading worker published (index k: server k's,
    b"" when its experts sit where SGLang starts them), by server. The bytes are another
    process's: each is checked for size, form and the server it names; the rows themselves are
    checked where the layout reads them. ValueError naming the server."""
    maps: dict[int, dict[str, Any]] = {}
    for server, raw in enumerate(published):
        if not raw:
            continue
        if len(raw) > MAX_MAP_BYTES:
            raise ValueError(f"server {server}'s leading worker sent an EPLB map of {len(raw)} "
                             f"bytes, over MAX_MAP_BYTES ({MAX_MAP_BYTES})")
        try:
            entry = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"server {server}'s leading worker sent no EPLB map: {e}") from None
        if not isinstance(entry, dict) or set(entry) != {"server", "experts", "map"}:
            raise ValueError(f"server {server}'s leading worker sent no EPLB map: expected "
                             "server, experts and map")
        named, experts = entry["server"], entry["experts"]
        if type(named) is not int or named != server:
            raise ValueError(f"server {server}'s leading worker sent the EPLB map of server "
                             f"{named!r}")
        if type(experts) is not int or experts < 1 or not isinstance(entry["map"], list):
            raise ValueError(f"server {server}'s leading worker sent an EPLB map with "
                             f"{experts!r} logical experts or no rows")
        maps[server] = entry
    return maps


def maps_document(maps: dict[int, dict[str, Any]], engines: int, redundant: int,
                  spec: str) -> dict[str, Any] | None:
    """The eplb_map file's content for `engines` servers of `spec` (`redundant` redundant
    experts): every server's map, the initial placement for servers that published none; None
    where no server's experts moved. Refuses maps that disagree on the logical experts or are
    wider than the spec's physical experts (elastic EP)."""
    if not maps:
        return None
    experts = next(iter(maps.values()))["experts"]
    if any(m["experts"] != experts for m in maps.values()):
        raise ValueError(f"the servers' EPLB maps disagree on the number of logical experts: "
                         f"{sorted({m['experts'] for m in maps.values()})}")
    width = experts + redundant
    for server, m in sorted(maps.items()):
        wide = {len(row) for row in m["map"] if isinstance(row, list)}
        if wide and wide != {width}:
            raise ValueError(f"server {server}'s EPLB map has {max(wide)} physical experts a "
                             f"layer; {spec} holds {experts} + {redundant} redundant: elastic EP, "
                             "which adds physical experts while serving, is not supported")
    layers = len(next(iter(maps.values()))["map"])
    initial = [[p % experts for p in range(width)] for _ in range(layers)]
    return {"engines": [maps[k]["map"] if k in maps else initial for k in range(engines)]}


def destination(model: str, spec: str, first_rank: int, document: dict[str, Any] | None
                ) -> Layout:
    """The servers' layout (`spec` on ranks first_rank..): the preset's without a maps
    `document` (maps_document), else through the spec's eplb_map (a temporary file, removed once
    read)."""
    if document is None:
        return Layout.preset(model, spec, first_rank=first_rank)
    handle, path = tempfile.mkstemp(prefix="ferry-sglang-eplb-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as f:
            json.dump(document, f)
        if "," in path:
            raise ValueError(f"the temporary directory's path {os.path.dirname(path)!r} holds a "
                             "comma, which a layout spec cannot carry; set TMPDIR elsewhere")
        return Layout.preset(model, f"{spec},eplb_map={path}", first_rank=first_rank)
    finally:
        os.unlink(path)
