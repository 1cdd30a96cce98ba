"""Data parallelism on torchrun's process group (gloo on CPU, nccl on CUDA): the rank and world size, joining the
group, each rank's share of a list, gathering what every rank made, summing gradients over ranks.

Without torchrun (no WORLD_SIZE, or 1) there is one rank and every function is the one-process identity, so the
training loops read the same either way. `torchrun --nproc_per_node=N -m azlib train ...` starts N ranks.
"""

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
    """Under torchrun (WORLD_SIZE > 1) join the process group: gloo on CPU, nccl on CUDA."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


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
