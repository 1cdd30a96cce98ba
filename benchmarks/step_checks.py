"""Does an exact check of each step let the tree win? Two modes, neither trains.

--mode table: each step check's precision and recall as a verifier of whole answers, per chain length, on the
shipped held-out answers of notebook 05's experiment (benchmarks/results/tree-vs-sampling-all: the base student
and every trained arm's, pooled over seeds); prints the table, writes it as JSON and a figure. Seconds.

--mode stage1: the embedded student (SmolLM2-135M, untrained) on fresh arithmetic problems per chain length:
(a) collection, with the reference check: independent sampling (G answers per problem) against the tree that forks
at the first failing step (G/2 answers, then rounds of forks), verified answers and distinct problems solved per
1,000 generated tokens; (b) test time, with the text-only "traced" check: best-of-G (the first sampled answer
whose steps all pass, else the first) against the tree forking at failing steps (the first of its answers whose
steps all pass, else the first), the tree blind to the gold and the reference. Writes one JSON per chain length
as it finishes. About 100 s per 3-step problem on one busy core.

    .venv/bin/python benchmarks/step_checks.py --mode table [--out docs/figures]
    .venv/bin/python benchmarks/step_checks.py --mode stage1 [--steps 3 1] [--problems 8 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from azlib.statistics import wilson_interval
from azlib.paths import REPO_ROOT

TABLE_FIGURE = "step-check-precision.png"


def table(out: Path) -> None:
    from azlib.lab.shipped_results import shipped_experiment
    from azlib.step_check_precision import check_records, precision_table

    experiment, made = shipped_experiment()
    rows = experiment.eval_sets["heldout"]
    students = {"base student": experiment.base["heldout"],
                f"trained students ({len(experiment.runs)} arms x seeds)":
                    experiment.trained_records("heldout")}
    tables = {name: precision_table(check_records(records, rows)) for name, records in students.items()}
    for name, t in tables.items():
        print(f"\n{name}, held-out answers ({made.label})")
        print(f"{'steps':>5} {'check':>10} {'answers':>7} {'right':>5} {'eq right':>9} {'passed':>6} "
              f"{'precision [95% CI]':>22} {'recall [95% CI]':>22}")
        for r in t:
            print(f"{r['steps']:>5} {r['check']:>10} {r['answers']:>7} {r['right']:>5} "
                  f"{r['equations_right']:>4}/{r['equations']:<4} {r['passed']:>6} {_share(r, 'precision'):>22} "
                  f"{_share(r, 'recall'):>22}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "step-check-precision.json").write_text(json.dumps({"source": made.label, "tables": tables}, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    from azlib.viz.step_checks import plot_step_checks

    plot_step_checks({f"{name}: held-out answers": t for name, t in tables.items()}, made.label).savefig(
        out / TABLE_FIGURE, dpi=120)
    print(f"\nwrote {out / 'step-check-precision.json'} and {out / TABLE_FIGURE}")


def _share(row: dict, key: str) -> str:
    if row[key] is None:
        return "-"
    low, high = row[f"{key}_ci"]
    return f"{row[key]:.2f} [{low:.2f}, {high:.2f}]"


def stage1(steps: list[int], problems: list[int], group: int, rounds: int, seed: int, max_new_tokens: int,
           out: Path) -> None:
    from azlib.data import arithmetic_problems
    from azlib.games.text.signals import forked_groups, verified
    from azlib.games.text.forking import ForkingSearch
    from azlib.settings import AnswerSampling, ForkSettings
    from azlib.models.student import Student
    from azlib.rewards import extract_answer, is_correct
    from azlib.rewards.step_checks import answer_passes, check_steps
    from azlib.step_check_precision import check_answer, precision_table

    backend = Student("embedded:smollm2-135m-instruct").backend
    sampling = AnswerSampling(temperature=0.7, max_new_tokens=max_new_tokens)
    out.mkdir(parents=True, exist_ok=True)
    for length, n in zip(steps, problems):
        start = time.perf_counter()
        rows = arithmetic_problems(n, seed=seed + length, steps=(length,), wording="train")
        blind = [{**r, "answer": "?", "info": {k: v for k, v in r["info"].items() if k != "solution"}} for r in rows]
        indices = list(range(n))

        def grow(problems, fork: ForkSettings, g: int):
            return ForkingSearch(backend, problems, fork, sampling=sampling).grow(indices, g, seed=seed)

        sampled = grow(rows, ForkSettings(rounds=0), group)
        print(f"{length}-step sampling done, {time.perf_counter() - start:.0f} s", flush=True)
        checked = grow(rows, ForkSettings(rounds=rounds, points=2, branches=2, where="step", check="reference"),
                       group // 2)
        print(f"{length}-step reference tree done, {time.perf_counter() - start:.0f} s", flush=True)
        searched = grow(blind, ForkSettings(rounds=rounds, points=2, branches=2, where="step", check="traced"),
                        group // 2)

        def collection(trees) -> dict:
            kept = verified(forked_groups(trees, backend))
            tokens = sum(t.tokens for t in trees)
            return {"tokens": tokens, "answers": sum(len(t.answers()) for t in trees), "verified": len(kept),
                    "solved": len({c.answer.problem for c in kept}), "verified_per_1k": 1000 * len(kept) / tokens,
                    "solved_per_1k": 1000 * len({c.answer.problem for c in kept}) / tokens}

        def picked(trees) -> dict:
            """The first answer (round by round) whose steps all pass the traced check, else the first; scored
            against the gold after the search."""
            right = 0
            for tree in trees:
                row = rows[tree.problem]
                answers = tree.answers()  # round by round: a tree's leaves are numbered as they were drawn
                chosen = next((a for a in answers if answer_passes(check_steps(a.text, row["prompt"]), "traced")),
                              answers[0])
                right += is_correct(extract_answer(chosen.text), row["answer"])
            tokens = sum(t.tokens for t in trees)
            return {"tokens": tokens, "right": right, "problems": len(trees), "accuracy": right / len(trees),
                    "accuracy_ci": wilson_interval(right, len(trees))}

        def repairs(trees, check: str, with_solution: bool) -> dict:
            """Per fork: does the step it redraws (the first equation ending after the shared prefix) pass now?"""
            counts = {"forks": 0, "passes": 0, "fails": 0, "no_step": 0}
            for tree in trees:
                row = rows[tree.problem]
                for leaf in tree.answer_ends():
                    node = tree.nodes[leaf]
                    if not node.round:
                        continue
                    shared = len(backend.tokenizer.decode(tree.prefix(node.parent), skip_special_tokens=True))
                    steps = check_steps(node.answer.text, row["prompt"], row["info"]["solution"] if with_solution
                                        else None)
                    redrawn = next((s for s in steps if s.equation.end > shared), None)
                    counts["forks"] += 1
                    counts["no_step" if redrawn is None else "passes" if redrawn.passes(check) else "fails"] += 1
            return counts

        own = [check_answer(a.text, rows[t.problem], a.finished) for t in sampled for a in t.answers()]
        result = {"steps": length, "problems": n, "group": group, "rounds": rounds, "seed": seed,
                  "max_new_tokens": max_new_tokens,
                  "collection": {"sampling": collection(sampled), "tree_reference": collection(checked)},
                  "test_time": {"best_of_n_traced": picked(sampled), "tree_traced": picked(searched)},
                  "repairs": {"tree_reference": repairs(checked, "reference", True),
                              "tree_traced": repairs(searched, "traced", False)},
                  "sampled_answers": precision_table(own), "seconds": time.perf_counter() - start}
        (out / f"stage1-steps{length}.json").write_text(json.dumps(result, indent=1) + "\n")
        c, t = result["collection"], result["test_time"]
        print(f"\n{length}-step chains, {n} problems, {result['seconds']:.0f} s")
        for name, r in c.items():
            print(f"  collection {name:>15}: {r['tokens']:>6} tokens, {r['verified']:>3} verified, {r['solved']:>3} "
                  f"solved; {r['verified_per_1k']:.2f} verified and {r['solved_per_1k']:.2f} solved per 1k tokens")
        for name, r in t.items():
            low, high = r["accuracy_ci"]
            print(f"  test time  {name:>15}: {r['tokens']:>6} tokens, {r['right']}/{r['problems']} right "
                  f"({r['accuracy']:.2f} [{low:.2f}, {high:.2f}])")
        for name, r in result["repairs"].items():
            print(f"  {name} forks: {r['forks']}; the redrawn step passes {r['passes']}, fails {r['fails']}, "
                  f"none written {r['no_step']}")
        for r in result["sampled_answers"]:
            if r["steps"] == "all":
                print(f"  sampled answers, {r['check']:>10} check: {r['passed']} of {r['answers']} pass, precision "
                      f"{_share(r, 'precision')}, recall {_share(r, 'recall')}; equations right "
                      f"{r['equations_right']}/{r['equations']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("table", "stage1"), default="table")
    parser.add_argument("--steps", type=int, nargs="+", default=[3, 1], help="stage1: chain lengths, in this order")
    parser.add_argument("--problems", type=int, nargs="+", default=[8, 4], help="stage1: problems per chain length")
    parser.add_argument("--group", type=int, default=8, help="stage1: sampled answers per problem (the tree: half)")
    parser.add_argument("--rounds", type=int, default=2, help="stage1: the tree's forking rounds (2 points x 2 branches)")
    parser.add_argument("--seed", type=int, default=40000, help="stage1: problems drawn at seed + chain length")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=None,
                        help="table: docs/figures (default); stage1: outputs/step-checks-<time> (default)")
    args = parser.parse_args()
    if args.mode == "table":
        table(args.out or REPO_ROOT / "docs" / "figures")
    else:
        if len(args.problems) != len(args.steps):
            parser.error("--problems needs one count per --steps value")
        stage1(args.steps, args.problems, args.group, args.rounds, args.seed, args.max_new_tokens,
               args.out or REPO_ROOT / "outputs" / f"step-checks-{time.strftime('%Y%m%d-%H%M%S')}")


if __name__ == "__main__":
    main()
