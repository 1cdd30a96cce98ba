"""Tic-tac-toe: pure-Python search speed (goal >= 10,000 simulations/s) and the never-lose check
over every reachable position where the player to move can force a draw or a win.

    .venv/bin/python benchmarks/tictactoe.py [--simulations 4000]
"""

from __future__ import annotations

import argparse
import random
import time

from azlib.mcts import SearchSettings, search
from azlib.mcts.envs import tictactoe as ttt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=4000)
    args = parser.parse_args()
    env = ttt.TicTacToe()

    config = SearchSettings(num_simulations=20_000, max_depth=9, temperature=0)
    start = time.perf_counter()
    (result,) = search(env, [ttt.EMPTY], config, random.Random(0))
    rate = result.simulations / (time.perf_counter() - start)
    print(f"from the empty board: {rate:,.0f} simulations/s (goal >= 10,000), {len(result.tree.nodes):,} nodes")

    config = SearchSettings(num_simulations=args.simulations, max_depth=9, temperature=0, c=1.0)
    positions = [b for b in ttt.reachable_positions() if ttt.legal_moves(b) and ttt.minimax(b) >= 0]
    start, losing = time.perf_counter(), []
    for board in positions:
        (r,) = search(env, [board], config, random.Random(board))
        if -ttt.minimax(ttt.play(board, r.action)) < 0:
            losing.append(board)
    print(f"{len(positions):,} positions where a draw or win is forced, {args.simulations} simulations each: "
          f"{len(losing)} losing choices ({time.perf_counter() - start:.0f} s){': ' + ', '.join(losing[:5]) if losing else ''}")


if __name__ == "__main__":
    main()
