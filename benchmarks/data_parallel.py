"""Data-parallel training steps: notebook 04's loop (independent answers, the GRPO update) on the embedded model with
1 process and with 2 (torchrun's process group through torch.multiprocessing, gloo on CPU, nccl on GPUs), at the
same global batch, on the same machine: answers trained per second, the speed-up, and the share of each step
spent in communication (the gather of the step's answers and the gradient all-reduce, azlib.parallel; a rank
waits there for the slowest, so the share includes the ranks' imbalance).

Both runs use every core: one process gets all of them as torch threads, two get half each. The first step
is a warm-up and not counted. Not part of the tests; the same script is what a GPU box runs (one GPU per rank).

    .venv/bin/python benchmarks/data_parallel.py [--steps 4] [--problems 8] [--group 4] [--tokens 48]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from azlib import grpo, parallel, training
from azlib.data import arithmetic_problems
from azlib.grpo import GRPOSettings
from azlib.models import DEFAULT_MODEL
from azlib.models.student import LoraSettings, Student
from azlib.settings import TrainerSettings, TrainSettings
from azlib.training import Trainer


def timed(function, clock: dict):
    """`function`, its seconds added to clock["seconds"]."""
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            clock["seconds"] += time.perf_counter() - start
    return wrapper


def run(rank: int, world: int, port: int, args, out: str) -> None:
    threads = max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
        torch.distributed.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world)
    device = parallel.local_device(device)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    clock = {"seconds": 0.0}
    training.gather = timed(parallel.gather, clock)  # the names the loop and the update call
    grpo.sum_gradients = timed(parallel.sum_gradients, clock)
    grpo.sum_over_ranks = timed(parallel.sum_over_ranks, clock)
    torch.manual_seed(0)
    student = Student(DEFAULT_MODEL, lora=LoraSettings(r=16, dropout=0.0), device=device)
    rows = arithmetic_problems(args.problems * (args.steps + 1), seed=0, steps=(1, 2))
    config = TrainerSettings(train=TrainSettings(signal="independent", update="grpo", steps=args.steps + 1,
                                                problems_per_step=args.problems, group_size=args.group,
                                                max_new_tokens=args.tokens),
                            grpo=GRPOSettings(micro_batch_size=8))
    trainer = Trainer(student, rows, tempfile.mkdtemp(prefix=f"azlib-dp-{world}-"), config)
    steps = []
    for _ in range(args.steps + 1):
        clock["seconds"] = 0.0
        start = time.perf_counter()
        record = trainer.train_step()
        steps.append({"seconds": time.perf_counter() - start, "communication": clock["seconds"],
                      "completions": record["completions"], "tokens": record["tokens"]})
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps({"threads": threads, "steps": steps[1:]}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps (after one warm-up step)")
    parser.add_argument("--problems", type=int, default=8, help="problems per step (the global batch)")
    parser.add_argument("--group", type=int, default=4, help="answers per problem")
    parser.add_argument("--tokens", type=int, default=48, help="answer length cap")
    args = parser.parse_args()
    results = {}
    for world in (1, 2):
        out = tempfile.mktemp(suffix=".json")
        mp.spawn(run, args=(world, free_port(), args, out), nprocs=world, join=True)
        results[world] = json.loads(Path(out).read_text())
    print(f"{args.problems} problems x {args.group} answers per step (<= {args.tokens} tokens), GRPO update, "
          f"{args.steps} timed steps, {os.cpu_count()} cores, {'CUDA' if torch.cuda.is_available() else 'CPU'}")
    rate = {}
    for world, r in results.items():
        seconds = sum(s["seconds"] for s in r["steps"])
        rate[world] = sum(s["completions"] for s in r["steps"]) / seconds
        share = sum(s["communication"] for s in r["steps"]) / seconds
        print(f"  {world} process(es) x {r['threads']} thread(s): {rate[world]:.2f} answers/s, "
              f"{seconds / len(r['steps']):.1f} s per step, communication {share:.1%} of each step "
              f"(generated {sum(s['tokens'] for s in r['steps']) / len(r['steps']):.0f} tokens per step)")
    print(f"speed-up of 2 processes over 1: {rate[2] / rate[1]:.2f}x")


if __name__ == "__main__":
    main()
