"""SmolLM2-135M-Instruct on the GSM8K test set under lm-eval-5shot, against its published score.

The published number (SmolLM2 model card, lm-eval 5-shot) is 1.4%; ours should fall inside our
95% Wilson interval. Records go to outputs/benchmarks/gsm8k_reference/<backend>.jsonl.

    .venv/bin/python benchmarks/gsm8k_reference.py [--backend hf|vllm] [--limit N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from azlib.config import REPO_ROOT
from azlib.data import load_gsm8k
from azlib.eval import evaluate
from azlib.models import DEFAULT_MODEL, make_backend

PUBLISHED = 0.014
CPU_VLLM = {"dtype": "float32", "gpu_memory_utilization": 0.2, "max_model_len": 4096, "enforce_eager": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--limit", type=int, default=None, help="first N test problems (default: all 1,319)")
    parser.add_argument("--data", default="auto", help="GSM8K source: a folder, 'hub' or 'auto'")
    args = parser.parse_args()

    rows = load_gsm8k(args.data, "test", limit=args.limit)
    shots = load_gsm8k(args.data, "train", limit=5)  # lm-eval takes the first 5 train examples
    backend = make_backend(args.backend, DEFAULT_MODEL, **(CPU_VLLM if args.backend == "vllm" else {}))
    out = Path(REPO_ROOT / "outputs" / "benchmarks" / "gsm8k_reference" / f"{args.backend}.jsonl")
    result = evaluate(backend, rows, "lm-eval-5shot", fewshot=shots, max_new_tokens=256, records_path=out)
    backend.close()

    print(f"\nSmolLM2-135M-Instruct ({DEFAULT_MODEL}), backend {args.backend}")
    print(result.summary())
    lo, hi = result.scores["strict-match"].interval
    verdict = "inside" if lo <= PUBLISHED <= hi else "OUTSIDE"
    print(f"published lm-eval 5-shot: {PUBLISHED:.1%} -> {verdict} our 95% CI [{lo:.1%}, {hi:.1%}]")
    print(f"records: {out}")


if __name__ == "__main__":
    main()
