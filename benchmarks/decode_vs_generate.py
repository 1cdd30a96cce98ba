"""azlib's decode loop (azlib.models.decoding, the hf backend's sampler) against transformers' own
`model.generate`, on the same model, prompts, batch and stop rule in the same run.

What training samples: SmolLM2-135M-Instruct in fp32, the kit's chat prompt of arithmetic problems (1- and 2-step,
training wordings), G answers per problem at T 0.7, at most 96 new tokens, every row ended at its answer line
('#### N' and a newline; for `generate`, the stopping criteria the TRL arm uses, azlib.lab.trl_arm.answer_line_stop).
Peers: `generate` with a static cache (`cache_implementation="static"`, what transformers recommends for fast
decoding) and with its default dynamic cache. The runs alternate, repeated, and each method's best time counts.
Prints generated tokens per second, greedy (the same tokens for every method: pure speed) and sampled (training's
setting; token counts differ a little), each ratio to the best `generate` (the goal: the loop stays the default
only if it is >= 1.3x), and how many rows the loop and `generate` decode greedily to the same tokens.

    .venv/bin/python benchmarks/decode_vs_generate.py [--problems 16] [--group 4] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from azlib.data.arithmetic import arithmetic_problems
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.lab.trl_arm import answer_line_stop
from azlib.prompts import chat_prompt

MAX_NEW_TOKENS = 96
TEMPERATURE = 0.7


def azlib_loop(backend, prompts, group: int, temperature: float, seed: int) -> tuple[list[list[int]], int]:
    """The hf backend's generate: azlib's decode loop. Returns each row's new tokens and their total."""
    samples = backend.generate(prompts, n=group, max_new_tokens=MAX_NEW_TOKENS, temperature=temperature, seed=seed,
                               stop_at_answer=True)
    rows = [list(s.token_ids) for per_prompt in samples for s in per_prompt]
    return rows, sum(len(r) for r in rows)


def transformers_generate(backend, prompts, group: int, temperature: float, seed: int,
                          cache: str | None) -> tuple[list[list[int]], int]:
    """`model.generate` on the same rows in batches of the backend's size (left-padded), the answer-line stop
    and EOS ending rows; a row's tokens are those up to the step it ended at (recorded by a stopping criterion,
    so the padding after it does not count)."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    model, tokenizer = backend.model, backend.tokenizer
    answer_stop = answer_line_stop(tokenizer)[0]
    eos = torch.tensor(sorted(backend.eos_ids))
    rows = [ids for ids in (backend.encode_prompt(p) for p in prompts) for _ in range(group)]
    out: list[list[int]] = [[] for _ in rows]
    torch.manual_seed(seed)
    for start in range(0, len(rows), backend.batch_size):
        batch = rows[start : start + backend.batch_size]
        width = max(len(r) for r in batch)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in batch])
        attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in batch])
        ended = [None] * len(batch)

        class RecordEnd(StoppingCriteria):
            def __call__(self, ids, scores, **kwargs):
                done = answer_stop(ids, scores) | torch.isin(ids[:, -1], eos)
                for row in torch.nonzero(done).flatten().tolist():
                    if ended[row] is None:
                        ended[row] = ids.shape[1] - width
                return torch.tensor([e is not None for e in ended])

        generated = model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=MAX_NEW_TOKENS,
            do_sample=temperature > 0, temperature=temperature if temperature > 0 else None, top_p=None, top_k=None,
            cache_implementation=cache, stopping_criteria=StoppingCriteriaList([RecordEnd()]), pad_token_id=pad,
            eos_token_id=sorted(backend.eos_ids))
        for i, row in enumerate(generated[:, width:].tolist()):
            out[start + i] = row[: ended[i] if ended[i] is not None else MAX_NEW_TOKENS]
    return out, sum(len(r) for r in out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16, help="arithmetic problems (1- and 2-step)")
    parser.add_argument("--group", type=int, default=4, help="answers per problem (training's G)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timed runs of every method")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the kit's setting when two "
                                                               "jobs share 2 cores)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = make_backend("hf", DEFAULT_MODEL)
    prompts = [chat_prompt(row["prompt"]) for row in arithmetic_problems(args.problems, seed=7, steps=(1, 2))]
    methods = {
        "azlib loop": lambda t, s: azlib_loop(backend, prompts, args.group, t, s),
        "generate, static cache": lambda t, s: transformers_generate(backend, prompts, args.group, t, s, "static"),
        "generate, dynamic cache": lambda t, s: transformers_generate(backend, prompts, args.group, t, s, None),
    }

    print(f"{DEFAULT_MODEL}, fp32, {torch.get_num_threads()} thread(s); {args.problems} problems x G = {args.group}, "
          f"T {TEMPERATURE}, <= {MAX_NEW_TOKENS} new tokens, stop at the answer line; batch {backend.batch_size}")
    greedy = {name: run(0.0, 0)[0] for name, run in methods.items()}  # also the warm-up runs
    for name in list(methods)[1:]:
        same = sum(a == b for a, b in zip(greedy["azlib loop"], greedy[name]))
        print(f"greedy: {name} decodes {same}/{len(greedy[name])} rows to the loop's tokens")

    ratios = {}
    for label, temperature in (("greedy (the same tokens for all)", 0.0), (f"sampled at T {TEMPERATURE}", TEMPERATURE)):
        print(f"\n{label}:")
        best: dict[str, tuple[float, int]] = {}
        for repeat in range(args.repeats):
            for name, run in methods.items():
                start = time.perf_counter()
                _, tokens = run(temperature, repeat)
                seconds = time.perf_counter() - start
                print(f"  run {repeat}: {name:24s} {tokens:5d} tokens in {seconds:6.1f} s = {tokens / seconds:6.1f} tok/s")
                if name not in best or tokens / seconds > best[name][1] / best[name][0]:
                    best[name] = (seconds, tokens)
        rates = {name: tokens / seconds for name, (seconds, tokens) in best.items()}
        print("  best of the runs:")
        for name, rate in rates.items():
            print(f"    {name:24s} {rate:6.1f} tok/s  ({rate / rates['azlib loop']:.2f}x the loop)")
        ratios[label] = rates["azlib loop"] / max(rates[name] for name in rates if name != "azlib loop")
    for label, ratio in ratios.items():
        print(f"\n{label}: loop / best generate {ratio:.2f}x (goal >= 1.3x for the loop to stay the default: "
              f"{'met' if ratio >= 1.3 else 'not met'})")

if __name__ == "__main__":
    main()
