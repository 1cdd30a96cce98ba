"""Does the student learn on 2 CPU cores within about an hour, and does the tree help? Runs notebook 05
with the `cpu` profile (MCTS-trained and plain-GRPO-trained at an equal token budget, vs the base)
through the runner and prints the held-out accuracies with CIs, McNemar p-values and wall time.
Long (about an hour); not part of the tests. Goal: +10 points over the base with p < 0.05.

    .venv/bin/python benchmarks/cpu_learning.py [--out outputs/cpu-learning]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from azlib.config import REPO_ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "outputs" / f"cpu-learning-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "azlib", "run", "--profile", "cpu", "--only", "05", "--out", str(args.out)],
                   check=True, cwd=REPO_ROOT)
    minutes = (time.perf_counter() - start) / 60
    m = json.loads((args.out / "metrics.json").read_text())["05_base_vs_trained"]
    print(f"\nnotebook 05, cpu profile, in {minutes:.1f} min (run folder {args.out})")
    for name in ("heldout", "gsm8k"):
        if f"base_{name}_n" not in m:
            continue
        print(f"{name} (n = {m[f'base_{name}_n']}, chat-0shot, greedy):")
        for model in ("base", "mcts", "sampling"):
            print(f"  {model:9s} {m[f'{model}_{name}_accuracy']:6.1%}  95% CI {m[f'{model}_{name}_ci_low']:.1%}-"
                  f"{m[f'{model}_{name}_ci_high']:.1%}")
        for a, b in (("base", "mcts"), ("base", "sampling"), ("sampling", "mcts")):
            print(f"  {a} -> {b}: fixed {m[f'{name}_{a}_vs_{b}_fixed']}, broken {m[f'{name}_{a}_vs_{b}_broken']}, "
                  f"McNemar p = {m[f'{name}_{a}_vs_{b}_p']:.3g}")
    print(f"tokens: MCTS {m['mcts_tokens']:,} in {m['mcts_steps']} steps; plain {m['sampling_tokens']:,} in "
          f"{m['sampling_steps']} steps")
    print(m["verdict"])


if __name__ == "__main__":
    main()
