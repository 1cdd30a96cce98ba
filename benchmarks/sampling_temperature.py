"""The base student's right answers per generated token at two sampling temperatures (notebook 05's quick
default 0.3 against the library's 0.7): azlib.lab.tree_vs_sampling.calibration on fresh arithmetic chains of 1 and 2
steps, the same problems and seed at each temperature. Writes nothing.

    .venv/bin/python benchmarks/sampling_temperature.py [--temperatures 0.3 0.7] [--problems 16] [--samples 8]
"""

from __future__ import annotations

import argparse

from azlib.data import arithmetic_problems
from azlib.lab.tree_vs_sampling import calibration
from azlib.models import DEFAULT_MODEL, make_backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.3, 0.7])
    parser.add_argument("--problems", type=int, default=16, help="problems per step count")
    parser.add_argument("--samples", type=int, default=8, help="sampled answers per problem")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="notebook 05's quick train.max_new_tokens")
    args = parser.parse_args()
    base = make_backend("hf", DEFAULT_MODEL, dtype="float32", device="cpu")
    sets = {f"{k}-step": arithmetic_problems(args.problems, seed=20_000, steps=(k,)) for k in (1, 2)}
    print(f"{'T':>4s} {'set':>7s} {'pass@1':>7s} {'right':>6s} {'tokens/answer':>14s} {'right per 1k tokens':>20s}")
    for temperature in args.temperatures:
        for row in calibration(base, sets, samples=args.samples, temperature=temperature,
                               max_new_tokens=args.max_new_tokens, seed=0, ks=(1,)):
            right = round(row["pass@1"] * row["problems"] * args.samples)
            print(f"{temperature:4.1f} {row['set']:>7s} {row['pass@1']:7.1%} {right:6d} {row['tokens_per_answer']:14.1f} "
                  f"{1000 * row['pass@1'] / row['tokens_per_answer']:20.2f}")


if __name__ == "__main__":
    main()
