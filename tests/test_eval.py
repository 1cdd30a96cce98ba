"""Evaluation end to end on the real model, lm-eval's answer filters; the statistics (Wilson, McNemar, Holm,
pass@k, the paired t across seeds) by hand and against implementations other than the one each calls (statsmodels
for scipy's, scipy for statsmodels', Holm's definition written out)."""

import itertools
import math
import random
import statistics

import pytest
from scipy import stats

from azlib import evaluation as ev
from azlib import statistics as st
from azlib.data import arithmetic_problems, load_gsm8k
from azlib.rewards import correctness_reward, perplexity_reward, perplexity_reward_under


HF_BATCH_SIZE = 8  # the 12 problems span two batches of different widths (the conftest `hf` fixture reads it)


def test_chat_evaluation_end_to_end(hf, tmp_path):
    rows = arithmetic_problems(12, seed=0, steps=(1,))
    result = ev.evaluate(hf, rows, "chat-0shot", max_new_tokens=48, records_path=tmp_path / "r.jsonl", chunk_size=5)
    records = ev.load_records(tmp_path / "r.jsonl")
    assert [r["id"] for r in records] == [r["info"]["id"] for r in rows], "records keep the rows' order"
    assert set(records[0]) >= {"id", "prompt", "output", "extracted", "gold", "correct", "tokens"}
    assert all(r["correct"] == (r["extracted"] == r["gold"]) for r in records)
    score = result.scores["exact"]
    assert score.n == 12 and score.correct == sum(r["correct"] for r in records)
    assert result.tokens_generated == sum(r["tokens"] for r in records) > 0
    assert "chat-0shot [exact]" in result.summary() and "seed 0" in result.summary()
    again = ev.evaluate(hf, rows, "chat-0shot", max_new_tokens=48, chunk_size=12)
    assert [r["output"] for r in again.records] == [r["output"] for r in records], "greedy: chunking changes nothing"


def test_lm_eval_protocol_uses_five_shots_and_reports_both_filters(hf, gsm8k_dir):
    test, train = load_gsm8k(str(gsm8k_dir), "test", limit=3), load_gsm8k(str(gsm8k_dir), "train", limit=5)
    prompt = ev.lm_eval_prompt(test[0]["prompt"], train)
    assert prompt.count("Question: ") == 6 and prompt.endswith(f"Question: {test[0]['prompt']}\nAnswer:")
    assert "#### 72" in prompt, "shots carry the full reference solutions"
    result = ev.evaluate(hf, test, "lm-eval-5shot", fewshot=train, max_new_tokens=64)
    assert list(result.scores) == ["strict-match", "flexible-extract"]
    assert all("Question:" not in r["output"] for r in result.records), "the stop sequence ends each answer"
    with pytest.raises(ValueError, match="needs the train split as its shot pool"):
        ev.evaluate(hf, test, "lm-eval-5shot", fewshot=train[:2])


@pytest.mark.parametrize(
    "output, strict, flexible",
    [
        (" 16 - 3 - 4 = 9\n9 * 2 = $18\n#### 18", "18", "18"),
        (" The total is $1,200.", None, "1200"),
        (" #### 5 apples, then #### 7", "5", "7"),
        (" It is 12.50.", None, "12.50"),
        (" nothing", None, None),
    ],
)
def test_lm_eval_filters(output, strict, flexible):
    assert ev.lm_eval_extract(output) == {"strict-match": strict, "flexible-extract": flexible}


Z95 = stats.norm.ppf(0.975)  # statsmodels' alpha = 0.05
CONFIDENCES = (0.8, 0.9, 0.95, 0.99, 0.999)
# Counts on a grid: every count for small n (0 and n included), the edges and middle for large n.
COUNTS = [(c, n) for n in range(1, 13) for c in range(n + 1)] + [
    (c, n) for n in (37, 500, 1319, 10_000) for c in sorted({0, 1, 2, n // 3, n // 2, n - 2, n - 1, n})]


def test_wilson_interval_matches_statsmodels_on_a_grid():
    from statsmodels.stats.proportion import proportion_confint  # dev extra; .venv-verifiers collects this file

    for (correct, n), confidence in itertools.product(COUNTS, CONFIDENCES):
        expected = proportion_confint(correct, n, alpha=1 - confidence, method="wilson")
        z = stats.norm.ppf((1 + confidence) / 2)
        assert st.wilson_interval(correct, n, z=z) == pytest.approx(expected, abs=1e-12), (correct, n, confidence)
    assert st.wilson_interval(7, 20) == pytest.approx(proportion_confint(7, 20, method="wilson"), abs=1e-4), \
        "the default z is 1.96, the 95% interval"
    assert st.wilson_interval(0, 10)[0] == 0.0 and st.wilson_interval(10, 10)[1] == 1.0
    # the interval holds the share itself at every count (the formula's rounding leaves 6/6's end at 1 - 1 ulp)
    assert all(low <= c / n <= high for c, n in COUNTS + [(6, 6), (0, 11), (21, 21)]
               for low, high in [st.wilson_interval(c, n)])
    assert st.wilson_interval(0, 0) == (0.0, 1.0), "no problems: nothing is known"


DISCORDANT = [*range(0, 13), 17, 30, 60, 200, 1319]


def test_mcnemar_exact_by_hand_and_against_scipys_binomial_test_on_a_grid():
    assert st.mcnemar_exact(0, 5) == pytest.approx(2 * 0.5**5), "5 discordant pairs all one way: 2 x 1/32"
    assert st.mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 2**10), "P(X <= 1) of Binomial(10, 1/2), twice"
    assert st.mcnemar_exact(1, 2) == 1.0 and st.mcnemar_exact(0, 0) == 1.0, "never above 1; no discordant pairs"
    for only_a, only_b in itertools.product(DISCORDANT, DISCORDANT):
        got = st.mcnemar_exact(only_a, only_b)
        if only_a + only_b == 0:
            assert got == 1.0, "no discordant pairs: no evidence either way"
            continue
        assert got == pytest.approx(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue, rel=1e-9, abs=1e-300)
        assert got == st.mcnemar_exact(only_b, only_a), "two-sided: symmetric in the two arms"
    assert all(st.mcnemar_exact(k, k) == 1.0 for k in DISCORDANT), "a tie is no evidence"


def holm_by_the_definition(p: list[float]) -> list[float]:
    """Holm 1979 read off its definition: reject H_(1), H_(2), ... in ascending order of p while
    p_(j) <= alpha / (m - j); H_i's adjusted p-value is the smallest alpha at which it is rejected."""
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    rejected_at = {}
    for alpha in sorted({min(1.0, (m - j) * p[i]) for j, i in enumerate(order)}):
        for j, i in enumerate(order):
            if (m - j) * p[i] > alpha:
                break
            rejected_at.setdefault(i, alpha)
    return [rejected_at.get(i, 1.0) for i in range(m)]


def test_holm_by_hand_and_against_its_definition():
    assert st.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert st.holm([]) == [] and st.holm([0.2]) == [0.2]
    rng = random.Random(0)
    for m in (2, 3, 4, 5, 8, 20):
        for _ in range(10):  # 0.01 and 0.5: ties; 0 and 1: the ends of the range
            p = [rng.choice([rng.random(), rng.random() * 0.05, 0.01, 0.5, 0.0, 1.0]) for _ in range(m)]
            adjusted = st.holm(p)
            assert adjusted == pytest.approx(holm_by_the_definition(p), abs=1e-12), p
            in_sorted_order = [adjusted[i] for i in sorted(range(m), key=lambda i: p[i])]
            assert in_sorted_order == sorted(in_sorted_order), "step-down: never smaller than a smaller p's"
            assert all(raw <= adj <= 1.0 for raw, adj in zip(p, adjusted))
    assert st.holm([0.02] * 4) == pytest.approx([0.08] * 4), "tied p-values share one adjusted value"


def test_pass_at_k_matches_scipy_hypergeom_and_enumeration():
    grid = [(n, c, k) for n in range(1, 21) for c in range(n + 1) for k in range(1, n + 1)]
    grid += [(n, c, k) for n in (100, 200, 1000) for c in (0, 1, 3, n // 2, n - 1, n) for k in (1, 2, 10, 50, 100)]
    for n, correct, k in grid:  # no correct sample among k drawn without replacement from n
        expected = 1 - stats.hypergeom.pmf(0, n, correct, k)
        assert st.pass_at_k(n, correct, k) == pytest.approx(expected, abs=1e-12), (n, correct, k)
    for samples in itertools.product([False, True], repeat=5):  # every outcome of n = 5 samples
        for k in range(1, 6):
            subsets = list(itertools.combinations(samples, k))
            expected = sum(any(s) for s in subsets) / len(subsets)
            assert st.pass_at_k(5, sum(samples), k) == pytest.approx(expected, abs=1e-12)
    assert st.pass_at_k(200, 3, 1) == pytest.approx(3 / 200), "pass@1 is the share of correct samples"
    assert st.pass_at_k(10, 0, 10) == 0.0 and st.pass_at_k(10, 10, 1) == 1.0 and st.pass_at_k(10, 8, 3) == 1.0
    for bad in [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            st.pass_at_k(*bad)


def test_seed_difference_matches_scipy_and_statsmodels_on_a_grid():
    from statsmodels.stats.weightstats import DescrStatsW

    rng = random.Random(1)
    for n, confidence in itertools.product((2, 3, 4, 5, 7, 10, 20), CONFIDENCES):
        for _ in range(5):
            a = [rng.random() for _ in range(n)]
            b = [x + rng.gauss(0.02, 0.05) for x in a]
            d = st.seed_difference(a, b, confidence=confidence)
            differences = [y - x for x, y in zip(a, b)]
            half = stats.t.ppf((1 + confidence) / 2, n - 1) * stats.sem(differences)
            mean = statistics.fmean(differences)
            assert (d["ci_low"], d["ci_high"]) == pytest.approx((mean - half, mean + half), rel=1e-12, abs=1e-12)
            sm = DescrStatsW(differences)
            assert (d["ci_low"], d["ci_high"]) == pytest.approx(sm.tconfint_mean(alpha=1 - confidence), rel=1e-12,
                                                                abs=1e-12)
            assert d["p"] == pytest.approx(2 * stats.t.sf(abs(mean) / stats.sem(differences), n - 1), rel=1e-9)
            assert d["p"] == pytest.approx(sm.ttest_mean(0)[1], rel=1e-9)
            assert d["difference"] == pytest.approx(statistics.fmean(b) - statistics.fmean(a))
            assert d["se"] == pytest.approx(stats.sem(differences)) and d["n"] == n
            assert d["differences"] == differences


def test_seed_difference_with_three_seeds_uses_t_4_303_and_survives_one_seed_and_ties():
    d = st.seed_difference([0.40, 0.42, 0.41], [0.45, 0.44, 0.48])
    assert (d["ci_high"] - d["difference"]) / d["se"] == pytest.approx(4.303, abs=1e-3)
    one = st.seed_difference([0.40], [0.45])
    assert one["difference"] == pytest.approx(0.05) and math.isnan(one["se"]) and one["p"] == 1.0
    assert (one["ci_low"], one["ci_high"]) == (-math.inf, math.inf) and "one seed" in one["note"]
    same = st.seed_difference([0.4, 0.5, 0.6], [0.4, 0.5, 0.6])  # scipy: nan; no difference at all is p 1
    assert same["p"] == 1.0 and same["ci_low"] == same["ci_high"] == 0.0, "no difference at all: p is 1"
    shifted = st.seed_difference([0.5, 0.25, 0.75], [0.625, 0.375, 0.875])  # the same exact gain every seed
    assert stats.ttest_rel([0.625, 0.375, 0.875], [0.5, 0.25, 0.75]).pvalue == 0.0, "scipy's degenerate t-test"
    assert shifted["p"] == pytest.approx(stats.binomtest(3, 3).pvalue) and "sign test" in shifted["note"]
    assert st.seed_difference([0.5, 0.25], [0.48, 0.23])["p"] == pytest.approx(stats.binomtest(0, 2).pvalue)
    with pytest.raises(ValueError):
        st.seed_difference([0.4, 0.5], [0.4])


def test_mean_difference_matches_statsmodels_welch_z_interval():
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    rng = random.Random(2)
    for n_a, n_b in itertools.product((2, 3, 10), (2, 5, 30)):
        a = [rng.random() for _ in range(n_a)]
        b = [rng.gauss(0.6, 0.2) for _ in range(n_b)]
        d = st.mean_difference(a, b, z=Z95)
        expected = CompareMeans(DescrStatsW(b), DescrStatsW(a)).zconfint_diff(alpha=0.05, usevar="unequal")
        assert (d["ci_low"], d["ci_high"]) == pytest.approx(expected, abs=1e-12), (n_a, n_b)
        assert (d["n_a"], d["n_b"]) == (n_a, n_b)


def test_comparison_table_tests_pairs_across_seeds_then_holm():
    from statsmodels.stats.weightstats import DescrStatsW

    per_seed = {"grpo": [0.40, 0.42, 0.41], "tree": [0.47, 0.48, 0.49], "rejection": [0.41, 0.40, 0.44]}
    pairs = [("grpo", "tree"), ("grpo", "rejection")]
    mcnemar_p = {("grpo", "tree"): [0.01, 0.02, 0.003], ("grpo", "rejection"): [0.8, 0.6, 0.3]}
    rows = st.comparison_table(per_seed, pairs, mcnemar_p)
    raw = [DescrStatsW([y - x for x, y in zip(per_seed[a], per_seed[b])]).ttest_mean(0)[1] for a, b in pairs]
    assert [r["p"] for r in rows] == pytest.approx(raw)
    assert raw[0] < raw[1]  # Holm with two p-values: the smaller doubled, the larger kept (but never below it)
    assert [r["p_holm"] for r in rows] == pytest.approx([2 * raw[0], max(2 * raw[0], raw[1])])
    assert [(r["a"], r["b"], r["significant"], r["seeds"]) for r in rows] == [("grpo", "tree", True, 3),
                                                                             ("grpo", "rejection", False, 3)]
    assert rows[0]["mcnemar_p"] == [0.01, 0.02, 0.003], "carried as given"
    assert rows[0]["ci_low"] < rows[0]["difference"] < rows[0]["ci_high"]
    assert set(rows[0]) == {"a", "b", "difference", "ci_low", "ci_high", "p", "p_holm", "significant", "seeds",
                            "mcnemar_p"}
    one_seed = st.comparison_table({"grpo": [0.40], "tree": [0.90]}, [("grpo", "tree")], {("grpo", "tree"): [1e-9]})
    assert (one_seed[0]["p"], one_seed[0]["p_holm"], one_seed[0]["significant"]) == (1.0, 1.0, False), \
        "one seed: however large the gain, nothing is significant across seeds"
    two = st.comparison_table({"grpo": [0.40, 0.50], "tree": [0.45, 0.55]}, [("grpo", "tree")], {("grpo", "tree"): [1, 1]})
    assert (two[0]["ci_low"], two[0]["ci_high"]) == (-math.inf, math.inf), \
        "two seeds that tie in their gain: no single-point interval, no interval at all"
    assert two[0]["difference"] == pytest.approx(0.05) and two[0]["p"] == pytest.approx(0.5), "the sign test's p"


def test_compare_pairs_records_by_id():
    a = [{"id": i, "correct": c} for i, c in enumerate([True, True, False, False, True, False])]
    b = [{"id": i, "correct": c} for i, c in reversed(list(enumerate([True, False, True, True, True, False])))]
    cmp = ev.compare(a, b)
    assert (cmp.both, cmp.only_a, cmp.only_b, cmp.neither) == (2, 1, 2, 1)
    assert cmp.fixed == [2, 3] and cmp.broken == [1]
    assert cmp.p_value == pytest.approx(st.mcnemar_exact(1, 2)) == 1.0
    lm = [{"id": 0, "correct": {"strict-match": False, "flexible-extract": True}}]
    assert ev.compare(lm, lm).neither == 1, "lm-eval records compare on strict-match, the headline"
    with pytest.raises(ValueError, match="different problems"):
        ev.compare(a, b[:-1])
    by_position = st.compare_outcomes([True, True, False, False], [False, True, True, True])
    assert (by_position.both, by_position.only_a, by_position.only_b, by_position.neither) == (1, 1, 2, 0)
    assert by_position.fixed == [2, 3] and by_position.broken == [0], "positions name the problems"
    with pytest.raises(ValueError, match="3 against 2 outcomes"):
        st.compare_outcomes([True] * 3, [True] * 2)


def test_trl_shaped_rewards(hf):
    completions = ["so #### 18", [{"role": "assistant", "content": "The answer is 17."}]]
    assert correctness_reward(["q1", "q2"], completions, answer=["18", "18"], info=[{}, {}]) == [1.0, 0.0]
    pre = perplexity_reward_under(hf)
    prompts = ["The capital of France is", "The capital of France is"]
    fact, nonsense = pre(prompts, [" Paris.", " purple elephant."], answer=["", ""])
    assert fact > nonsense
    assert fact == pytest.approx(perplexity_reward(hf.score(prompts[:1], [" Paris."])[0]), abs=1e-4)
