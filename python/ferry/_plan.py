"""ferry.plan and ferry.Plan: planning a refit offline, without a session, and the plan's
statistics and exports (what `ferry plan` prints and writes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

from . import _ferry
from ._layout import Layout


class Stats(SimpleNamespace):
    """Plain statistics: attributes (stats.ops, stats.bytes_by_link["network"], ...); dict(stats)
    via vars(stats)."""


class Plan:
    """An immutable refit plan: layouts + topology + strategy + planner options -> a transfer
    DAG. Made by ferry.plan (offline) or Session.refit (bound to a session)."""

    def __init__(self, impl: _ferry.Plan, source: Layout, destination: Layout):
        self._impl = impl
        self.source = source
        self.destination = destination

    @property
    def stats(self) -> Stats:
        """ops, messages, bytes by link class, node ingress/egress, lower bound, predicted time,
        planning time and the planner's time per pass."""
        return Stats(**self._impl.stats())

    def to_json(self, path: str | None = None, indent: int = -1) -> str | None:
        """The plan as JSON (the format of `ferry plan --json`): returned, or streamed to
        `path` (then None is returned)."""
        if path is None:
            return self._impl.to_json(indent)
        self._impl.save_json(str(path), indent)
        return None

    def to_dot(self) -> str:
        """The plan as Graphviz DOT text (the format of `ferry plan --dot`)."""
        return self._impl.to_dot()

    def validate(self) -> None:
        """Raises FerryError unless every destination byte is written exactly once."""
        self._impl.validate()

    def __repr__(self) -> str:
        s = self._impl.stats()
        return f"ferry.Plan({s['strategy']}, {s['ranks']} ranks, {s['ops']} ops)"


def plan(src: Layout, dst: Layout, strategy: str = "reshard", topology: str | None = None,
         config: str | Mapping[str, Any] | None = None, gpus_per_node: int = 8) -> Plan:
    """Plans moving `src` to `dst` ("reshard" or "gather-broadcast"). `topology`: a topology
    file, or None for every rank either layout uses at `gpus_per_node` per node. `config`: a
    YAML file or a dict of options (planner.*), over FERRY_* variables. Blocks while planning."""
    for name, layout in (("src", src), ("dst", dst)):
        if not isinstance(layout, Layout):
            raise TypeError(f"{name} must be a ferry.Layout, got {type(layout).__name__}")
    impl = _ferry.plan(src._impl, dst._impl, strategy, topology, gpus_per_node, config)
    return Plan(impl, src, dst)
