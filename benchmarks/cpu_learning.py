"""Does the student learn on 2 CPU cores within an hour, and does the tree help? Runs notebook 05 with the
`cpu` profile (the MCTS-trained student, then azlib plain GRPO, rejection-sampling fine-tuning and TRL's
GRPOTrainer at the MCTS run's token budget, all against the base) through the runner and prints the
held-out accuracies with CIs, McNemar p-values between every pair, tokens and wall time.
Long (about an hour); not part of the tests. Goal: MCTS >= base + 20 points (p < 0.05) and >= every arm.

    .venv/bin/python benchmarks/cpu_learning.py [--out outputs/cpu-learning]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from azlib.paths import REPO_ROOT
from azlib.runner import run_one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "outputs" / f"cpu-learning-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    m, minutes = run_one("05", "cpu", args.out)
    print(f"\nnotebook 05, cpu profile, in {minutes:.1f} min (run folder {args.out})")
    models = ["base", "mcts", *(arm for arm in ("grpo", "rft", "trl") if f"{arm}_tokens" in m)]
    for name in ("heldout", "gsm8k"):
        if f"base_{name}_n" not in m:
            continue
        print(f"{name} (n = {m[f'base_{name}_n']}, chat-0shot, greedy):")
        for model in models:
            tokens = f"{m[f'{model}_tokens']:>8,} tokens" if model != "base" else " " * 15
            print(f"  {model:5s} {m[f'{model}_{name}_accuracy']:6.1%}  95% CI {m[f'{model}_{name}_ci_low']:.1%}-"
                  f"{m[f'{model}_{name}_ci_high']:.1%}  {tokens}")
        for i, a in enumerate(models):
            for b in models[i + 1:]:
                print(f"  {a} -> {b}: fixed {m[f'{name}_{a}_vs_{b}_fixed']}, broken {m[f'{name}_{a}_vs_{b}_broken']}, "
                      f"McNemar p = {m[f'{name}_{a}_vs_{b}_p']:.3g}")
    print(m["verdict"])


if __name__ == "__main__":
    main()
