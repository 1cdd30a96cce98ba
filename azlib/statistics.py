"""The statistics that compare methods and training arms: Wilson intervals, the paired comparison of outcomes (exact
McNemar), differences across seeds (paired t, Holm) and unbiased pass@k. Knows nothing of models or prompts."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests


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
