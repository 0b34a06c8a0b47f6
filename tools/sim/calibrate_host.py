#!/usr/bin/env python3
"""Validates `ferry simulate` against `ferry run` on this host, measured side by side in one run.

Owns the measured-run half of the simulator's calibration (docs/simulator.md, "Calibration"):
  1. measures this host's links the way the refits use them, with the transport microbenchmark
     (`ferry bench transports --pairs`) of tcp and of direct reads: PAIRS sender -> receiver
     pairs at once (2 x PAIRS processes, as many as each case runs) streaming STREAM_BYTES a
     pair (about what a receiver of the cases gets), for the node's aggregate rate and its cost a
     message; one pair alone, for the rate of one stream; and the executor's CPU time a posted op
     (a one-rank refit of many tiny tensors, every op a local Copy or Unpack of a few hundred
     bytes: best refit time / ops), never with the refits it predicts;
     and the executor's copy rate by row length and pitch, its conversion rate by pair of dtypes
     and its quantizer's rate (`executor_benchmark --benchmark_filter=QUANTIZE_AND_COPY_RATES`,
     one copy thread pinned to one core, in one run), whose ratios give this-host.yaml's
     host_copy_row_rates, host_convert_rates and host_quantize_rate, and its host_cores (the
     cores the ranks' Quantize ops share, os.cpu_count());
  2. writes two cluster files from those numbers: this-host.yaml (messages between ranks as
     direct reads, ferry run's default) and this-host-tcp.yaml (every message through TCP
     loopback, ferry run's "transport only" variant and its gather-broadcast). Every rank is a
     process in host memory: its copies and messages share the node's one host_mem link (the
     aggregate direct-read rate of the PAIRS pairs), each stream capped at one pair's rate, and
     tcp messages also share the node's loopback (the aggregate tcp rate) and each rank's
     transport thread (one tcp pair's rate, for all the messages the rank sends and receives);
  3. runs `ferry run` of each case (both strategies; a case into another dtype, the reshard with
     direct reads alone, as the baseline does not convert) and `ferry simulate` of the same case
     and options with the matching cluster file, and prints case | measured (mean and best of 3
     refits, and how far apart the ranks started them, which the refit time includes and the
     simulator, starting every rank at 0, does not) | predicted | ratios (the links' rates are the
     best of 3 streams each).

Usage: tools/sim/calibrate_host.py --ferry bazel-bin/tools/cli/ferry
           --bench bazel-bin/tests/core/runtime/executor_benchmark --out /tmp/calibrate
       [--clusters-only]  (steps 1 and 2)
"""
import re
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys

# (case name, model, scale, trainer spec, engine spec, more `ferry run`/`simulate` arguments): 8
# local processes each, one "node". A case that converts (--dst-dtype, or a quantized engine spec)
# runs the reshard with direct reads alone: the baseline does not convert.
CASES = [
    ("qwen3-30b-a3b@1/8 tp2,ep2 -> tp2,dp2", "qwen3-30b-a3b", "1/8",
     "megatron:tp=2,ep=2", "vllm:tp=2,dp=2"),
    ("llama-3.1-8b@1/4 tp4 -> tp1,dp4", "llama-3.1-8b", "1/4", "megatron:tp=4", "vllm:tp=1,dp=4"),
    ("llama-3.1-8b@1/4 tp2,pp2 -> tp4", "llama-3.1-8b", "1/4", "megatron:tp=2,pp=2", "vllm:tp=4"),
    ("llama-3.1-8b@1/4 tp2,pp2 -> tp4 into fp8 e4m3", "llama-3.1-8b", "1/4", "megatron:tp=2,pp=2",
     "vllm:tp=4", "--dst-dtype", "fp8_e4m3"),
    ("llama-3.1-8b@1/2 tp2 -> tp2 into block-scaled fp8", "llama-3.1-8b", "1/2", "megatron:tp=2",
     "vllm:tp=2,quant=fp8_block"),
]
# The executor benchmark's runs the copy-loop tables come from: rows, conversions, and the
# quantizer with one thread and float32 scales (vLLM's block-scaled checkpoints' format).
QUANTIZE_AND_COPY_RATES = "CopyRows|Convert|Quantize/threads:1/ue8m0:0"
# Bytes an element of the dtypes BM_ExecutorConvert converts between.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8_e4m3": 1, "fp8_e5m2": 1}
# Buckets a 1 GiB staging budget (executor.staging_budget's default) holds at this scale.
SETTINGS = ["planner.bucket_bytes=256MiB"]
# The link benchmark: as many processes as each case runs (4 senders, 4 receivers), each pair
# streaming about the bytes a receiver of the cases gets (~960 MiB delivered to 4 receivers).
PAIRS = 4
STREAM_BYTES = "256MiB"
# Per-message costs come from a sweep of small messages (a shorter stream: 4 KiB messages).
COST_STREAM_BYTES = "16MiB"
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


def sweep(ferry, folder, pairs, stream_bytes, min_size, max_size):
    """`ferry bench transports` of tcp and direct reads: {transport: [sweep.csv rows]}."""
    run([ferry, "bench", "transports", "--out", folder, "--only", "tcp", "--skip-plan",
         "--pairs", str(pairs), "--stream-bytes", stream_bytes, "--min-size", min_size,
         "--max-size", max_size, "--repetitions", "3"])
    rows = {}
    with open(os.path.join(folder, "sweep.csv")) as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["transport"], []).append(row)
    return rows


def stream_rate(points):
    """Bytes/s of all pairs together: the median over messages of 1 MiB and more."""
    return statistics.median(float(p["stream_GBps"]) * 1e9 for p in points)


def measure_links(ferry, out):
    """Per transport: (aggregate bytes/s of PAIRS pairs, bytes/s of one pair alone, seconds a
    message of the PAIRS pairs' stream of 4 KiB messages beyond its bytes: the node's cost a
    message when every pair streams)."""
    together = sweep(ferry, os.path.join(out, "bench-pairs"), PAIRS, STREAM_BYTES, "1MiB", "64MiB")
    alone = sweep(ferry, os.path.join(out, "bench-one"), 1, STREAM_BYTES, "1MiB", "64MiB")
    small = sweep(ferry, os.path.join(out, "bench-small"), PAIRS, COST_STREAM_BYTES, "4KiB", "4KiB")
    links = {}
    for transport in ("direct read", "tcp"):
        rate = stream_rate(together[transport])
        point = small[transport][0]
        per_message = float(point["stream_seconds"]) / int(point["messages"])
        cost = max(per_message - int(point["size_bytes"]) / rate, 0.0)
        links[transport] = (rate, stream_rate(alone[transport]), cost)
    return links


def measure_copy_rates(bench):
    """The executor's copy loop, one copy thread on core 0, medians of 3, in one run: by row
    (BM_ExecutorCopyRows), [(row bytes, pitch bytes, bytes/s)] ordered by row and then pitch; by
    conversion (BM_ExecutorConvert), [(from, to, source bytes/s)]; and the quantizer's bytes of
    values a second (BM_ExecutorQuantize, one thread, float32 scales)."""
    printed = run(["taskset", "-c", "0", bench, f"--benchmark_filter={QUANTIZE_AND_COPY_RATES}",
                   "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
                   "--benchmark_format=json"])
    rows, conversions, quantize = [], [], 0.0
    for b in json.loads(printed)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        found = re.search(r"row_bytes:(\d+)/stride:(\d+)", b["name"])
        if found:
            rows.append((int(found.group(1)), int(found.group(2)), float(b["bytes_per_second"])))
        pair = re.fullmatch(r"(\w+) -> (\w+)", b.get("label", ""))
        if "Convert" in b["name"] and pair:
            src, dst = pair.group(1), pair.group(2)
            # bytes_per_second counts the elements read and written; the table wants those read.
            share = DTYPE_BYTES[src] / (DTYPE_BYTES[src] + DTYPE_BYTES[dst])
            conversions.append((src, dst, float(b["bytes_per_second"]) * share))
        if "Quantize/threads:1/ue8m0:0" in b["name"]:
            quantize = float(b["bytes_per_second"])  # the bf16 values read
    if not rows or not conversions or not quantize:
        sys.exit(f"{bench} printed no CopyRows, Convert or Quantize medians")
    return sorted(rows), conversions, quantize


def copy_rate_lines(rates):
    """host_copy_row_rates, host_convert_rates and host_quantize_rate as cluster-file lines."""
    rows, conversions, quantize = rates
    return (["host_copy_row_rates:"] +
            [f"  - [{row}B, {pitch}B, {rate / 1e9:.3g}GB/s]" for row, pitch, rate in rows] +
            ["host_convert_rates:"] +
            [f"  - [{src}, {dst}, {rate / 1e9:.3g}GB/s]" for src, dst, rate in conversions] +
            [f"host_quantize_rate: {quantize / 1e9:.3g}GB/s"])


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


def charged_overhead(node_cost, node_rate, alone_rate):
    """The per-message overhead to write: the simulator charges it as overhead x (the flow's rate
    alone) bytes of service on links of node_rate shared by every message of the node, so each
    message then holds the node for overhead x alone_rate / node_rate: the measured node_cost."""
    return node_cost * node_rate / alone_rate


# Per cluster file: what it models (the first comment lines) and its description.
INTROS = {
    "this-host.yaml": ("# The 2-core development host, ranks as local processes in host memory on one \"node\", every\n"
                       "# message between them a direct read (ferry run's default: the receiver copies from the sender).\n",
                       "2-core development host, ranks in host memory, direct reads"),
    "this-host-tcp.yaml": ("# The 2-core development host with every message through TCP loopback (ferry run with\n"
                           "# executor.direct_intra_node=false, and its gather-broadcast): the loopback's throughput is\n"
                           "# shared by all streams of the node (host_message_bandwidth), and each rank's messages,\n"
                           "# sent and received, by its transport's one thread, as fast as one stream alone\n"
                           "# (host_message_stream_bandwidth).\n",
                           "2-core development host, ranks in host memory, TCP loopback"),
}


def header(links, post):
    """The comment lines every cluster file starts with: what was measured, how, and the values."""
    direct_rate, direct_alone, direct_cost = links["direct read"]
    tcp_rate, tcp_alone, tcp_cost = links["tcp"]
    return (f"# Written by tools/sim/calibrate_host.py on a host of {os.cpu_count()} cores ({load()}) from\n"
            f"# `ferry bench transports --pairs {PAIRS} --stream-bytes {STREAM_BYTES}`: {2 * PAIRS} processes, "
            f"{PAIRS} sender -> receiver\n# pairs streaming at once (rates: median over 1-64 MiB messages), "
            f"and the same with one pair alone:\n"
            f"# direct read {direct_rate / 1e9:.2f} GB/s together, {direct_alone / 1e9:.2f} GB/s one pair alone, "
            f"{direct_cost * 1e6:.1f} us of the node a message;\n"
            f"# tcp {tcp_rate / 1e9:.2f} GB/s together, {tcp_alone / 1e9:.2f} GB/s one pair alone, "
            f"{tcp_cost * 1e6:.1f} us of the node a message\n"
            f"# (costs: {PAIRS} pairs streaming 4 KiB messages, seconds / messages - bytes / rate);\n"
            f"# executor {post[0] * 1e6:.1f} us a posted op ({post[1]} local ops of "
            f"{' '.join(POST_CASE + tuple(POST_SETTINGS))}, best refit {post[2] * 1e3:.2f} ms).\n"
            f"# Re-measure: tools/sim/calibrate_host.py --ferry bazel-bin/tools/cli/ferry\n"
            f"#   --bench bazel-bin/tests/core/runtime/executor_benchmark --out DIR\n")


def copy_rates_header(rates, measured_at):
    """this-host.yaml's comment on its host_copy_row_rates, host_convert_rates and
    host_quantize_rate."""
    return ("# host_copy_row_rates, host_convert_rates, host_quantize_rate: `taskset -c 0 "
            f"executor_benchmark --benchmark_filter='{QUANTIZE_AND_COPY_RATES}' "
            "--benchmark_repetitions=3`\n"
            f"# (one copy thread, medians; {measured_at}): rows of R bytes every S bytes of the\n"
            "# source; conversions and the quantizer in bytes read a second; only their ratios to the "
            f"contiguous rate ({rates[0][-1][0]} B back to back) are used.\n")


def write_clusters(links, post, copy_rates, out):
    direct_rate, direct_alone, direct_cost = links["direct read"]
    tcp_rate, tcp_alone, tcp_cost = links["tcp"]
    stream_cap = min(direct_alone, direct_rate)
    common = [
        # The 8 "GPUs" are the 8 rank processes: host_memory_ranks puts the copies and messages of
        # all of them on the node's one host_mem link, the rate of PAIRS pairs together.
        "gpus_per_node: 8", "num_nodes: 1", "nics_per_node: 1", "host_memory_ranks: true",
        f"host_copy_bandwidth: {stream_cap:.4g}",
        f"host_memory_bandwidth: {direct_rate:.4g}",
        # Read by the lower bound and the summary line only (host-memory ranks use the above).
        f"copy_bandwidth: {direct_rate:.4g}", f"pack_bandwidth: {direct_rate:.4g}",
        "nvlink_latency: 0us", "kernel_overhead: 2us",
        f"op_post_overhead: {post[0] * 1e6:.3g}us",
        # ferry run's gather-broadcast unpacks in place: no vLLM weight loading here.
        "tensor_load_overhead: 0us",
    ]
    direct_overhead = charged_overhead(direct_cost, direct_rate, stream_cap)
    tcp_stream_cap = min(tcp_alone, stream_cap)
    tcp_overhead = charged_overhead(tcp_cost, tcp_rate, min(tcp_stream_cap, tcp_rate))
    files = {
        "this-host.yaml": ["name: this-host", f"nvlink_message_overhead: {direct_overhead:.4g}",
                           f"nvlink_bandwidth: {direct_rate:.4g}", f"nic_bandwidth: {direct_rate:.4g}",
                           *copy_rate_lines(copy_rates[0]),
                           # The ranks' Quantize ops share this host's cores (ClusterSpec::host_cores).
                           f"host_cores: {os.cpu_count()}"],
        "this-host-tcp.yaml": ["name: this-host-tcp", f"nvlink_message_overhead: {tcp_overhead:.4g}",
                               f"host_message_bandwidth: {tcp_rate:.4g}",
                               f"host_message_stream_bandwidth: {tcp_stream_cap:.4g}",
                               f"nvlink_bandwidth: {tcp_rate:.4g}", f"nic_bandwidth: {tcp_rate:.4g}"],
    }
    for name, lines in files.items():
        intro, description = INTROS[name]
        rows_note = copy_rates_header(*copy_rates) if name == "this-host.yaml" else ""
        with open(os.path.join(out, name), "w") as f:
            f.write(intro + header(links, post) + rows_note + f"description: {description}\n" +
                    "\n".join(common + lines) + "\n")


def load():
    """The machine's load averages, as `uptime` prints them."""
    return "load " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def converts(case):
    """Whether the case's destination holds another dtype than its source."""
    _, _, _, _, dst, *more = case
    return bool(more) or "quant=" in dst


def measure_case(ferry, out, case):
    _, model, scale, src, dst, *more = case
    results = os.path.join(out, "runs.csv")
    if os.path.exists(results):
        os.remove(results)
    cmd = [ferry, "run", "--model", model, "--scale", scale, "--src", src, "--dst", dst, *more,
           "--strategy", "reshard" if converts(case) else "both", "--iterations", "3", "--warmup", "1",
           "--timeout", "300", "--results", results]
    for s in SETTINGS:
        cmd += ["--set", s]
    run(cmd)
    with open(results) as f:
        # variant -> (mean, best, mean start spread) seconds
        return {row[1]: (float(row[4]), float(row[5]), float(row[10])) for row in csv.reader(f)}


def seconds(text):
    value, unit = text.split()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def predict_case(ferry, out, case, cluster, direct_reads):
    _, model, scale, src, dst, *more = case
    cmd = [ferry, "simulate", "--model", model, "--scale", scale, "--src", src, "--dst", dst, *more,
           "--cluster", os.path.join(out, cluster),
           "--set", f"executor.direct_intra_node={'true' if direct_reads else 'false'}"]
    if converts(case):
        cmd.append("--no-baseline")
    for s in SETTINGS:
        cmd += ["--set", s]
    for line in run(cmd).splitlines():
        if line.startswith("predicted time"):
            words = line.split()
            predicted = {"reshard": seconds(" ".join(words[2:4]))}
            if not converts(case):
                predicted["gather-broadcast"] = seconds(" ".join(words[4:6]))
            return predicted
    sys.exit("ferry simulate printed no 'predicted time' row")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ferry", required=True, help="the ferry binary (bazel-bin/tools/cli/ferry)")
    parser.add_argument("--bench", required=True,
                        help="the executor benchmark (bazel-bin/tests/core/runtime/executor_benchmark)")
    parser.add_argument("--out", required=True, help="folder for the cluster files and CSVs")
    parser.add_argument("--clusters-only", action="store_true",
                        help="measure and write the cluster files, run no case")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    links = measure_links(args.ferry, args.out)
    post = measure_post_overhead(args.ferry, args.out)
    copy_rates = (measure_copy_rates(args.bench), f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {load()}")
    write_clusters(links, post, copy_rates, args.out)
    if args.clusters_only:
        return
    print(f"links measured at {load()}")
    print("| case | variant | measured mean | best | start spread | predicted | ratio to mean | to best |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in CASES:
        measured = measure_case(args.ferry, args.out, case)
        for variant, (cluster, direct_reads) in CLUSTER_OF_VARIANT.items():
            if variant not in measured:
                continue
            predicted = predict_case(args.ferry, args.out, case, cluster, direct_reads)
            strategy = "gather-broadcast" if variant == "gather-broadcast" else "reshard"
            p, (mean, best, spread) = predicted[strategy], measured[variant]
            print(f"| {case[0]} | {variant} | {mean:.3f} s | {best:.3f} s | {spread * 1e3:.1f} ms "
                  f"| {p:.3f} s | {p / mean:.2f} | {p / best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
