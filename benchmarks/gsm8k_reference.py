"""SmolLM2-135M-Instruct on the GSM8K test set under lm-eval-5shot, against its published score.

The published number (SmolLM2 model card, lm-eval 5-shot) is 1.4%; ours should fall inside our
95% Wilson interval. Shots are drawn as lm-eval-harness draws them. Records go to
outputs/benchmarks/gsm8k_reference/<backend>.jsonl; when the other backend's records of the same
problems are there, prints how many outputs the two agree on (goal: >= 95%).

    .venv/bin/python benchmarks/gsm8k_reference.py --backend hf [--limit N]
    .venv-vllm/bin/python benchmarks/gsm8k_reference.py --backend vllm [--limit N]
"""

from __future__ import annotations

import argparse

from azlib.paths import REPO_ROOT
from azlib.data import load_gsm8k
from azlib.evaluation import evaluate, load_records
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.models.vllm import CPU_ENGINE

PUBLISHED = 0.014
RECORDS = REPO_ROOT / "outputs" / "benchmarks" / "gsm8k_reference"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--limit", type=int, default=None, help="first N test problems (default: all 1,319)")
    parser.add_argument("--data", default="auto", help="GSM8K source: a folder, 'hub' or 'auto'")
    args = parser.parse_args()

    rows, pool = load_gsm8k(args.data, "test", limit=args.limit), load_gsm8k(args.data, "train")
    backend = make_backend(args.backend, DEFAULT_MODEL, **(CPU_ENGINE if args.backend == "vllm" else {}))
    out = RECORDS / f"{args.backend}.jsonl"
    result = evaluate(backend, rows, "lm-eval-5shot", fewshot=pool, max_new_tokens=256, records_path=out)
    backend.close()

    print(f"\nSmolLM2-135M-Instruct ({DEFAULT_MODEL}), backend {args.backend}")
    print(result.summary())
    lo, hi = result.scores["strict-match"].interval
    verdict = "inside" if lo <= PUBLISHED <= hi else "OUTSIDE"
    print(f"published lm-eval 5-shot: {PUBLISHED:.1%} -> {verdict} our 95% CI [{lo:.1%}, {hi:.1%}]")
    print(f"records: {out}")
    other = RECORDS / f"{'vllm' if args.backend == 'hf' else 'hf'}.jsonl"
    if other.is_file():
        theirs = {r["id"]: r["output"] for r in load_records(other)}
        shared = [r for r in result.records if r["id"] in theirs]
        same = sum(r["output"] == theirs[r["id"]] for r in shared)
        print(f"outputs identical to {other.name}: {same}/{len(shared)} ({same / max(len(shared), 1):.1%}; goal >= 95%)")


if __name__ == "__main__":
    main()
