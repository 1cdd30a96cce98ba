"""AlphaZero on tic-tac-toe, notebook 02's loop with a profile's settings (default cpu): does the
net-guided search reach perfect play within 5 minutes on 2 CPU cores? After every round the best net
is graded exactly (azlib.games.tictactoe_alphazero.grade): its search's move in all 4,520 positions where a move
is due, against minimax, and every game against perfect play as X and as O; the raw policy net too.
Goal: a move of minimax's optimal set in every position (so 0 losing moves, and no won position let go
as a draw), all games drawn as X and as O. Writes nothing.

    .venv/bin/python benchmarks/alphazero_tictactoe.py [--profile cpu] [--seed 0] [--simulations 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from azlib.lab import config
from azlib.games.tictactoe_alphazero import POSITIONS, alphazero

GOAL_SECONDS = 300
GRADE_HEADER = f" {'losing':>6s} {'optimal':>8s} {'draw X':>7s} {'draw O':>7s} "


def grade_columns(h: dict, prefix: str) -> str:
    """One grade (prefix '' for the search, 'raw_' for the raw net) as table columns."""
    return (f" {h[prefix + 'losing_moves']:6d} {h[prefix + 'optimal_share']:8.2%} {h[prefix + 'draw_as_x']:7.1%} "
            f"{h[prefix + 'draw_as_o']:7.1%} ")


def never_loses(h: dict) -> bool:
    return h["losing_moves"] == 0 and h["draw_as_x"] == h["draw_as_o"] == 1.0


def perfect(h: dict) -> bool:
    """Every move in minimax's optimal set: no losing move, and no won position let go as a draw."""
    return never_loses(h) and h["optimal_share"] == 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", choices=config.PROFILES)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--simulations", type=int,
                        help="simulations per move (default: the profile's alphazero.simulations)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads: the net is tiny, Python search dominates")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params, _ = config.resolve(config.NOTEBOOKS_DIR / "02_mcts_tree.ipynb", args.profile,
                               config.REPO_ROOT / "outputs" / "unused")
    settings = params.alphazero
    if args.simulations:
        settings = dataclasses.replace(settings, simulations=args.simulations)
    seed = params.seed if args.seed is None else args.seed
    print(f"profile {args.profile}, seed {seed}: {settings}")

    start = time.perf_counter()
    _, history = alphazero(settings, seed=seed)
    wall = time.perf_counter() - start

    print(f"\n{'round':>5s} {'loop s':>7s} {'policy':>7s} {'value':>6s} {'best':>5s} |{GRADE_HEADER}| raw net:{GRADE_HEADER}")
    for h in history:
        loop = (f"{h['seconds']:7.1f} {h['policy_loss']:7.3f} {h['value_loss']:6.3f} {'new' if h['accepted'] else 'kept':>5s}"
                if h["iteration"] else " " * 28)
        print(f"{h['iteration']:5d} {loop} |{grade_columns(h, '')}| {' ' * 8}{grade_columns(h, 'raw_')}")

    final = history[-1]
    reached = perfect(final)
    print(f"\n{settings.iterations} rounds: {final['seconds']:.0f} s of self-play, training and arena; "
          f"{wall:.0f} s with the exact grade after every round")
    print(f"net-guided search ({settings.simulations} simulations), final best net, {len(POSITIONS):,} positions: "
          f"{final['losing_moves']} losing moves, {final['optimal_share']:.2%} optimal; vs perfect play draws "
          f"{final['draw_as_x']:.1%} as X, {final['draw_as_o']:.1%} as O (losses {final['loss_as_x']:.1%}, "
          f"{final['loss_as_o']:.1%})")
    print(f"raw policy net (no search): {final['raw_losing_moves']} losing moves, {final['raw_optimal_share']:.2%} "
          f"optimal; draws {final['raw_draw_as_x']:.1%} as X, {final['raw_draw_as_o']:.1%} as O")
    for name, test in (("0 losing moves and all games drawn", never_loses), ("every move optimal", perfect)):
        print(f"rounds with {name}: {[h['iteration'] for h in history if test(h)] or 'none'}")
    print(f"goal (every move optimal, so 0 losing moves; every game drawn as X and as O; within {GOAL_SECONDS} s): "
          f"{'reached' if reached and wall <= GOAL_SECONDS else 'NOT reached'} ({wall:.0f} s)")


if __name__ == "__main__":
    main()
