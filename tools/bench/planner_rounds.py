#!/usr/bin/env python3
"""Paired planner timings on a noisy host: the harness behind docs/BENCHMARKS.md's planner rounds.

A shared or virtual host changes speed by tens of percent within minutes, so absolute times from
different calls do not compare. This runs several builds of `planner_bench` (or several rows) as
*entries* `BINARY:ROW`, each round once per entry, every run in a fresh process pinned to one core,
in an order that rotates from round to round, and compares entries round by round.

  planner_rounds.py run [--rounds N] [--core C] [--out FILE] BINARY:ROW [BINARY:ROW ...]
      ROW is a benchmark name under BM_Refit/ matched whole ("deepseek_v3_pp16ep16_to_tp32dp8ep32").
      Appends one JSON line per run to FILE (default: stdout): round, entry, its index in the
      command line, real_ms, counters.
      Progress goes to stderr. A run that fails or prints no result stops the harness (exit 1)
      after naming the entry and its output, with every earlier line kept.
  planner_rounds.py summary [--first] FILE
      Per row, each entry: runs, median wall time (fastest-slowest), the median over rounds of its
      ratio to the row's first entry on the command line, the rounds it was faster in, and the
      medians of its counters (per-pass ms, user_ms, sys_ms, faults, peak RSS).
      planner_bench times a process's first plan, on fresh memory, before its loop (first_ms), and
      the loop times later plans, which reuse the memory the first retained. --first compares
      first plans: first_ms where a run has it, else its wall time (a binary older than first_ms,
      whose one timed plan in a fresh process was its first).

Example (device, two builds of the bench copied into .devbin/pbench/):
  tools/bench/planner_rounds.py run --rounds 20 --out $OUT/ds.jsonl \\
      .devbin/pbench/pb_old:deepseek_v3_pp16ep16_to_tp32dp8ep32 \\
      .devbin/pbench/pb_new:deepseek_v3_pp16ep16_to_tp32dp8ep32
  tools/bench/planner_rounds.py summary $OUT/ds.jsonl
"""

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile

COUNTERS = ("first_ms", "fold_ms", "intersect_ms", "route_ms", "select_ms", "order_ms", "emit_ms",
            "user_ms", "sys_ms", "faults", "peak_rss_MiB")


def parse_entry(text):
    """'BINARY:ROW' -> (binary, row); the binary may contain ':' only before the last one."""
    binary, sep, row = text.rpartition(":")
    if not sep or not binary or not row:
        raise argparse.ArgumentTypeError(f"entry '{text}' is not BINARY:ROW")
    return binary, row


def rotation(num_entries, round_index):
    """Entry indexes in the order round `round_index` runs them: shifted by one each round."""
    return [(j + round_index) % num_entries for j in range(num_entries)]


def run_once(binary, row, core):
    """Runs BM_Refit/ROW of `binary` once in a fresh process; returns (real_ms, counters)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [binary, "--benchmark_min_time=0.01", "--benchmark_repetitions=1",
                   f"--benchmark_filter=^BM_Refit/{row}$", "--benchmark_out_format=json",
                   f"--benchmark_out={out.name}"]
        if core is not None:
            command = ["taskset", "-c", str(core)] + command
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        except OSError as error:  # no such binary, or no taskset
            raise RuntimeError(f"{binary}:{row} could not start: {error}") from error
        try:
            with open(out.name) as f:
                results = [b for b in json.load(f).get("benchmarks", [])
                           if b.get("run_type", "iteration") == "iteration"]
        except (OSError, ValueError):
            results = []
    if done.returncode != 0 or len(results) != 1 or "error_occurred" in results[0]:
        raise RuntimeError(f"{binary}:{row} gave no result (exit {done.returncode}):\n"
                           f"{done.stdout[-2000:]}")
    result = results[0]
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[result.get("time_unit", "ns")]
    counters = {k: result[k] for k in COUNTERS if k in result}
    return result["real_time"] * scale, counters


def run(args):
    entries = [parse_entry(e) for e in args.entries]
    out = open(args.out, "a") if args.out else sys.stdout
    try:
        for r in range(1, args.rounds + 1):
            for j in rotation(len(entries), r):
                binary, row = entries[j]
                real_ms, counters = run_once(binary, row, args.core)
                line = {"round": r, "index": j, "entry": f"{binary}:{row}",
                        "real_ms": round(real_ms, 3), "counters": counters}
                out.write(json.dumps(line, sort_keys=True) + "\n")
                out.flush()
            print(f"round {r}/{args.rounds} done", file=sys.stderr)
    except RuntimeError as error:
        print(f"planner_rounds: {error}", file=sys.stderr)
        return 1
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def summarize(lines, first=False):
    """Summary lines (strings) of the JSON lines `lines`; see the module's docstring. `first`:
    time each run by its first plan (first_ms, else real_ms)."""

    def time_of(record):
        return record["counters"].get("first_ms", record["real_ms"]) if first else record["real_ms"]

    runs = {}  # entry -> {round: record}
    index = {}  # entry -> its place in the command line
    for text in lines:
        if text.strip():
            record = json.loads(text)
            runs.setdefault(record["entry"], {})[record["round"]] = record
            index.setdefault(record["entry"], record.get("index", len(index)))
    rows = collections.OrderedDict()  # row -> entries, in command-line order
    for entry in sorted(runs, key=lambda e: index[e]):
        rows.setdefault(entry.rpartition(":")[2], []).append(entry)
    out = []
    for row, entries in rows.items():
        out.append(f"{row}:")
        base = runs[entries[0]]
        for entry in entries:
            mine = runs[entry]
            times = [time_of(x) for x in mine.values()]
            paired = [time_of(mine[r]) / time_of(base[r]) for r in mine if r in base]
            faster = sum(1 for r in mine if r in base and time_of(mine[r]) < time_of(base[r]))
            counters = " ".join(
                f"{k}={statistics.median(x['counters'][k] for x in mine.values()):.1f}"
                for k in COUNTERS if all(k in x["counters"] for x in mine.values()))
            line = (f"  {entry.rpartition(':')[0]} n={len(times)} median "
                    f"{statistics.median(times):.1f} ms ({min(times):.1f}-{max(times):.1f})")
            if entry != entries[0]:
                line += (f" paired ratio {statistics.median(paired):.3f}, faster in {faster} of "
                         f"{len(paired)}")
            out.append(line + (" " + counters if counters else ""))
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="time entries in rotating rounds")
    run_parser.add_argument("--rounds", type=int, default=8)
    run_parser.add_argument("--core", type=int, default=None, help="pin every run to this core")
    run_parser.add_argument("--out", default=None, help="append JSON lines here (default stdout)")
    run_parser.add_argument("entries", nargs="+", help="BINARY:ROW")
    summary_parser = commands.add_parser("summary", help="medians and paired ratios of a run")
    summary_parser.add_argument("--first", action="store_true",
                                help="compare first plans (first_ms, else the wall time)")
    summary_parser.add_argument("file")
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        for e in args.entries:
            try:
                parse_entry(e)
            except argparse.ArgumentTypeError as error:
                parser.error(str(error))
        return run(args)
    with open(args.file) as f:
        print("\n".join(summarize(f, first=args.first)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
