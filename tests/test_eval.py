"""Evaluation end to end on the real model, lm-eval's answer filters, Wilson CIs, McNemar."""

import math

import pytest

from azlib import evaluation as ev
from azlib.data import arithmetic_problems, load_gsm8k
from azlib.models import make_backend
from azlib.rewards import correctness_reward, perplexity_reward, perplexity_reward_under


@pytest.fixture(scope="module")
def hf():
    return make_backend("hf", batch_size=8)


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
    assert "chat-0shot [exact]" in result.summary() and "seed 0" in result.summary() and "n" in result.metrics()
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


def test_wilson_interval_by_hand():
    lo, hi = ev.wilson_interval(18, 1319)
    p, z, n = 18 / 1319, 1.96, 1319
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert ev.wilson_interval(0, 10)[0] == 0.0 and ev.wilson_interval(10, 10)[1] == 1.0
    assert ev.wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_mcnemar_exact_by_hand():
    assert ev.mcnemar_exact(0, 0) == 1.0
    assert ev.mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # 2 * 0.5^5
    assert ev.mcnemar_exact(1, 9) == pytest.approx(2 * (1 + 10) / 1024)
    assert ev.mcnemar_exact(9, 1) == ev.mcnemar_exact(1, 9)
    assert ev.mcnemar_exact(6, 6) == 1.0


def test_compare_pairs_records_by_id():
    a = [{"id": i, "correct": c} for i, c in enumerate([True, True, False, False, True, False])]
    b = [{"id": i, "correct": c} for i, c in reversed(list(enumerate([True, False, True, True, True, False])))]
    cmp = ev.compare(a, b)
    assert (cmp.both, cmp.only_a, cmp.only_b, cmp.neither) == (2, 1, 2, 1)
    assert cmp.fixed == [2, 3] and cmp.broken == [1]
    assert cmp.p_value == pytest.approx(ev.mcnemar_exact(1, 2)) == 1.0
    assert "exact McNemar p = 1" in cmp.table("base", "trained")
    lm = [{"id": 0, "correct": {"strict-match": False, "flexible-extract": True}}]
    assert ev.compare(lm, lm).neither == 1, "lm-eval records compare on strict-match, the headline"
    with pytest.raises(ValueError, match="different problems"):
        ev.compare(a, b[:-1])


def test_trl_shaped_rewards(hf):
    completions = ["so #### 18", [{"role": "assistant", "content": "The answer is 17."}]]
    assert correctness_reward(["q1", "q2"], completions, answer=["18", "18"], info=[{}, {}]) == [1.0, 0.0]
    pre = perplexity_reward_under(hf)
    prompts = ["The capital of France is", "The capital of France is"]
    fact, nonsense = pre(prompts, [" Paris.", " purple elephant."], answer=["", ""])
    assert fact > nonsense
    assert fact == pytest.approx(perplexity_reward(hf.score(prompts[:1], [" Paris."])[0]), abs=1e-4)
