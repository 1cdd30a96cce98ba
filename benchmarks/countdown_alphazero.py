"""AlphaZero for a language model on Countdown, headless: notebook 08's comparison under a profile (the start by
imitation, every arm at equal generated characters over the training seeds, every test-time method), its numbers
printed and saved as JSON with the figures. Goals and their measured outcome: docs/results.md.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/countdown_alphazero.py [--profile cpu] [--out outputs/bench-countdown]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import torch  # noqa: E402

from azlib.lab.config import NOTEBOOKS_DIR, PROFILES, resolve  # noqa: E402
from azlib.games.countdown.evaluate import greedy_moves  # noqa: E402
from azlib.games.countdown.experiment import run_arms, summary, train_start  # noqa: E402
from azlib.lab.from_params import countdown_setup  # noqa: E402
from azlib.viz.countdown import plot_learning, plot_methods, plot_value_precision  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="cpu")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench-countdown"))
    args = parser.parse_args()
    params, _ = resolve(NOTEBOOKS_DIR / "08_countdown_alphazero.ipynb", args.profile, args.out.resolve())
    setup = countdown_setup(params)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    torch.set_num_threads(max(1, setup.workers))
    start, history = train_start(setup)
    torch.set_num_threads(1)
    print(f"start: {setup.imitation.steps} imitation steps in {time.perf_counter() - started:.0f} s", flush=True)
    result = run_arms(setup, start, history,
                      lambda name: print(f"  {name} done at {time.perf_counter() - started:.0f} s", flush=True))
    moves = greedy_moves(start, result.start["unseen"]["greedy"]["episodes"])  # where the start's greedy games are lost
    print(f"start, unseen targets: {json.dumps(moves)}", flush=True)
    minutes = (time.perf_counter() - started) / 60
    out = summary(result) | {"start_moves": moves, "minutes": minutes, "profile": args.profile}
    (args.out / "summary.json").write_text(json.dumps(out, indent=1))
    for name, fig in (("learning", plot_learning(result)), ("methods", plot_methods(result)),
                      ("value", plot_value_precision(result))):
        fig.savefig(args.out / f"08_{name}.png", dpi=90)
    print(json.dumps({k: v for k, v in out.items() if k not in ("histories", "start_history", "arms")}, indent=1))
    print(f"{minutes:.1f} min in all")


if __name__ == "__main__":
    main()
