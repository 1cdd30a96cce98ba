"""Notebook 08's start, and where its greedy policy loses a game: imitation of solver-written solutions at 4 numbers
(azlib.games.countdown.arms.start_policy, the policy's shape of the cpu profile), read every `--every` steps on the
first 300 unseen-target problems: the greedy solve rate, and per move the share of greedy moves that keep a solvable
problem solvable (azlib.games.countdown.evaluate.greedy_moves), beside the share a uniform legal first move keeps and
the policy's probability mass on those moves. Writes nothing; one torch thread.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/countdown_start.py [--steps 3000] [--every 750] [--problems 20000]
        [--learning-rate 1e-3]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from azlib.games.countdown.arms import start_policy
from azlib.games.countdown.evaluate import greedy_moves
from azlib.games.countdown.play import play_greedy
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.settings import ImitationSettings
from azlib.settings import GPTShape

PROBLEMS = 300  # the cpu profile's held-out problems per split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=750)
    parser.add_argument("--problems", type=int, default=20000, help="solver solutions to imitate")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    unseen = list(heldout(4, "unseen"))[:PROBLEMS]
    settings = ImitationSettings(problems=args.problems, steps=args.steps, learning_rate=args.learning_rate)
    started, steps = time.perf_counter(), itertools.count(args.every, args.every)

    def read(policy) -> dict:
        row = greedy_moves(policy, play_greedy(policy, unseen)) | {"minutes": (time.perf_counter() - started) / 60}
        kept = " ".join(f"{row[f'kept_{d}']:5.1%}" for d in (1, 2, 3))
        print(f"step {next(steps):5d}: {row['greedy']:6.1%} greedy | kept {kept} | first move: uniform keeps "
              f"{row['uniform_keeps_1']:5.1%}, policy mass {row['policy_mass_keeps_1']:5.1%} | "
              f"{row['minutes']:5.1f} min", flush=True)
        return row

    print(f"{settings}, 4 numbers, GPTShape {GPTShape()}, seed {args.seed}; read on {PROBLEMS} unseen-target problems")
    start_policy(GPTShape(), settings, 4, args.seed, evaluate=read, every=args.every)


if __name__ == "__main__":
    main()
