#!/usr/bin/env python3
"""Validates `ferry simulate` against `ferry run` on this host, measured side by side in one run.

Owns the measured-run half of the simulator's calibration (docs/simulator.md, "Calibration"):
  1. measures this host's links with the transport microbenchmark (`ferry bench transports`,
     two ranks: stream bandwidth and per-message cost of tcp and of direct reads), and the
     executor's CPU time a posted op (a one-rank refit of many tiny tensors, every op a local
     Copy or Unpack of a few hundred bytes: best refit time / ops), never with the refits it
     predicts;
  2. writes two cluster files from those numbers: this-host.yaml (messages between ranks as
     direct reads, ferry run's default) and this-host-tcp.yaml (every message through TCP
     loopback, ferry run's "transport only" variant and its gather-broadcast);
  3. runs `ferry run` of each case (both strategies) and `ferry simulate` of the same case and
     options with the matching cluster file, and prints case | measured | predicted | ratio.

Usage: tools/sim/calibrate_host.py --ferry bazel-bin/tools/cli/ferry --out /tmp/calibrate
       [--clusters-only]  (steps 1 and 2)
"""
import re
import argparse
import csv
import os
import statistics
import subprocess
import sys

# (case name, model, scale, trainer spec, engine spec): 8 local processes each, one "node".
CASES = [
    ("qwen3-30b-a3b@1/8 tp2,ep2 -> tp2,dp2", "qwen3-30b-a3b", "1/8",
     "megatron:tp=2,ep=2", "vllm:tp=2,dp=2"),
    ("llama-3.1-8b@1/4 tp4 -> tp1,dp4", "llama-3.1-8b", "1/4", "megatron:tp=4", "vllm:tp=1,dp=4"),
    ("llama-3.1-8b@1/4 tp2,pp2 -> tp4", "llama-3.1-8b", "1/4", "megatron:tp=2,pp=2", "vllm:tp=4"),
]
# Buckets a 1 GiB staging budget (executor.staging_budget's default) holds at this scale.
SETTINGS = ["planner.bucket_bytes=256MiB"]
# The posting-cost refit: one rank, source and destination colocated, tensors of a few hundred
# bytes, gather-and-broadcast with a bucket a tensor, so that every tensor takes two local ops (a
# Copy into its bucket, an Unpack out of it) and the bytes (9.4 MiB twice) a few percent of the time.
POST_CASE = ("qwen3-30b-a3b", "1/256", "megatron:tp=1", "vllm:tp=1")
POST_SETTINGS = ["--colocated", "--strategy", "gather-broadcast", "--set", "planner.bucket_bytes=1"]
# The measured variant each cluster file models, and whether its same-node messages go as direct
# reads (`ferry run --strategy both` runs the transport-only reshard and the baseline without).
CLUSTER_OF_VARIANT = {
    "reshard": ("this-host.yaml", True),
    "reshard (transport only)": ("this-host-tcp.yaml", False),
    "gather-broadcast": ("this-host-tcp.yaml", False),
}


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done.stdout


def measure_links(ferry, out):
    """Per transport: (stream bytes/s over messages >= 1 MiB, seconds of CPU per message)."""
    folder = os.path.join(out, "bench")
    run([ferry, "bench", "transports", "--out", folder, "--only", "tcp", "--skip-plan",
         "--min-size", "4KiB", "--max-size", "64MiB", "--repetitions", "3"])
    rows = {}
    with open(os.path.join(folder, "sweep.csv")) as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["transport"], []).append(row)
    links = {}
    for transport, points in rows.items():
        large = [float(p["stream_GBps"]) * 1e9 for p in points if int(p["size_bytes"]) >= 1 << 20]
        rate = statistics.median(large)
        small = min(points, key=lambda p: int(p["size_bytes"]))
        per_message = float(small["stream_seconds"]) / int(small["messages"])
        links[transport] = (rate, max(per_message - int(small["size_bytes"]) / rate, 0.0))
    return links


def measure_post_overhead(ferry, out):
    """Seconds of the executor's thread a posted op: POST_CASE's best refit / its ops."""
    model, scale, src, dst = POST_CASE
    results = os.path.join(out, "post.csv")
    if os.path.exists(results):
        os.remove(results)
    printed = run([ferry, "run", "--model", model, "--scale", scale, "--src", src, "--dst", dst,
                   *POST_SETTINGS, "--iterations", "5", "--warmup", "1", "--timeout", "300",
                   "--results", results])
    planned = re.search(r"planned gather-broadcast\s+(\d+) ops, (\d+) messages", printed)
    if planned is None or int(planned.group(2)) != 0:
        sys.exit(f"the posting-cost refit did not plan local ops only:\n{printed}")
    with open(results) as f:
        best = float(next(csv.reader(f))[5])
    return best / int(planned.group(1)), int(planned.group(1)), best


def write_clusters(links, post, out):
    cores = os.cpu_count() or 1
    direct_rate, direct_cost = links["direct read"]
    tcp_rate, tcp_cost = links["tcp"]
    common = [
        "gpus_per_node: 8", "num_nodes: 1", "nics_per_node: 1", "host_memory_ranks: true",
        f"host_copy_bandwidth: {direct_rate:.4g}",
        f"host_memory_bandwidth: {direct_rate * cores:.4g}",
        # Read by the lower bound and the summary line only (host-memory ranks use the above).
        f"copy_bandwidth: {direct_rate:.4g}", f"pack_bandwidth: {direct_rate:.4g}",
        "nvlink_latency: 0us", "kernel_overhead: 2us",
        f"op_post_overhead: {post[0] * 1e6:.3g}us",
        # ferry run's gather-broadcast unpacks in place: no vLLM weight loading here.
        "tensor_load_overhead: 0us",
    ]
    files = {
        "this-host.yaml": common + ["name: this-host", f"nvlink_message_overhead: {direct_cost:.4g}",
                                    f"nvlink_bandwidth: {direct_rate:.4g}", f"nic_bandwidth: {direct_rate:.4g}"],
        "this-host-tcp.yaml": common + ["name: this-host-tcp", f"nvlink_message_overhead: {tcp_cost:.4g}",
                                        f"host_message_bandwidth: {tcp_rate:.4g}",
                                        f"nvlink_bandwidth: {tcp_rate:.4g}", f"nic_bandwidth: {tcp_rate:.4g}"],
    }
    header = (f"# Written by tools/sim/calibrate_host.py from `ferry bench transports` on a host of "
              f"{cores} cores:\n# direct read {direct_rate / 1e9:.2f} GB/s + {direct_cost * 1e6:.1f} us a "
              f"message, tcp {tcp_rate / 1e9:.2f} GB/s + {tcp_cost * 1e6:.1f} us a message;\n"
              f"# executor {post[0] * 1e6:.1f} us a posted op ({post[1]} local ops of "
              f"{' '.join(POST_CASE + tuple(POST_SETTINGS))}, best refit {post[2] * 1e3:.2f} ms).\n")
    for name, lines in files.items():
        with open(os.path.join(out, name), "w") as f:
            f.write(header + "\n".join(lines) + "\n")


def measure_case(ferry, out, case):
    name, model, scale, src, dst = case
    results = os.path.join(out, "runs.csv")
    if os.path.exists(results):
        os.remove(results)
    cmd = [ferry, "run", "--model", model, "--scale", scale, "--src", src, "--dst", dst,
           "--strategy", "both", "--iterations", "3", "--warmup", "1", "--timeout", "300",
           "--results", results]
    for s in SETTINGS:
        cmd += ["--set", s]
    run(cmd)
    with open(results) as f:
        return {row[1]: float(row[4]) for row in csv.reader(f)}  # variant -> mean seconds


def seconds(text):
    value, unit = text.split()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def predict_case(ferry, out, case, cluster, direct_reads):
    _, model, scale, src, dst = case
    cmd = [ferry, "simulate", "--model", model, "--scale", scale, "--src", src, "--dst", dst,
           "--cluster", os.path.join(out, cluster),
           "--set", f"executor.direct_intra_node={'true' if direct_reads else 'false'}"]
    for s in SETTINGS:
        cmd += ["--set", s]
    for line in run(cmd).splitlines():
        if line.startswith("predicted time"):
            words = line.split()
            return {"reshard": seconds(" ".join(words[2:4])),
                    "gather-broadcast": seconds(" ".join(words[4:6]))}
    sys.exit("ferry simulate printed no 'predicted time' row")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ferry", required=True, help="the ferry binary (bazel-bin/tools/cli/ferry)")
    parser.add_argument("--out", required=True, help="folder for the cluster files and CSVs")
    parser.add_argument("--clusters-only", action="store_true",
                        help="measure and write the cluster files, run no case")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    links = measure_links(args.ferry, args.out)
    post = measure_post_overhead(args.ferry, args.out)
    write_clusters(links, post, args.out)
    if args.clusters_only:
        return
    print("| case | variant | measured | predicted | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for case in CASES:
        measured = measure_case(args.ferry, args.out, case)
        for variant, (cluster, direct_reads) in CLUSTER_OF_VARIANT.items():
            predicted = predict_case(args.ferry, args.out, case, cluster, direct_reads)
            strategy = "gather-broadcast" if variant == "gather-broadcast" else "reshard"
            p, m = predicted[strategy], measured[variant]
            print(f"| {case[0]} | {variant} | {m:.3f} s | {p:.3f} s | {p / m:.2f} |", flush=True)


if __name__ == "__main__":
    main()
