"""Countdown problems as Stream of Search's generator (`countdown_generate.py`) makes them, seeded, and the held-out
sets the kit ships as data. No model, no training."""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

from azlib.games.countdown.rules import State, solvable

MIN_TARGET, MAX_TARGET = 10, 100
MAX_NUMBER = MAX_TARGET - 1  # Stream of Search: numbers "can go up to max target" (randint(1, max_target - 1))
HELDOUT_DIR = Path(__file__).parent / "heldout"
HELDOUT_SIZE = 500  # problems in each shipped held-out set
SPLIT_SEED = 4  # Stream of Search's: `countdown_generate.py --seed 4` in their scripts/gen_task.sh


@cache
def target_split() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(seen, unseen) targets: 10..100 shuffled by random.seed(SPLIT_SEED), the first tenth unseen (Stream of Search's
    val_target split at their seed: 14 39 41 57 62 81 87 89 96, as theirs)."""
    rng = random.Random(SPLIT_SEED)
    targets = list(range(MIN_TARGET, MAX_TARGET + 1))
    rng.shuffle(targets)
    held = len(targets) // 10
    return tuple(sorted(targets[held:])), tuple(sorted(targets[:held]))


def generate(count: int, size: int, targets: tuple[int, ...], rng: random.Random) -> list[State]:
    """`count` problems of `size` numbers: a target drawn from `targets`, numbers drawn from 1..MAX_NUMBER again
    until the oracle says they reach it."""
    if size < 2:
        raise ValueError(f"a problem needs at least 2 numbers, got {size}")
    problems = []
    while len(problems) < count:
        target = rng.choice(targets)
        while not solvable(state := State(target, tuple(rng.randint(1, MAX_NUMBER) for _ in range(size)))):
            pass
        problems.append(state)
    return problems


def training_problems(count: int, size: int, seed: int) -> list[State]:
    """Problems on the seen targets, drawn by `seed`, the shipped held-out sets' problems left out (in any order of
    their numbers)."""
    return draw_training(count, size, random.Random(f"train {size} {seed}"))


def draw_training(count: int, size: int, rng: random.Random) -> list[State]:
    """The next `count` training problems from `rng` (a stream: call again with the same rng for more)."""
    held = {p.position for p in heldout(size, "seen")}
    problems = []
    while len(problems) < count:
        problems += [p for p in generate(count - len(problems), size, target_split()[0], rng)
                     if p.position not in held]
    return problems


def make_heldout(size: int, split: str) -> list[State]:
    """The held-out set as the kit generates it: HELDOUT_SIZE problems on the seen or the unseen targets."""
    seen, unseen = target_split()
    targets = {"seen": seen, "unseen": unseen}[split]
    return generate(HELDOUT_SIZE, size, targets, random.Random(f"heldout {size} {split}"))


@cache
def heldout(size: int, split: str) -> tuple[State, ...]:
    """A shipped held-out set: `split` "seen" (targets seen in training, other problems) or "unseen" (Stream of
    Search's held-out targets), of 3- or 4-number problems."""
    path = HELDOUT_DIR / f"{size}_numbers_{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no held-out set of {size}-number {split!r} problems at {path} (the kit ships "
                                "3 and 4 numbers, seen and unseen)")
    return tuple(State(row["target"], tuple(row["numbers"]))
                 for row in map(json.loads, path.read_text().splitlines()))
