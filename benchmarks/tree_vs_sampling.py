"""Does the tree earn its place? Notebook 05's experiment (azlib.lab.tree_vs_sampling) with the `cpu` profile, on 2 CPU
cores: the base student's calibration table, then the forking tree and rejection sampling (main mode; every
arm in --mode all) trained to one budget of generated tokens for each of 3 training seeds, every model on
the profile's held-out problems (200) in the training wordings and the same problems in wordings never trained on.

Prints accuracies (mean and per seed), the mechanism (distinct verified answers and solved problems per
1,000 generated tokens), every comparison with its across-seed t-interval and Holm-corrected p, and the
goals: tree >= RFT + 5 points on both sets and above it in every seed; every trained arm >= base + 10 on
the transfer set; verified answers per 1k tokens >= 1.3x RFT's. Long (about an hour); not part of the tests.
An interrupted run continues where it stopped when given the same --out. The every-arm run (--mode all, many
hours on 2 cores) is kept in the repository, a folder per arm and seed (results and per-problem answers; the
checkpoints stay out of git), so that anyone can continue it on any machine and --report reads it:
--mode all --out benchmarks/results/tree-vs-sampling-all [--seeds S] [--arms ...].

    .venv/bin/python benchmarks/tree_vs_sampling.py [--mode main|all] [--steps 2] [--budget-scale 1] [--out DIR]
        [--arms grpo trl] [--seeds 0 1] [--fork fork_from=finished] [--eval-problems 500] [--eval-gsm8k 200] [--report]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from azlib.lab.config import ParamsError, resolve_library
from azlib.lab.tree_vs_sampling import Experiment, calibration, calibration_sets, comparison_pairs, task_sets
from azlib.settings import ARMS
from azlib.models import make_backend
from azlib.paths import REPO_ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("main", "all"), default="main",
                        help="main: base, tree and RFT; all: every arm of azlib.settings.ARMS, tree and RFT first (so an "
                             "interrupted run has the main comparison), with the embedded teacher ensemble for tree_teachers")
    parser.add_argument("--steps", type=int, default=None, help="arithmetic steps per problem (default: the profile's)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply the profile's token budget")
    parser.add_argument("--arms", nargs="+", default=None, choices=list(ARMS), metavar="ARM",
                        help="train only these arms, in this order (default: the mode's); like --seeds, processes given "
                             "the same --out and different arms share the work; --report reads the mode's arms")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="train only these of the profile's seeds: processes given the same --out and different "
                             "seeds share the work (each writes only its own seed folders); --report reads them all")
    parser.add_argument("--fork", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="change fields of the profile's fork section (azlib.settings.ForkSettings), e.g. "
                             "fork_from=finished; values read as YAML")
    parser.add_argument("--eval-problems", type=int, default=None,
                        help="problems in each held-out set (default: the profile's 200; the goal is >= 500)")
    parser.add_argument("--eval-gsm8k", type=int, default=None,
                        help="also evaluate every model on this many of GSM8K's test problems with the fewest "
                             "calculation steps, a second transfer set (default: the profile's 0)")
    parser.add_argument("--report", action="store_true",
                        help="print what --out holds so far (a running or interrupted run), train nothing")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "outputs" / f"tree-vs-sampling-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    start = time.perf_counter()
    # every change is a --set assignment over the profile, validated as `azlib experiment --set` validates it
    params, _ = resolve_library("05_base_vs_trained", "cpu", args.out.resolve())
    arms = ["tree", "rft"] if args.mode == "main" else ["tree", "rft"] + [a for a in ARMS if a not in ("tree", "rft")]
    if args.arms and not args.report:
        arms = args.arms
    assignments = [f"arms={json.dumps(arms)}", f"train.token_budget={int(params.train.token_budget * args.budget_scale)}"]
    if args.mode == "all" and not params.has_teachers:  # tree_teachers: the embedded teacher ensemble writes its forks
        assignments.append("teacher_tier=cpu")
    if args.seeds and not args.report:
        unknown = sorted(set(args.seeds) - set(params.seeds))
        if unknown:
            parser.error(f"--seeds {unknown} are not among the profile's seeds {params.seeds}")
        assignments.append(f"seeds={json.dumps(args.seeds)}")
    if any("=" not in item for item in args.fork):
        parser.error(f"--fork takes FIELD=VALUE, got {args.fork}")
    assignments += [f"fork.{item}" for item in args.fork]
    if args.steps:
        assignments.append(f"arithmetic_steps=[{args.steps}]")
    if args.eval_problems is not None:
        assignments.append(f"eval_problems={args.eval_problems}")
    if args.eval_gsm8k is not None:
        assignments.append(f"eval_gsm8k_problems={args.eval_gsm8k}")
    try:
        params, _ = resolve_library("05_base_vs_trained", "cpu", args.out.resolve(), assignments)
    except ParamsError as err:
        parser.error(str(err))
    problems, sets, note = task_sets(params)
    print(f"{args.mode} mode: arms {params.arms}, seeds {params.seeds}, {params.train.token_budget:,} tokens per arm and "
          f"seed, fork {asdict(params.fork)}, {params.arithmetic_steps}-step problems, held-out sets { {k: len(v) for k, v in sets.items()} } {note}")

    calibration_path = args.out / "calibration.json"
    if not calibration_path.exists() and params.calibration_problems and not args.report:
        base = make_backend("hf", params.model, dtype=params.dtype, device=params.device)
        table = calibration(base, calibration_sets(params), samples=params.calibration_samples,
                            temperature=params.train.temperature, max_new_tokens=params.train.max_new_tokens,
                            seed=params.seed)
        base.close()
        args.out.mkdir(parents=True, exist_ok=True)
        calibration_path.write_text(json.dumps(table, indent=1))
    if calibration_path.exists():
        print("\ncalibration (base student, sampled at the training temperature):")
        for row in json.loads(calibration_path.read_text()):
            print("  " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))

    experiment = Experiment(params, problems, sets, args.out / "experiment")
    experiment = experiment.load() if args.report else experiment.run()
    print("\naccuracy (mean over seeds; each seed):")
    print(experiment.summary())
    print("\nmechanism (per 1,000 generated tokens; mean over seeds):")
    mechanism = experiment.mechanism()
    per_arm = {}
    for arm in params.arms:
        runs = [m for m in mechanism if m["arm"] == arm]
        if runs:
            per_arm[arm] = {k: sum(m[k] for m in runs) / len(runs)
                            for k in ("verified_per_1k", "solved_per_1k", "prefill_per_generated", "truncated")}
            print(f"  {arm:10s} " + ", ".join(f"{k} {v:.3f}" for k, v in per_arm[arm].items()))
    comparisons = experiment.comparisons(comparison_pairs(params.arms))
    print("\ncomparisons (b - a, mean over seeds, 95% t-interval, Holm over all of these):")
    for c in comparisons:
        print(f"  {c['set']:9s} {c['a']:>9s} -> {c['b']:9s} {c['difference'] * 100:+6.1f} points "
              f"[{c['ci_low'] * 100:+.1f}, {c['ci_high'] * 100:+.1f}]  above in {c['b_above_a_in']}/{c['seeds']}  "
              f"p {c['p']:.3g}  Holm {c['p_holm']:.3g}  McNemar per seed {', '.join(f'{p:.3g}' for p in c['mcnemar_p'])}")
    print("\ngoals:")
    for c in comparisons:
        if (c["a"], c["b"]) == ("rft", "tree"):
            print(f"  {c['set']}: tree >= RFT + 5 points: {c['difference'] >= 0.05} ({c['difference'] * 100:+.1f}); "
                  f"above in every seed: {c['b_above_a_in'] == c['seeds']}; "
                  f"upper bound of tree - RFT: {c['ci_high'] * 100:+.1f} points")
        if c["a"] == "base" and c["set"] in ("transfer", "gsm8k"):
            print(f"  {c['set']}: {c['b']} >= base + 10 points: {c['difference'] >= 0.10} "
                  f"({c['difference'] * 100:+.1f})")
    if "tree" in per_arm and "rft" in per_arm:
        ratio = per_arm["tree"]["verified_per_1k"] / max(per_arm["rft"]["verified_per_1k"], 1e-9)
        print(f"  verified answers per 1k tokens, tree / RFT: {ratio:.2f}x (goal >= 1.3x)")
    if not args.report:
        minutes = (time.perf_counter() - start) / 60
        print(f"\n{minutes:.1f} min (goal for the main mode: 120; run folder {args.out})")
        summary = {"minutes": minutes, "accuracies": experiment.accuracies(), "mechanism": mechanism,
                   "comparisons": comparisons}
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
