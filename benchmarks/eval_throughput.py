"""Throughput of azlib.eval.evaluate against raw batched generate on the same prompts, same run.

Prints tokens/s of both (goal: evaluate >= 0.9x generate), and the projected wall time of the
1,319-problem GSM8K test set under lm-eval-5shot on this machine, for azlib's hf backend (shared
few-shot prefix cached, batch 32) and for a naive HF loop (no prefix reuse, batch 16).

    .venv/bin/python benchmarks/eval_throughput.py [--problems 64] [--max-new-tokens 256]
"""

from __future__ import annotations

import argparse
import time

from azlib.data import load_gsm8k
from azlib.eval import LM_EVAL_STOP, evaluate, lm_eval_prompt
from azlib.models import hf as hf_module
from azlib.models import make_backend

TEST_SET = 1319


def raw_generate(backend, prompts, max_new_tokens):
    start = time.perf_counter()
    samples = backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, stop=LM_EVAL_STOP)
    return sum(s[0].completion_tokens for s in samples), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--data", default="auto", help="GSM8K source: a folder, 'hub' or 'auto'")
    args = parser.parse_args()

    rows = load_gsm8k(args.data, "test", limit=args.problems)
    shots = load_gsm8k(args.data, "train", limit=5)
    prompts = [lm_eval_prompt(r["prompt"], shots) for r in rows]
    backend = make_backend("hf", batch_size=32)

    raw_tokens, raw_seconds = raw_generate(backend, prompts, args.max_new_tokens)
    result = evaluate(backend, rows, "lm-eval-5shot", fewshot=shots, max_new_tokens=args.max_new_tokens)
    naive = make_backend("hf", batch_size=16)
    hf_module.MIN_SHARED_PREFIX = 10**9  # the naive loop: every row prefills the whole 5-shot prompt
    naive_tokens, naive_seconds = raw_generate(naive, prompts, args.max_new_tokens)

    raw_rate, eval_rate = raw_tokens / raw_seconds, result.tokens_per_second
    print(f"\n{args.problems} GSM8K test problems, lm-eval-5shot, greedy, max {args.max_new_tokens} new tokens")
    print(f"{'':34s}{'tokens':>8s}{'seconds':>9s}{'tok/s':>8s}{'projected 1,319':>17s}")
    for name, tokens, seconds in [("raw generate (hf, batch 32)", raw_tokens, raw_seconds),
                                  ("evaluate (hf, batch 32)", result.tokens_generated, result.seconds),
                                  ("naive HF (batch 16, no prefix)", naive_tokens, naive_seconds)]:
        projected = seconds / args.problems * TEST_SET / 60
        print(f"{name:34s}{tokens:8d}{seconds:9.1f}{tokens / seconds:8.1f}{projected:13.1f} min")
    print(f"evaluate / raw generate throughput: {eval_rate / raw_rate:.2f}x (goal >= 0.9x)")
    print(f"naive / evaluate wall time: {naive_seconds / result.seconds:.2f}x")


if __name__ == "__main__":
    main()
