"""Data parallelism on torchrun's process group (gloo on CPU, nccl on CUDA): rank, each rank's share, gathers, summed
gradients. Without torchrun there is one rank and each function is the one-process identity, so loops read the same."""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def world() -> tuple[int, int]:
    """(rank, world size): from torch.distributed when initialised, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_from_env() -> None:
    """Under torchrun (WORLD_SIZE > 1) join the process group: gloo on CPU; on CUDA nccl, with this rank's GPU (its
    LOCAL_RANK) made the current device first, so the collectives and every tensor made on "cuda" use it rather
    than all ranks' cuda:0. Call it before anything touches CUDA."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")


# What torchrun tells each process; accelerate (TRL's trainer) and torch.distributed read them to join a group.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def independent_process() -> tuple[int, int]:
    """For work shared out whole (each process its own jobs, nothing exchanged: `azlib experiment`): this process's
    (rank, number of processes) under torchrun, (0, 1) without; from then on it is a plain single process on its
    own GPU. The launcher's variables go, so nothing inside (TRL's accelerate) joins a process group the others
    never join, and CUDA_VISIBLE_DEVICES keeps only the GPU of LOCAL_RANK among those it listed (a vLLM engine
    takes the first GPU it sees). Call it before anything touches CUDA."""
    rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        if visible and local >= len(visible):
            raise RuntimeError(f"process {rank}: LOCAL_RANK {local}, but CUDA_VISIBLE_DEVICES lists {len(visible)} "
                               f"GPUs ({','.join(visible)}); start at most one process per GPU")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[local] if visible else str(local)
        for name in LAUNCHER_VARIABLES:
            os.environ.pop(name, None)
    return rank, size


def local_device(device: str) -> str:
    """This rank's device: 'cuda' becomes 'cuda:<LOCAL_RANK>' (one GPU per torchrun rank; cuda:0 without torchrun)."""
    return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if device == "cuda" else device


def shard(items: Sequence[T]) -> list[T]:
    """This rank's contiguous share of `items` (sizes differ by at most one): concatenated in rank order, the
    shares are `items` again, so what the ranks make from them gathers back in the one-process order."""
    rank, size = world()
    n = len(items)
    return list(items[rank * n // size:(rank + 1) * n // size])


def gather(value: Any) -> list[Any]:
    """Every rank's `value` (any picklable object), in rank order, on every rank."""
    rank, size = world()
    if size == 1:
        return [value]
    out: list[Any] = [None] * size
    dist.all_gather_object(out, value)
    return out


def sum_over_ranks(values: Sequence[float]) -> list[float]:
    """Each number summed over the ranks (one all-reduce for all of them)."""
    if world()[1] == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def sum_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Replace each parameter's gradient by its sum over the ranks, in one all-reduce of a flat buffer (a rank
    that trained on nothing adds zeros). A step's loss is normalised by the whole step's sequences or tokens
    on every rank, so the sum is the one-process gradient: DDP's all-reduce, without its averaging."""
    if world()[1] == 1:
        return
    params = list(parameters)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()
