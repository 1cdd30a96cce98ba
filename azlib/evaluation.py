"""Accuracy of a model on rows of the kit's schema through the generation interface: protocols, per-problem JSONL
records, two evaluations' paired comparison (its statistics: azlib.statistics). No training."""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from azlib.data.rows import Row
from azlib.models.generation import Backend, Prompt
from azlib.prompts import chat_prompt
from azlib.rewards import extract_answer, is_correct
from azlib.statistics import Comparison, compare_outcomes, wilson_interval

# lm-evaluation-harness `gsm8k` (5-shot): prompt, stop sequences and answer filters as it defines them.
LM_EVAL_STOP = ("Question:", "</s>", "<|im_end|>")
LM_EVAL_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
LM_EVAL_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
LM_EVAL_SHOTS, LM_EVAL_FEWSHOT_SEED = 5, 1234  # num_fewshot, and simple_evaluate's fewshot_random_seed
PROTOCOLS = ("chat-0shot", "lm-eval-5shot")


def lm_eval_shots(pool: Sequence[Row], documents: int, seed: int = LM_EVAL_FEWSHOT_SEED) -> list[list[Row]]:
    """lm-eval-harness's few-shot draw for `gsm8k`: one random.Random(seed), then for each test
    document in order, 5 shots sampled without replacement from the whole train split (`pool`)."""
    rnd, pool = random.Random(seed), list(pool)
    return [rnd.sample(pool, LM_EVAL_SHOTS) for _ in range(documents)]


def lm_eval_prompt(question: str, shots: Sequence[Row]) -> str:
    """'Question: q\\nAnswer: <reference solution>' x shots, then the question (lm-eval's format)."""
    examples = [f"Question: {r['prompt']}\nAnswer: {r['info']['solution']}" for r in shots]
    return "\n\n".join([*examples, f"Question: {question}\nAnswer:"])


def lm_eval_clean(text: str) -> str:
    """lm-eval's exact_match ignores ',', '$' and a trailing '.' and compares strings."""
    return re.sub(r"\.$", "", text.replace(",", "").replace("$", "")).strip()


def lm_eval_extract(output: str) -> dict[str, str | None]:
    strict = LM_EVAL_STRICT.search(output)
    flexible = LM_EVAL_FLEXIBLE.findall(output)
    last = next((g for g in flexible[-1] if g), None) if flexible else None
    return {"strict-match": lm_eval_clean(strict.group(1)) if strict else None,
            "flexible-extract": lm_eval_clean(last) if last else None}


@dataclass(frozen=True)
class Score:
    correct: int
    n: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.correct, self.n)


@dataclass
class EvalResult:
    protocol: str
    seed: int
    scores: dict[str, Score]  # metric name -> score; the first is the protocol's headline
    tokens_generated: int
    seconds: float
    records: list[dict] = field(repr=False)

    @property
    def headline(self) -> str:
        return next(iter(self.scores))

    @property
    def accuracy(self) -> float:
        return self.scores[self.headline].accuracy

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_generated / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        """Every accuracy with its protocol, n and seed beside it."""
        lines = []
        for metric, s in self.scores.items():
            lo, hi = s.interval
            lines.append(f"{self.protocol} [{metric}]: {s.accuracy:.1%} (95% CI {lo:.1%}-{hi:.1%}), "
                         f"{s.correct}/{s.n} correct, seed {self.seed}")
        lines.append(f"{self.tokens_generated} tokens in {self.seconds:.1f} s ({self.tokens_per_second:.1f} tok/s)")
        return "\n".join(lines)


def evaluate(
    backend: Backend,
    rows: Sequence[Row],
    protocol: str = "chat-0shot",
    *,
    fewshot: Sequence[Row] = (),
    max_new_tokens: int = 256,
    seed: int = 0,
    chunk_size: int | None = None,
    records_path: str | Path | None = None,
) -> EvalResult:
    """Greedy answers to every row; records (id, prompt, output, extracted, gold, correct, tokens)
    go to `records_path` as JSONL. lm-eval-5shot draws its shots from `fewshot`, the whole train
    split, as lm-eval-harness does: the i-th row gets the i-th draw, so `rows` should be the test
    split from its start (lm-eval's `--limit N` is the first N rows). chunk_size: prompts per generate
    call, by default the backend's `prompts_per_call` (vLLM: every row in one call)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    if protocol == "lm-eval-5shot" and len(fewshot) < LM_EVAL_SHOTS:
        raise ValueError(f"lm-eval-5shot needs the train split as its shot pool (at least {LM_EVAL_SHOTS} rows), "
                         f"got {len(fewshot)}")
    if protocol == "chat-0shot":
        prompts: list[Prompt] = [chat_prompt(r["prompt"]) for r in rows]
        stop = None
    else:
        draws = lm_eval_shots(fewshot, len(rows))
        prompts = [lm_eval_prompt(r["prompt"], shots) for r, shots in zip(rows, draws)]
        stop = LM_EVAL_STOP
    # Longest first within a sorted order: batches pad little, and a too-long prompt fails early.
    order = sorted(range(len(rows)), key=lambda i: -len(str(prompts[i])))
    outputs = [None] * len(rows)
    chunk_size = chunk_size or backend.prompts_per_call or max(len(rows), 1)
    start = time.perf_counter()
    with tqdm(total=len(rows), desc=f"evaluate {protocol}", unit="problem") as bar:
        for at in range(0, len(order), chunk_size):
            chunk = order[at : at + chunk_size]
            samples = backend.generate([prompts[i] for i in chunk], max_new_tokens=max_new_tokens, temperature=0.0,
                                       stop=stop, seed=seed)
            for i, group in zip(chunk, samples):
                outputs[i] = group[0]
            bar.update(len(chunk))
    seconds = time.perf_counter() - start

    records = []
    for row, sample in zip(rows, outputs):
        record = {"id": row["info"].get("id"), "prompt": row["prompt"], "output": sample.text, "gold": row["answer"],
                  "tokens": sample.completion_tokens, "prompt_tokens": sample.prompt_tokens,
                  "finish_reason": sample.finish_reason}
        if protocol == "chat-0shot":
            record["extracted"] = extract_answer(sample.text)
            record["correct"] = is_correct(record["extracted"], row["answer"])
        else:
            record["extracted"] = lm_eval_extract(sample.text)
            record["correct"] = {k: v == row["answer"] for k, v in record["extracted"].items()}  # strict first
        records.append(record)
    if protocol == "chat-0shot":
        scores = {"exact": Score(sum(r["correct"] for r in records), len(records))}
    else:
        scores = {m: Score(sum(r["correct"][m] for r in records), len(records))
                  for m in ("strict-match", "flexible-extract")}
    if records_path is not None:
        path = Path(records_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return EvalResult(protocol, seed, scores, sum(s.completion_tokens for s in outputs), seconds, records)


def headline_correct(record: dict) -> bool:
    c = record["correct"]
    return c if isinstance(c, bool) else next(iter(c.values()))


def compare(records_a: Sequence[dict], records_b: Sequence[dict]) -> Comparison:
    """Paired comparison of two evaluations of the same problems (matched by id)."""
    a = {r["id"]: headline_correct(r) for r in records_a}
    b = {r["id"]: headline_correct(r) for r in records_b}
    if a.keys() != b.keys():
        raise ValueError(f"the two evaluations cover different problems ({len(a.keys() ^ b.keys())} ids differ)")
    return compare_outcomes([a[i] for i in a], [b[i] for i in a], list(a))


def load_records(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
