"""Data-parallel training (azlib.parallel) on 2 CPU processes over gloo: the GRPO and imitation updates with the
step's work split over the ranks equal the one-process update on the same examples, and `azlib train` runs
under torchrun, each rank searching its share of every step's problems."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from azlib.lab import config
from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
from azlib.models.student import LoraSettings, Student
from conftest import tiny_grpo

pytestmark = pytest.mark.model  # every test loads a model

LORA = LoraSettings(r=4, dropout=0.0)  # no dropout: its masks depend on how sequences are batched


def examples(vocab: int) -> list[Rollout]:
    """Seven completions of uneven lengths in three groups: 7 does not split evenly over 2 ranks, and a group's
    members land on different ranks."""
    rng = random.Random(0)
    return [Rollout(None, [rng.randrange(vocab) for _ in range(rng.randint(3, 9))],
                    [rng.randrange(vocab) for _ in range(rng.randint(2, 12))], float(rng.random() < 0.5), i % 3)
            for i in range(7)]


def two_updates(model_dir: str, update: str) -> dict[str, torch.Tensor]:
    """Two optimiser steps of `update` from the same LoRA start; the trained parameters."""
    torch.manual_seed(0)  # the LoRA initialisation: equal on every rank
    student = Student(model_dir, lora=LORA)
    grpo = PolicyUpdate(student, GRPOSettings(learning_rate=1e-2, micro_batch_size=2, num_iterations=2, beta=0.04))
    batch = examples(len(student.tokenizer))
    for _ in range(2):
        grpo.sft_step(batch) if update == "sft" else grpo.step(batch)
    return {n: p.detach().clone() for n, p in student.model.named_parameters() if p.requires_grad}


def _rank(rank: int, port: int, model_dir: str, update: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        params = two_updates(model_dir, update)
        if rank == 0:
            torch.save(params, out)
    finally:
        torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("update", ["sft", "grpo"])
def test_two_processes_update_as_one_process_on_the_same_examples(tiny_model_dir, tmp_path, update):
    """Each rank trains on its share with the whole step's normalisers; the gradients summed over ranks are the
    one-process gradient, so after two steps each LoRA tensor differs from the one-process one by under 1e-3 of
    how far the update moved it. (Relative, not absolute: the sums run in another float32 order, and Adam divides
    by sqrt(v), so a component whose gradient is near zero can move by 1e-5 on rounding alone.
    Without the gradient sum the difference is about the size of the update itself.)"""
    torch.manual_seed(0)
    start = {n: p.detach().clone() for n, p in Student(tiny_model_dir, lora=LORA).model.named_parameters()
             if p.requires_grad}
    one = two_updates(tiny_model_dir, update)
    out = tmp_path / "two.pt"
    mp.spawn(_rank, args=(free_port(), tiny_model_dir, update, str(out)), nprocs=2, join=True)
    two = torch.load(out)
    assert set(one) == set(two) == set(start) and one
    moved = {n: (one[n] - start[n]).norm().item() for n in one}
    assert min(moved.values()) > 1e-3, "the updates moved every adapter tensor"
    worst = max((one[n] - two[n]).norm().item() / moved[n] for n in one)
    assert worst < 1e-3, worst


def torchrun_train(out, *extra):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(free_port()),
            "-m", "azlib", "train", "--profile", "smoke", "--out", str(out), *extra]


def read_log(out) -> list[dict]:
    lines = (out / "train-04" / "train_log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in ("seconds", "ram_peak_mb")} for x in lines]


def worker_pid(agent: int, rank: int) -> int | None:
    """The pid of torchrun's worker process of `rank` (a child of the agent with RANK=rank), once it runs."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"PPid:\t{agent}\n" in (proc / "status").read_text() \
                    and f"RANK={rank}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                return int(proc.name)
        except OSError:  # a process that ended while being read
            continue
    return None


def test_azlib_train_under_torchrun_splits_each_step_and_resumes_after_a_rank_is_killed(tmp_path, tiny_model_dir):
    """`torchrun --nproc_per_node=2 -m azlib train` (a tiny student, 20 GRPO steps that each change its weights):
    each rank searches one of a step's 2 problems, and the step's log (written by rank 0 alone) counts both
    searches' answers. Rank 1 killed (SIGKILL) mid-run, torchrun stops rank 0; a resume under torchrun ends with
    the uninterrupted run's log, metric for metric."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tiny = tiny_grpo(tiny_model_dir, steps=20)
    whole = tmp_path / "whole"
    proc = subprocess.run(torchrun_train(whole, *tiny), capture_output=True, text=True, cwd=config.REPO_ROOT,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("2 process(es)") == 1, "rank 0 alone reports"
    reference = read_log(whole)
    params, _ = config.resolve_library("04_gsm8k_run", "smoke", whole, tiny[1:])
    train = params.train
    assert [r["step"] for r in reference] == list(range(1, train.steps + 1)), "each step logged once"
    assert all(r["search/answers"] == train.problems_per_step for r in reference), "both ranks' searches reached the log"
    assert all(r["update/grad_norm"] > 0 for r in reference), "every step changes the weights"

    killed = tmp_path / "killed"
    agent = subprocess.Popen(torchrun_train(killed, *tiny), cwd=config.REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    first = killed / "train-04" / "checkpoints" / "step-000001"
    deadline = time.monotonic() + 600
    while not first.exists() and agent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    rank1 = worker_pid(agent.pid, 1)
    assert agent.poll() is None and rank1, "the run ended before a rank could be killed"
    time.sleep(random.Random(7).uniform(0.0, 1.0))  # seeded: somewhere in the next steps
    os.kill(rank1, signal.SIGKILL)
    assert agent.wait(timeout=300) != 0, "torchrun reports the lost rank"
    assert [r["step"] for r in read_log(killed)][-1] < train.steps, "killed before the end"

    proc = subprocess.run(torchrun_train(killed, *tiny, "--resume"), capture_output=True, text=True,
                          cwd=config.REPO_ROOT, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_log(killed) == reference, "every step once, each as in the uninterrupted run"


@pytest.mark.slow  # two torchrun processes training two smoke arms each, then one arm alone
def test_azlib_experiment_under_torchrun_shares_the_arms_and_seeds_and_changes_no_result(tmp_path, tiny_model_dir):
    """`torchrun --nproc_per_node=2 -m azlib experiment`: process 0 evaluates the base and trains jobs 0 and 2 of
    (arm, seed) in order, process 1 jobs 1 and 3; process 0 waits for the other's and reports them all. An arm
    trained by another process, after another arm, equals the same arm trained alone. The student is a tiny
    random model (--set model=...): what is shared out and compared does not depend on what it answers."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    experiment = ["-m", "azlib", "experiment", "--profile", "smoke", "--set", f"model={tiny_model_dir}"]
    shared = tmp_path / "shared"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
                           str(free_port()), *experiment, "--arms", "tree", "rft", "--seeds", "0", "1", "--out",
                           str(shared)], capture_output=True, text=True, cwd=config.REPO_ROOT, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "process 0 of 2 finished tree seed 0, tree seed 1" in proc.stdout
    assert "process 1 of 2 finished rft seed 0, rft seed 1" in proc.stdout
    summary = [line.split()[:2] for line in proc.stdout.splitlines() if line.startswith(("heldout ", "transfer "))]
    assert summary == [[name, model] for name in ("heldout", "transfer") for model in ("base", "tree", "rft")]

    alone = tmp_path / "alone"
    proc = subprocess.run([sys.executable, *experiment, "--arms", "rft", "--seeds", "1", "--out", str(alone)],
                          capture_output=True, text=True, cwd=config.REPO_ROOT, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "process 0 of 1 finished rft seed 1" in proc.stdout

    def result(folder):
        arm = folder / "05-experiment" / "seed-1" / "rft"
        saved = json.loads((arm / "result.json").read_text())
        log = [{k: v for k, v in r.items() if k not in ("seconds", "ram_peak_mb")} for r in saved["log"]]
        return saved["tokens"], log, [(arm / f"records-{name}.jsonl").read_text() for name in ("heldout", "transfer")]

    assert result(shared) == result(alone)


def test_a_process_given_a_share_of_the_jobs_joins_no_group_and_sees_only_its_gpu(monkeypatch):
    """independent_process() under torchrun's variables (process 1 of 2, LOCAL_RANK 1): the rank is read, then
    the launcher's variables go, so TRL's accelerate starts as one process instead of waiting for a group no other
    process joins, and CUDA_VISIBLE_DEVICES keeps the GPU of LOCAL_RANK among those listed."""
    launched = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port())}
    code = ("import os; from azlib.parallel import independent_process; rank, size = independent_process(); "
            "from accelerate import PartialState; state = PartialState(cpu=True); "
            "print(rank, size, state.num_processes, os.environ['CUDA_VISIBLE_DEVICES'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **launched, "CUDA_VISIBLE_DEVICES": "3,5"}, cwd=config.REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "2", "1", "5"]

    from azlib.parallel import independent_process

    for name, value in {**launched, "CUDA_VISIBLE_DEVICES": "3"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match="LOCAL_RANK 1, but CUDA_VISIBLE_DEVICES lists 1 GPUs"):
        independent_process()


def test_joining_the_group_on_cuda_makes_the_ranks_gpu_current_first(monkeypatch):
    """init_from_env() under torchrun on a CUDA machine (rank 1 of 2, LOCAL_RANK 1): the rank's GPU is made the
    current device before the nccl group starts, so the collectives and tensors made on "cuda" are on cuda:1,
    not every rank's cuda:0. The CUDA calls are recorded here (no GPU on this machine), their order checked."""
    import azlib.parallel as parallel

    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(parallel.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(parallel.torch.cuda, "set_device", lambda index: calls.append(("set_device", index)))
    monkeypatch.setattr(parallel.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(parallel.dist, "init_process_group", lambda backend: calls.append(("group", backend)))
    parallel.init_from_env()
    assert calls == [("set_device", 1), ("group", "nccl")]
