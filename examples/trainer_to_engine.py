"""A trainer -> inference engine refit with ferry's Python package, checked on the model's output.

Four processes on this machine: ranks 0-1 are the trainer, laid out as Megatron-LM TP2 (the
preset's megatron:tp=2 layout of Llama-3.1-8B at scale 1/64: QKV interleaved per query group and
[gate; up] per TP shard in linear_fc1, vocab-parallel embedding and output layer); ranks 2-3 are
the inference engine, vLLM TP1 x DP2 (two replicas with fused qkv_proj and gate_up_proj). Every
step the trainer takes an AdamW step, writes each rank's TP shard into its Megatron buffers, and
ferry refits the engine's vLLM buffers in place; each engine replica then runs the model on a
fixed batch straight from its fused buffers and compares its logits with the trainer's.

Each trainer rank computes the same full-model step (deterministic on CPU) and keeps only its
Megatron TP shard in the buffers ferry reads: the layouts and bytes moved are a TP2 trainer's,
the tensor-parallel compute is not modelled. Logits match bit for bit when the fused and separate
matmuls round alike; the check allows 1e-4 of the logits' largest magnitude otherwise.

With --device cuda every rank's buffers are CUDA tensors on device 0 (the refit moves device
memory: GPU direct reads between the ranks through CUDA IPC, or staged over tcp); the models
still compute on the CPU from copies of those buffers, so the logits compare as on the CPU.

    tools/ferry python examples/trainer_to_engine.py [--steps 3] [--device cuda]   # starts 4 ranks
    torchrun --nproc-per-node 4 examples/trainer_to_engine.py      # or one rank per process
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile

import torch

import ferry
from rank_processes import wait_all
import tiny_llama as model

TRAINER = "megatron:tp=2"
ENGINE = "vllm:tp=1,dp=2"
TRAINER_RANKS, WORLD = 2, 4
TOLERANCE = 1e-4  # of the largest |logit|, for matmuls that round differently


def layouts() -> tuple[ferry.Layout, ferry.Layout]:
    src = ferry.Layout.preset("llama-3.1-8b", TRAINER, scale="1/64")
    dst = ferry.Layout.preset("llama-3.1-8b", ENGINE, scale="1/64", first_rank=TRAINER_RANKS)
    return src, dst


def bf16_buffers(layout: ferry.Layout, rank: int, device: str) -> dict[str, torch.Tensor]:
    return {b.name: torch.zeros(b.bytes // 2, dtype=torch.bfloat16, device=device)
            for b in layout.buffers(rank)}


def box(f: ferry.FragmentInfo) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in zip(f.lo, f.hi))


def batches() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    train = torch.randint(0, model.VOCAB, (4, 17), generator=g)
    evaluate = torch.randint(0, model.VOCAB, (2, 12), generator=g)
    return train, evaluate


def trainer(session: ferry.Session, refit: ferry.Refit, steps: int, out_dir: str,
            device: str) -> None:
    src = refit.plan.source
    buffers = bf16_buffers(src, session.rank, device)
    for name, buffer in buffers.items():
        refit.register(name, buffer)
    masters = {n: torch.nn.Parameter(w) for n, w in model.init_weights(seed=0).items()}
    optimizer = torch.optim.AdamW(masters.values(), lr=1e-2)
    train, evaluate = batches()
    for step in range(steps):
        weights = {n: p.bfloat16().float() for n, p in masters.items()}
        logits = model.forward(weights, train[:, :-1], fused=False)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, model.VOCAB),
                                                 train[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for f in src.fragments(session.rank):
                view = ferry.fragment_view(buffers[f.buffer], f, "bf16")
                view.copy_(masters[f.tensor][box(f)].bfloat16())
            if session.rank == 0:
                full = {n: p.bfloat16().float() for n, p in masters.items()}
                path = os.path.join(out_dir, f"logits-{step}.pt")
                torch.save(model.forward(full, evaluate, fused=False), path + ".tmp")
                os.replace(path + ".tmp", path)  # written before the refit can deliver
        stats = refit.run()
        print(f"trainer rank {session.rank} step {step}: loss {loss.item():.4f}, sent "
              f"{stats.bytes_sent} B in {stats.seconds * 1e3:.1f} ms", flush=True)


def engine_weights(dst: ferry.Layout, rank: int, buffers: dict[str, torch.Tensor]):
    """fp32 CPU copies of the engine's weights as vLLM holds them: fused qkv_proj and
    gate_up_proj buffers whole, every other tensor through its fragment (one per tensor at TP1)."""
    weights = {}
    for f in dst.fragments(rank):
        if f.buffer.endswith(("qkv_proj.weight", "gate_up_proj.weight")):
            weights[f.buffer] = buffers[f.buffer].view(-1, model.HIDDEN).float().cpu()
        else:
            weights[f.tensor] = ferry.fragment_view(buffers[f.buffer], f, "bf16").float().cpu()
    return weights


def engine(session: ferry.Session, refit: ferry.Refit, steps: int, out_dir: str,
           device: str) -> None:
    dst = refit.plan.destination
    buffers = bf16_buffers(dst, session.rank, device)
    for name, buffer in buffers.items():
        refit.register(name, buffer)
    _, evaluate = batches()
    previous = None
    for step in range(steps):
        stats = refit.run()
        with torch.no_grad():
            logits = model.forward(engine_weights(dst, session.rank, buffers), evaluate,
                                   fused=True)
        expected = torch.load(os.path.join(out_dir, f"logits-{step}.pt"))
        diff = (logits - expected).abs().max().item()
        scale = expected.abs().max().item()
        exact = torch.equal(logits, expected)
        print(f"engine rank {session.rank} step {step}: received {stats.bytes_received} B in "
              f"{stats.seconds * 1e3:.1f} ms; logits {'bit-exact' if exact else 'max diff'}"
              f"{'' if exact else f' {diff:.3g} of {scale:.3g}'}", flush=True)
        if diff > TOLERANCE * scale:
            raise SystemExit(f"engine rank {session.rank} step {step}: logits differ by {diff}")
        if previous is not None and torch.equal(previous, logits):
            raise SystemExit(f"engine rank {session.rank} step {step}: the weights did not change")
        previous = logits


def run_rank(steps: int, out_dir: str, device: str) -> None:
    torch.set_num_threads(1)
    src, dst = layouts()
    with ferry.Session.from_env(config={"deadline.refit": "60s"}) as session:
        refit = session.refit(src, dst)
        role = trainer if session.rank < TRAINER_RANKS else engine
        role(session, refit, steps, out_dir, device)


def launch(steps: int, deadline_s: float, device: str) -> int:
    """Starts the four ranks as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR/PORT) and waits for
    them until `deadline_s`, killing every rank still running then."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        procs = []
        for rank in range(WORLD):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port), FERRY_TOKEN="trainer-to-engine",
                       FERRY_EXAMPLE_DIR=out_dir)
            procs.append(subprocess.Popen([sys.executable, __file__, "--steps", str(steps),
                                           "--device", device], env=env))
        return wait_all(procs, deadline_s, "trainer_to_engine")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds, for all ranks")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where every rank's buffers live (cuda: device 0)")
    args = parser.parse_args()
    device = "cuda:0" if args.device == "cuda" else "cpu"
    if "RANK" not in os.environ:
        return launch(args.steps, args.deadline, args.device)
    out_dir = os.environ.get("FERRY_EXAMPLE_DIR")
    if out_dir is None:  # under torchrun: rank 0's directory must be shared by every rank
        out_dir = os.path.join(tempfile.gettempdir(), "ferry-trainer-to-engine")
        os.makedirs(out_dir, exist_ok=True)
    run_rank(args.steps, out_dir, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
