"""AlphaZero's update, shared by the games: passes over the examples in shuffled minibatches, an optimiser step on
each, the loss the game's own. Not self-play (azlib.mcts.selfplay), which makes the examples."""

from __future__ import annotations

import random
from typing import Callable, Hashable, Sequence

import torch

# the minibatch's example indices -> its loss, and the numbers to log for it
Loss = Callable[[list[int]], tuple[torch.Tensor, dict[str, float]]]


def minibatches(units: Sequence[Hashable], size: int, rng: random.Random) -> list[list[int]]:
    """Example indices in shuffled minibatches of about `size`: the units in a random order, each unit's examples
    together (Countdown's move, a row per candidate line, is one unit; a board position is its own), a minibatch
    closed once it holds `size` examples or more."""
    examples: dict[Hashable, list[int]] = {}
    for i, unit in enumerate(units):
        examples.setdefault(unit, []).append(i)
    order = list(examples)
    rng.shuffle(order)
    batches, batch = [], []
    for unit in order:
        batch += examples[unit]
        if len(batch) >= size:
            batches.append(batch)
            batch = []
    return batches + ([batch] if batch else [])


def update(loss: Loss, optimizer: torch.optim.Optimizer, units: Sequence[Hashable], batch_size: int, epochs: int,
           rng: random.Random, max_grad_norm: float | None = None) -> tuple[dict[str, float], int]:
    """`epochs` passes over the examples (one unit each in `units`), an optimiser step on `loss` of each minibatch,
    the gradient's norm clipped to `max_grad_norm` if given. Returns each logged number's mean over the minibatches
    that logged it, and the optimiser steps taken."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    logs: dict[str, list[float]] = {}
    steps = 0
    for _ in range(epochs):
        for batch in minibatches(units, batch_size, rng):
            value, logged = loss(batch)
            optimizer.zero_grad()
            value.backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            optimizer.step()
            steps += 1
            for name, number in logged.items():
                logs.setdefault(name, []).append(number)
    return {name: sum(numbers) / len(numbers) for name, numbers in logs.items()}, steps
