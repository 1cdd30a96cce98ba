"""Proposal throughput of the teacher ensemble (cpu tier: the embedded model under two personas, and behind a
loopback HTTP server this script starts, as notebook 03 does) against the same requests sent one at a time, as the original system did.
Prints tokens/s of both and their ratio, measured in the same run.

    .venv/bin/python benchmarks/teacher_throughput.py [--nodes 8] [--tokens 16]
"""

from __future__ import annotations

import argparse
import time

from azlib.data import arithmetic_problems
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.models.serve import BatchingServer
from azlib.teachers import TeacherEnsemble, loopback_teacher, teacher_messages, tier_teachers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8, help="partial answers asked about at once")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per proposal")
    args = parser.parse_args()

    student = make_backend("hf")
    server = BatchingServer(student, DEFAULT_MODEL).start()
    ensemble = TeacherEnsemble([*tier_teachers("cpu"), loopback_teacher(server.url)], shared={DEFAULT_MODEL: student}, per_node=3)
    contexts = [(r["prompt"], "") for r in arithmetic_problems(args.nodes, seed=0)]
    ensemble.propose(contexts[:1], max_new_tokens=2)  # warm-up: first calls pay one-off costs

    start = time.perf_counter()
    batched = ensemble.propose(contexts, max_new_tokens=args.tokens, seed=1)
    batched_s = time.perf_counter() - start
    batched_tokens = sum(p.sample.completion_tokens for props in batched for p in props)

    start, single_tokens = time.perf_counter(), 0
    for teacher in ensemble.teachers:
        for question, partial in contexts:
            for label in teacher.spec.labels:
                prompt = teacher_messages(teacher.spec.persona, label, question, partial)
                (sample,), = teacher.backend.generate([prompt], max_new_tokens=args.tokens,
                                                      temperature=teacher.spec.temperature, top_p=0.95, seed=1)
                single_tokens += sample.completion_tokens
    single_s = time.perf_counter() - start
    ensemble.close()
    server.close()

    requests = len(contexts) * sum(len(teacher.spec.labels) for teacher in ensemble.teachers)
    print(f"{requests} proposals ({len(ensemble.teachers)} teachers x {len(contexts)} nodes x right/wrong), "
          f"{args.tokens} tokens each")
    print(f"ensemble (batched per teacher, teachers concurrent): {batched_tokens} tokens in {batched_s:.1f} s = "
          f"{batched_tokens / batched_s:.1f} tok/s")
    print(f"one request at a time:                             {single_tokens} tokens in {single_s:.1f} s = "
          f"{single_tokens / single_s:.1f} tok/s")
    print(f"ratio: {(batched_tokens / batched_s) / (single_tokens / single_s):.2f}x")


if __name__ == "__main__":
    main()
