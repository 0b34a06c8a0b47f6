"""Tests of tools/bench/planner_rounds.py against fake benchmark binaries (real processes)."""

import io
import json
import os
import stat
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

from tools.bench import planner_rounds

# A stand-in for planner_bench: writes Google Benchmark's JSON for the filtered row, with a wall
# time of MS (its environment) plus the round number it is told through a counter file, so that
# rounds differ; EXIT makes it fail.
FAKE = """#!{python}
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
if os.environ.get("EXIT_{name}"):
    print("fake failure"); sys.exit(3)
count_file = os.path.join(os.path.dirname(sys.argv[0]), "calls_{name}")
calls = int(open(count_file).read()) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(calls))
with open(os.path.join(os.path.dirname(sys.argv[0]), "order"), "a") as order:
    order.write("{name}\\n")
row = args["benchmark_filter"].strip("^$").split("/", 1)[1]
bench = {{"name": "BM_Refit/" + row, "run_type": "iteration", "time_unit": "ms",
          "real_time": {ms} + calls, "emit_ms": {ms} / 2, "user_ms": {ms}}}
json.dump({{"benchmarks": [bench]}}, open(args["benchmark_out"], "w"))
"""


class PlannerRoundsTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def fake(self, name, ms):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(FAKE.format(python=sys.executable, name=name, ms=ms))
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        return path

    def test_rotation_shifts_each_round(self):
        self.assertEqual(planner_rounds.rotation(3, 1), [1, 2, 0])
        self.assertEqual(planner_rounds.rotation(3, 2), [2, 0, 1])
        self.assertEqual(planner_rounds.rotation(3, 3), [0, 1, 2])

    def test_entry_needs_binary_and_row(self):
        self.assertEqual(planner_rounds.parse_entry("/a:b/pb:ds_v3"), ("/a:b/pb", "ds_v3"))
        for bad in ["nocolon", ":row", "bin:"]:
            with self.assertRaises(Exception):
                planner_rounds.parse_entry(bad)

    def test_runs_rotate_and_pair_round_by_round(self):
        fast, slow = self.fake("fast", 10), self.fake("slow", 20)
        out = os.path.join(self.dir, "runs.jsonl")
        with redirect_stderr(io.StringIO()) as progress:
            rc = planner_rounds.main(["run", "--rounds", "3", "--out", out,
                                      fast + ":row_a", slow + ":row_a"])
        self.assertEqual(rc, 0)
        self.assertIn("round 3/3 done", progress.getvalue())
        # Rotating order: round 1 starts with the second entry, round 2 with the first, ...
        with open(os.path.join(self.dir, "order")) as f:
            self.assertEqual(f.read().split(), ["slow", "fast", "fast", "slow", "slow", "fast"])
        with open(out) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual(len(records), 6)
        first_fast = [r for r in records if r["entry"] == fast + ":row_a"][0]
        self.assertEqual(first_fast["round"], 1)
        self.assertEqual(first_fast["real_ms"], 11.0)  # 10 ms + its first call
        self.assertEqual(first_fast["counters"], {"emit_ms": 5.0, "user_ms": 10})
        with open(out) as f:
            summary = planner_rounds.summarize(f)
        self.assertEqual(summary[0], "row_a:")
        self.assertIn("fast", summary[1])
        self.assertIn("n=3 median 12.0 ms (11.0-13.0)", summary[1])
        self.assertNotIn("paired", summary[1])  # the first entry is the baseline
        # slow takes 21, 22, 23 ms against 11, 12, 13: ratios 1.909, 1.833, 1.769.
        self.assertIn("median 22.0 ms (21.0-23.0) paired ratio 1.833, faster in 0 of 3",
                      summary[2])
        self.assertIn("emit_ms=10.0", summary[2])

    def test_first_compares_first_plans(self):
        # A new binary reports its first plan as first_ms; an old one's wall time was its first.
        records = [
            {"round": 1, "entry": "old:row", "index": 0, "real_ms": 60.0, "counters": {}},
            {"round": 1, "entry": "new:row", "index": 1, "real_ms": 45.0,
             "counters": {"first_ms": 57.0}},
            {"round": 2, "entry": "old:row", "index": 0, "real_ms": 62.0, "counters": {}},
            {"round": 2, "entry": "new:row", "index": 1, "real_ms": 46.0,
             "counters": {"first_ms": 65.1}},
        ]
        lines = [json.dumps(r) for r in records]
        later = planner_rounds.summarize(lines)
        self.assertIn("median 45.5 ms (45.0-46.0) paired ratio 0.746, faster in 2 of 2", later[2])
        first = planner_rounds.summarize(lines, first=True)
        # 57 / 60 = 0.95 and 65.1 / 62 = 1.05: median 1.000.
        self.assertIn("median 61.0 ms (57.0-65.1) paired ratio 1.000, faster in 1 of 2", first[2])
        self.assertIn("first_ms=61.0", first[2])
        out = os.path.join(self.dir, "runs.jsonl")
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
        with redirect_stdout(io.StringIO()) as printed:
            self.assertEqual(planner_rounds.main(["summary", "--first", out]), 0)
        self.assertIn("paired ratio 1.000", printed.getvalue())

    def test_a_failing_run_stops_with_earlier_lines_kept(self):
        fast, broken = self.fake("fast", 10), self.fake("broken", 10)
        os.environ["EXIT_broken"] = "1"
        try:
            out = os.path.join(self.dir, "runs.jsonl")
            with redirect_stderr(io.StringIO()) as err:
                rc = planner_rounds.main(["run", "--rounds", "2", "--out", out,
                                          broken + ":row", fast + ":row"])
        finally:
            del os.environ["EXIT_broken"]
        self.assertEqual(rc, 1)
        self.assertIn(broken + ":row gave no result (exit 3)", err.getvalue())
        self.assertIn("fake failure", err.getvalue())
        with open(out) as f:
            kept = [json.loads(line)["entry"] for line in f]
        self.assertEqual(kept, [fast + ":row"])  # round 1 ran fast first, then broken failed

    def test_a_missing_binary_is_named(self):
        missing = os.path.join(self.dir, "no_such_bench")
        with redirect_stderr(io.StringIO()) as err:
            rc = planner_rounds.main(["run", "--rounds", "1", missing + ":row"])
        self.assertEqual(rc, 1)
        self.assertIn(missing + ":row could not start", err.getvalue())

    def test_bad_arguments_are_refused(self):
        with redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                planner_rounds.main(["run", "--rounds", "0", "x:y"])
            with self.assertRaises(SystemExit):
                planner_rounds.main(["run", "nocolon"])


if __name__ == "__main__":
    unittest.main()
