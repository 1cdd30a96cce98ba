"""Referee RL (avataRL) vs cross-entropy at equal tokens and optimiser steps: notebook 07's cpu profile, headless.
Goal: under 15 min on 2 CPU cores; the RL model's final validation bits/char within 10% of CE's (or the gap, explained).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/referee_rl.py [--profile cpu] [--out outputs/bench-referee-rl]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from azlib.lab.config import NOTEBOOKS_DIR, PROFILES, resolve  # noqa: E402
from azlib.referee import load_corpus  # noqa: E402
from azlib.lab.from_params import arms_from_params  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="cpu")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench-referee-rl"))
    args = parser.parse_args()
    params, _ = resolve(NOTEBOOKS_DIR / "07_referee_rl.ipynb", args.profile, args.out.resolve())
    torch.manual_seed(params.seed)
    corpus, note = load_corpus(params.gsm8k, params.max_chars or None, fallback=params.gsm8k_fallback)
    arms = arms_from_params(params, corpus)
    print(f"corpus {corpus.source}{' (' + note + ')' if note else ''}: {len(corpus.train):,} train / "
          f"{len(corpus.val):,} held-out characters, vocabulary {corpus.vocab_size}; torch threads "
          f"{torch.get_num_threads()}")
    for s in arms.specs:
        print(f"  {s.name:17s} {s.kind}  {arms.models[s.name].num_params():>9,} parameters")
    started = time.perf_counter()
    log, evals = arms.train()
    total = time.perf_counter() - started
    final, ce = evals[-1], evals[-1]["ce_val_bpc"]
    train = params.train
    print(f"\n{train.steps} steps x {train.batch_size} x {params.model.block_size} = {final['tokens']:,} characters per arm; "
          f"{total / 60:.1f} min for all arms (goal < 15 min)")
    print(f"validation bits/char at step 0: {evals[0]['ce_val_bpc']:.3f}")
    tail = log[-max(1, len(log) // 10):]
    for s in arms.specs:
        clipped = sum(r[s.name + "_grad_norm"] > train.grad_clip for r in log) / len(log)
        line = (f"  {s.name:17s} final {final[s.name + '_val_bpc']:.4f} bits/char ({100 * (final[s.name + '_val_bpc'] / ce - 1):+.1f}% vs CE)"
                f", {final[s.name + '_seconds']:.0f} s incl. referee, grad clipped at {clipped:.0%} of steps")
        if s.kind == "rl":
            mean = lambda key: sum(r[f"{s.name}_{key}"] for r in tail) / len(tail)  # noqa: E731
            line += (f"; last 10%: reward share on y {mean('gt_reward_share'):.4f}, positions with only y rewarded "
                     f"{mean('only_gt_rewarded'):.4f}, |A| {mean('action_set_size'):.1f}, grad norm {mean('grad_norm'):.3f}")
        print(line)
    print("  (CE's grad norm, last 10%:", f"{sum(r['ce_grad_norm'] for r in tail) / len(tail):.3f})")

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s in arms.specs:
        ax.plot([e["tokens"] / 1e6 for e in evals], [e[s.name + "_val_bpc"] for e in evals],
                "-" if s.kind == "rl" else "--", marker=".", label=s.name)
    ax.set(title=f"Referee RL vs cross-entropy, held-out {corpus.source} text", xlabel="training characters (millions)",
           ylabel="validation cross-entropy (bits/char)")
    ax.grid(alpha=0.3)
    ax.legend()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "referee_rl.png", dpi=110, bbox_inches="tight")
    print(f"figure: {args.out / 'referee_rl.png'}")


if __name__ == "__main__":
    main()
