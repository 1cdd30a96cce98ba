"""Text search cost on the embedded model: tokens/s generated during a search against raw batched
generate of the same backend in the same run (goal >= 0.7x), and the share of wall time spent in
tree bookkeeping rather than in the model (goal < 5%).

    .venv/bin/python benchmarks/mcts_throughput.py [--problems 4] [--simulations 16]
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import replace

from azlib.data import arithmetic_problems
from azlib.prompts import chat_prompt
from azlib.mcts import search
from azlib.games.text.env import TEXT_SEARCH_SAMPLING, TextEnv
from azlib.settings import SearchSettings, TextSearchSettings
from azlib.models import make_backend


class Timed:
    """Pass-through that times the backend's calls (so the rest of the search is bookkeeping)."""

    def __init__(self, backend):
        self.backend, self.seconds = backend, 0.0

    def _timed(self, method: str, *args, **kwargs):
        start = time.perf_counter()
        try:
            return getattr(self.backend, method)(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def generate(self, *args, **kwargs):
        return self._timed("generate", *args, **kwargs)

    def score(self, *args, **kwargs):
        return self._timed("score", *args, **kwargs)

    def __getattr__(self, name: str):  # the rest (tokenizer, encoders) untimed: the search reads them between calls
        return getattr(self.backend, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--simulations", type=int, default=16)
    parser.add_argument("--leaves-per-step", type=int, default=4)
    args = parser.parse_args()

    backend = make_backend("hf")
    rows = arithmetic_problems(args.problems, seed=0)
    settings = TextSearchSettings(expansion="chunk", student_samples=4, chunk_tokens=16)
    sampling = replace(TEXT_SEARCH_SAMPLING, max_new_tokens=128)
    timed = Timed(backend)
    env = TextEnv(timed, rows, settings, sampling)
    config = SearchSettings(num_simulations=args.simulations, max_depth=8, leaves_per_step=args.leaves_per_step,
                          skip_solved=True)
    start = time.perf_counter()
    results = search(env, [env.root(i) for i in range(len(rows))], config, random.Random(0))
    wall = time.perf_counter() - start
    tokens = sum(r.tokens for r in results)
    search_rate = tokens / wall

    # The same shape of work without a tree: one batched call per step, as many calls and samples.
    prompts = [chat_prompt(r["prompt"]) for r in rows] * args.leaves_per_step
    start, raw_tokens = time.perf_counter(), 0
    for _ in range(env.calls):
        out = backend.generate(prompts, n=settings.student_samples, max_new_tokens=settings.chunk_tokens,
                               temperature=sampling.temperature, top_p=sampling.top_p, seed=0)
        raw_tokens += sum(s.completion_tokens for group in out for s in group)
    raw_rate = raw_tokens / (time.perf_counter() - start)

    bookkeeping = (wall - timed.seconds) / wall
    print(f"{args.problems} problems x {args.simulations} simulations, {args.leaves_per_step} leaves per step: "
          f"{env.calls} batched steps, {tokens} tokens in {wall:.1f} s")
    print(f"search: {search_rate:.1f} tok/s; raw batched generate: {raw_rate:.1f} tok/s; "
          f"ratio {search_rate / raw_rate:.2f}x (goal >= 0.7x)")
    print(f"tree bookkeeping: {bookkeeping:.2%} of wall time (goal < 5%)")


if __name__ == "__main__":
    main()
