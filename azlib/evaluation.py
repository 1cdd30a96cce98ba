"""Accuracy of a model on rows of the kit's schema, through the generation interface: protocols,
per-problem JSONL records, Wilson intervals, the paired comparison (exact McNemar), and the statistics
that compare training arms across seeds (paired t, Holm) and pass@k. No training."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from tqdm.auto import tqdm

from azlib.data.rows import Row
from azlib.models.generation import Backend, Prompt
from azlib.prompts import chat_prompt
from azlib.rewards import extract_answer, is_correct

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


def mean_difference(a: Sequence[float], b: Sequence[float], z: float = 1.96) -> dict:
    """mean(b) - mean(a) of two independent samples with a normal-approximation 95% interval on
    Welch's standard error sqrt(var_a / n_a + var_b / n_b). Paired samples: `seed_difference`."""
    diff = statistics.fmean(b) - statistics.fmean(a)
    se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    return {"mean_a": statistics.fmean(a), "mean_b": statistics.fmean(b), "difference": diff,
            "ci_low": diff - z * se, "ci_high": diff + z * se, "n_a": len(a), "n_b": len(b)}


def seed_difference(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> dict:
    """Two arms' accuracies paired by training seed (a[i], b[i] share seed i; any pairing unit works):
    mean of b - a, its standard error sd / sqrt(n), the Student-t interval and the two-sided paired
    t-test p-value on n - 1 degrees of freedom (Student 1908; 3 seeds: t = 4.303 at 95%), both scipy's
    `ttest_rel(b, a)`.
    One seed has no spread to measure: se is nan, the interval (-inf, inf), p 1.0, and `note` says so.
    Differences all equal (accuracies are counts, so seeds can tie exactly) make the t statistic infinite and
    scipy's p 0, which is no evidence: p is then the exact two-sided sign test's (n seeds one way: 2 x 0.5^n,
    0.5 for two seeds, 0.25 for three), and `note` says so."""
    differences = [y - x for x, y in zip(a, b, strict=True)]
    n, diff = len(differences), statistics.fmean(differences)
    out = {"mean_a": statistics.fmean(a), "mean_b": statistics.fmean(b), "difference": diff,
           "differences": differences, "n": n, "note": ""}
    if n < 2:
        return out | {"se": math.nan, "ci_low": -math.inf, "ci_high": math.inf, "p": 1.0,
                      "note": "one seed: no spread across seeds, so no interval and no test"}
    se = statistics.stdev(differences) / math.sqrt(n)
    if se > 1e-12 * max(1.0, *map(abs, differences)):  # accuracies tie exactly, up to their float rounding
        test = stats.ttest_rel(b, a)
        interval = test.confidence_interval(confidence)
        return out | {"se": se, "ci_low": float(interval.low), "ci_high": float(interval.high),
                      "p": float(test.pvalue)}
    note = "" if diff == 0 else "every seed differs by the same amount: the t-test is degenerate, p is the sign test's"
    return out | {"se": se, "ci_low": diff, "ci_high": diff, "p": 1.0 if diff == 0 else min(1.0, 2 * 0.5**n),
                  "note": note}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order (Holm 1979, step-down; statsmodels' multipletests):
    sorted ascending, adj_(i) = max over j <= i of min(1, (m - j) p_(j)), j counted from 0; reject where adj < alpha."""
    return [float(p) for p in multipletests(p_values, method="holm")[1]] if len(p_values) else []


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k from n samples of which `correct` pass (Chen et al. 2021, eq. 1):
    1 - C(n - c, k) / C(n, k), computed as 1 - prod_{i = n-c+1}^{n} (1 - k / i) to stay stable."""
    if not (0 <= correct <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= correct <= n and 1 <= k <= n; got n={n}, correct={correct}, k={k}")
    if n - correct < k:
        return 1.0  # every k-subset holds a correct sample
    return 1.0 - math.prod(1.0 - k / i for i in range(n - correct + 1, n + 1))


MIN_SEEDS_FOR_INTERVAL = 3  # fewer seeds measure their spread too poorly for an interval to mean anything


def comparison_table(per_seed: dict[str, list[float]], pairs: list[tuple[str, str]],
                     mcnemar_p: dict[tuple[str, str], list[float]]) -> list[dict]:
    """One row per pair (a, b) of arms: b - a across seeds with its t-interval (`seed_difference`); with fewer
    than MIN_SEEDS_FOR_INTERVAL seeds no interval (-inf, inf): two seeds' t-interval runs from about -80 to +80
    points, or to a single point where they happen to tie.
    A pair's p-value is the two-sided paired t-test of its per-seed differences (1.0 with one seed);
    Holm's correction runs over the pairs, and a difference is significant when p_holm < 0.05.
    The per-seed exact McNemar p-values (`mcnemar_p[a, b]`, one per seed) are carried alongside."""
    differences = [seed_difference(per_seed[a], per_seed[b]) for a, b in pairs]
    adjusted = holm([d["p"] for d in differences])
    shown = [d["n"] >= MIN_SEEDS_FOR_INTERVAL for d in differences]
    return [{"a": a, "b": b, "difference": d["difference"], "ci_low": d["ci_low"] if ok else -math.inf,
             "ci_high": d["ci_high"] if ok else math.inf, "p": d["p"], "p_holm": p_holm, "significant": p_holm < 0.05, "seeds": d["n"], "mcnemar_p": mcnemar_p[a, b]}
            for (a, b), d, p_holm, ok in zip(pairs, differences, adjusted, shown)]


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sound at 0%, 100% and small n)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at 0 and n the interval's end is the share itself (exactly: rounding can land it an ulp inside)
    return (0.0 if correct == 0 else max(0.0, centre - half)), (1.0 if correct == n else min(1.0, centre + half))


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


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs as Binomial(b + c, 1/2) (statsmodels' mcnemar, exact);
    only the discordant cells count, so the table's diagonal is left at 0."""
    return float(mcnemar([[0, only_a], [only_b, 0]], exact=True).pvalue)


@dataclass(frozen=True)
class Comparison:
    both: int
    only_a: int
    only_b: int
    neither: int
    p_value: float
    fixed: list[str]  # ids B gets right and A got wrong
    broken: list[str]  # ids A got right and B gets wrong


def compare(records_a: Sequence[dict], records_b: Sequence[dict]) -> Comparison:
    """Paired comparison of two evaluations of the same problems (matched by id)."""
    a = {r["id"]: headline_correct(r) for r in records_a}
    b = {r["id"]: headline_correct(r) for r in records_b}
    if a.keys() != b.keys():
        raise ValueError(f"the two evaluations cover different problems ({len(a.keys() ^ b.keys())} ids differ)")
    return compare_outcomes([a[i] for i in a], [b[i] for i in a], list(a))


def compare_outcomes(a: Sequence[bool], b: Sequence[bool], ids: Sequence[str] | None = None) -> Comparison:
    """Paired comparison of two methods' outcomes on the same problems, in the same order (`ids` names them; by
    default their positions)."""
    if len(a) != len(b):
        raise ValueError(f"the two evaluations cover different problems ({len(a)} against {len(b)} outcomes)")
    ids = list(ids) if ids is not None else list(range(len(a)))
    cells = {(x, y): [i for i, u, v in zip(ids, a, b) if (bool(u), bool(v)) == (x, y)]
             for x in (True, False) for y in (True, False)}
    only_a, only_b = len(cells[True, False]), len(cells[False, True])
    return Comparison(len(cells[True, True]), only_a, only_b, len(cells[False, False]),
                      mcnemar_exact(only_a, only_b), cells[False, True], cells[True, False])


def load_records(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
