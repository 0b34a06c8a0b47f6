#!/usr/bin/env python3
"""Where the first window of every rank's network sends goes, from a plan `ferry plan --json` wrote.

Owns one diagnostic of the in-flight window (docs/simulator.md, "In-flight window"): the executor
posts each rank's ready sends in (round, id) order, at most executor.max_in_flight at once
(core/runtime/rank_run.cc, StartReady), so a rank's first `--window` network sends are what it
has moving at the start. Summed over all ranks, this prints the bytes those first windows carry
to each destination node, next to what each node receives in the whole plan: when a few nodes get
most of their bytes in the first windows while the rest get almost none, the window keeps most
destination NICs idle.

Usage: tools/sim/window_spread.py PLAN.json [--window 256] [--gpus-per-node 8]
"""
import argparse
import collections
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="a plan JSON from `ferry plan --json`")
    parser.add_argument("--window", type=int, default=256, help="executor.max_in_flight")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    args = parser.parse_args()
    with open(args.plan) as f:
        ops = json.load(f)["ops"]
    sends = collections.defaultdict(list)
    for op in ops:
        if op["kind"] in ("send", "forward") and op.get("link") == "network":
            sends[op["rank"]].append(op)
    first = collections.Counter()
    total = collections.Counter()
    for rank_sends in sends.values():
        rank_sends.sort(key=lambda op: (op["round"], op["id"]))
        for i, op in enumerate(rank_sends):
            node = op["peer"] // args.gpus_per_node
            total[node] += op["bytes"]
            if i < args.window:
                first[node] += op["bytes"]
    print(f"{len(sends)} sending ranks, first {args.window} network sends of each")
    print("dst node  first windows (GiB)  whole plan (GiB)  share")
    for node in sorted(total):
        print(f"{node:8d}  {first[node] / 2**30:19.1f}  {total[node] / 2**30:16.1f}  "
              f"{first[node] / total[node]:5.0%}")
    busy = sum(1 for node in total if first[node] >= 0.5 * total[node])
    print(f"{busy} of {len(total)} destination nodes receive half or more of their bytes in the "
          f"first windows")


if __name__ == "__main__":
    main()
