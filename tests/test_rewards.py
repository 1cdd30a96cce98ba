"""Answer extraction, correctness and the reward components, against hand-computed values."""

import math
import signal
from dataclasses import fields

import pytest

from azlib.data import load_gsm8k
from azlib.rewards import (
    RewardWeights, accumulated_pre, answer_reward, combined_reward, direction_bonus, extract_answer, hard_reward, is_correct,
    length_penalty, normalize_number, perplexity_reward,
)


def test_gold_extraction_is_exact_on_every_gsm8k_reference_solution(gsm8k_dir):
    rows = load_gsm8k(str(gsm8k_dir), "train") + load_gsm8k(str(gsm8k_dir), "test")
    assert len(rows) == 8792
    wrong = [r["info"]["id"] for r in rows if extract_answer(r["info"]["solution"]) != r["answer"]]
    assert wrong == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18 every day.\n#### 18", "18"),
        ("So the total is 5 + 6 = 11.\n#### 11.00", "11"),
        ("#### 1,234", "1234"),
        ("#### $ 42", "42"),
        ("####**7**", "7"),
        ("The answer is 72.", "72"),
        ("The answer is: **$1,080.50**", "1080.5"),
        ("Final answer: -3", "-3"),
        ("FINAL ANSWER = 0.25", "0.25"),
        ("so we get \\boxed{ 15 } as the result", "15"),
        ("She has 3 apples, then 5, and 8 in the end.", "8"),
        ("It grows by 50%.", "50"),
        ("#### 10\nActually, the answer is 12.", "10"),  # the marker wins over later phrases
        ("answer is 4 ... the answer is 5", "5"),  # the last phrase wins
        ("The answer is x. In total 7", "7"),
        ("no digits at all", None),
        ("", None),
        ("1,000,000 people", "1000000"),
        ("-0.0", "0"),
        (".5 of a pie", "0.5"),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_normalize_and_compare_numbers():
    assert normalize_number("$1,234.50") == "1234.5"
    assert normalize_number("007") == "7"
    assert normalize_number("abc") is None and normalize_number("") is None
    assert is_correct("18.00", "18") and is_correct("1,000", "1000") and is_correct("-5", "-5.0")
    assert not is_correct("18.5", "18") and not is_correct(None, "18") and not is_correct("5", "-5")


def test_pathological_inputs_finish_quickly():
    """Liveness, not speed: each would take minutes with a backtracking regex; 10 s is a hang."""
    def hang(signum, frame):
        raise TimeoutError("extract_answer hung")

    signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        for text in ("1" * 100_000, "1," * 50_000, "answer is " * 10_000, "#### " * 20_000, "-" * 100_000,
                     "$" * 100_000 + "x", "9." * 50_000, ("answer is" + " *" * 1000) * 50):
            extract_answer(text)
        assert extract_answer("x " * 50_000 + "#### 3") == "3"
    finally:
        signal.alarm(0)


def test_reward_components_by_hand():
    assert hard_reward("... #### 18", "18") == 1.0 and hard_reward("#### 17", "18") == 0.0
    assert perplexity_reward([-1.0, -2.0, -3.0]) == -2.0 and perplexity_reward([]) == 0.0
    assert perplexity_reward([-0.5] * 4) == pytest.approx(-math.log(math.exp(0.5)))  # -log(perplexity)
    assert accumulated_pre([-1.0, -2.0, -4.0], 0.5) == pytest.approx(-1.0 - 1.0 - 1.0)
    assert length_penalty(12, 0.01) == pytest.approx(-0.12)
    assert direction_bonus("1101", 0.1, 0.05) == pytest.approx(0.3 - 0.05)


def test_combined_reward_uses_the_reference_defaults():
    w = RewardWeights()
    assert (w.hre, w.pre, w.gamma, w.length_penalty, w.right_bonus, w.wrong_penalty) == (0.4, 0.6, 0.95, 0.01, 0.1, 0.05)
    steps = [perplexity_reward(lp) for lp in ([-1.0, -1.0], [-2.0], [-0.5, -1.5])]
    r = combined_reward("12 + 7 = 19\n#### 19", "19", steps, "110")
    acc = -1.0 + 0.95 * -2.0 + 0.95**2 * -1.0
    assert r.hre == 1.0 and r.accumulated_pre == pytest.approx(acc)
    assert r.length_penalty == pytest.approx(-0.03) and r.direction_bonus == pytest.approx(0.15)
    assert r.total == pytest.approx(0.4 + 0.6 * acc - 0.03 + 0.15)
    not_terminal = combined_reward("#### 19", "19", steps, "110", terminal=False)
    assert not_terminal.hre == 0.0 and not_terminal.total == pytest.approx(r.total - 0.4)
    assert [f.name for f in fields(r)] == ["hre", "accumulated_pre", "length_penalty", "direction_bonus", "total"], \
        "the step log's reward/<part> keys"


def test_under_the_default_reward_every_correct_finished_answer_outranks_the_rest():
    gold = "19"
    answers = [  # (text, finished, step PREs)
        ("12 + 7 = 19\n#### 19", True, [-0.7, -0.7, -0.7]),  # correct, finished, unlikely
        ("19", True, [-3.0]),  # correct, finished, very unlikely
        ("12 + 7 = 18\n#### 18", True, [-0.1, -0.1]),  # wrong but likely
        ("12 + 7 = 19", False, [-0.05]),  # the right number, cut at the token limit
        ("Let me think", False, [-0.02]),  # a likely fragment
        ("#### 19\n#### 19\n#### 19", False, [-0.3] * 3),  # right number, never finished
    ]
    scored = [(text, finished, answer_reward(text, gold, finished=finished, step_pres=pres))
              for text, finished, pres in answers]
    good = [r.total for t, f, r in scored if f and r.hre == 1.0]
    rest = [r.total for t, f, r in scored if not (f and r.hre == 1.0)]
    assert len(good) == 2 and min(good) > max(rest)
    seed = [answer_reward(t, gold, finished=f, step_pres=p, kind="combined").total for t, f, p in answers]
    assert seed[4] > seed[0], "the original system's sum ranks a likely fragment above a correct answer (why it failed)"
    with pytest.raises(ValueError, match="reward kind"):
        answer_reward("1", "1", finished=True, kind="hre")
