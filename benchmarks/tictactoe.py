"""Tic-tac-toe: pure-Python search speed (goal >= 10,000 simulations/s) and the never-lose check
over every reachable position where the player to move can force a draw or a win. With --against COMMIT,
only the speed, of this checkout and of COMMIT's azlib in the same run (each in its own process, taking turns,
best of --repeats, per CPU second), and their ratio.

    .venv/bin/python benchmarks/tictactoe.py [--simulations 4000]
    .venv/bin/python benchmarks/tictactoe.py --against 38963bd [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from azlib.mcts import search
from azlib.paths import REPO_ROOT
from azlib.games import tictactoe as ttt
from azlib.settings import SearchSettings

SPEED_SIMULATIONS = 20_000

# One timed search from the empty board in a fresh process, printing simulations/s. The settings type is
# SearchSettings (search(env, roots, settings, rng)); at older commits it is SearchConfig, with the same fields.
SPEED = f"""
import random, time
from azlib import mcts
from azlib.games import tictactoe as ttt
Settings = getattr(mcts, "SearchSettings", None) or mcts.SearchConfig
settings = Settings(num_simulations={SPEED_SIMULATIONS}, max_depth=9, temperature=0)
start = time.process_time()
(result,) = mcts.search(ttt.TicTacToe(), [ttt.EMPTY], settings, random.Random(0))
print(result.simulations / (time.process_time() - start))
"""


def speed_in_process(azlib_parent: Path) -> float:
    """Simulations per CPU second of one search, in a new interpreter that imports azlib from `azlib_parent`."""
    env = {**os.environ, "PYTHONPATH": str(azlib_parent), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", SPEED], env=env, cwd=tempfile.gettempdir(), check=True,
                         capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def against(commit: str, repeats: int) -> None:
    """This checkout's search speed beside `commit`'s, runs alternating, best of `repeats` each. Speed in
    simulations per second of the process's CPU time, so that other jobs on a shared machine slow the two alike
    (they still disturb caches: the fastest run is the one least disturbed)."""
    with tempfile.TemporaryDirectory() as old:
        archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", commit, "azlib"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        here, then = [], []
        for _ in range(repeats):
            then.append(speed_in_process(Path(old)))
            here.append(speed_in_process(REPO_ROOT))
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    changed = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "azlib"], capture_output=True,
                             text=True).stdout.strip()
    print(f"tic-tac-toe from the empty board, {SPEED_SIMULATIONS:,} simulations, best of {repeats}, simulations per CPU second: "
          f"{commit} {max(then):,.0f}, this checkout ({head}{' + changes' if changed else ''}) "
          f"{max(here):,.0f}; "
          f"ratio {max(here) / max(then):.2f}x")
    print(f"every run: {commit} {[round(x) for x in then]}, this checkout {[round(x) for x in here]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=4000)
    parser.add_argument("--against", metavar="COMMIT", help="compare the search's speed with this commit's")
    parser.add_argument("--repeats", type=int, default=5, help="with --against: runs of each")
    args = parser.parse_args()
    if args.against:
        against(args.against, args.repeats)
        return
    env = ttt.TicTacToe()

    config = SearchSettings(num_simulations=SPEED_SIMULATIONS, max_depth=9, temperature=0)
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
