"""Step checks (azlib.rewards.step_checks) on hand-made answers: each check's verdict and where it fails, the
ways numbers and operators are written, and linear time on a long line."""

import time

import pytest

from azlib.data import arithmetic_problems
from azlib.rewards.step_checks import (answer_passes, check_steps, equations, first_failure, problem_numbers,
                                       reference_values)

PROMPT = "Ava buys 7 bags of apples with 4 apples in each bag. She is given 45 more apples. How many apples?"
SOLUTION = "7 * 4 = 28\n28 + 45 = 73\n#### 73"


def verdicts(text, solution=SOLUTION):
    return [(s.arithmetic, s.traced, s.in_reference) for s in check_steps(text, PROMPT, solution)]


def test_a_right_chain_passes_every_check():
    steps = check_steps("She has 7 * 4 = 28 apples, then 28 + 45 = 73.\n#### 73", PROMPT, SOLUTION)
    assert [(s.equation.left, s.equation.op, s.equation.right, s.equation.result) for s in steps] == [
        ("7", "*", "4", "28"), ("28", "+", "45", "73")]
    assert all(answer_passes(steps, check) for check in ("arithmetic", "traced", "reference"))
    assert first_failure(steps, "reference") is None


def test_a_wrong_result_fails_before_the_result():
    text = "7 * 4 = 24\n24 + 45 = 69\n#### 69"
    steps = check_steps(text, PROMPT, SOLUTION)
    assert verdicts(text) == [(False, True, False), (True, True, False)]
    for check in ("arithmetic", "traced", "reference"):
        position, kind = first_failure(steps, check)
        assert (text[:position], kind) == ("7 * 4 = ", "result")


def test_a_wrong_operand_fails_the_traced_check_before_the_equation():
    text = "First, 7 * 4 = 28.\nThen 3 * 4 = 12.\n#### 12"
    steps = check_steps(text, PROMPT, SOLUTION)
    assert verdicts(text) == [(True, True, True), (True, False, False)]
    assert answer_passes(steps, "arithmetic") and not answer_passes(steps, "traced")
    position, kind = first_failure(steps, "traced")
    assert (text[:position], kind) == ("First, 7 * 4 = 28.\nThen ", "numbers")
    assert verdicts("7 * 4 = 28\n28 + 45 = 73") == [(True, True, True), (True, True, True)], "an earlier result counts"


def test_a_result_outside_the_reference_chain_fails_the_reference_check_before_the_equation():
    text = "7 + 4 = 11\n11 + 45 = 56\n#### 56"
    steps = check_steps(text, PROMPT, SOLUTION)
    assert verdicts(text) == [(True, True, False), (True, True, False)]
    assert answer_passes(steps, "traced") and not answer_passes(steps, "reference")
    assert first_failure(steps, "reference") == (0, "numbers")
    with pytest.raises(ValueError, match="reference"):
        check_steps(text, PROMPT)[0].passes("reference")


def test_no_equation_is_no_verified_answer():
    steps = check_steps("Ava has 73 apples.\n#### 73", PROMPT, SOLUTION)
    assert steps == [] and first_failure(steps, "reference") is None
    assert not any(answer_passes(steps, check) for check in ("arithmetic", "traced", "reference"))
    assert equations("2 + 3 + 4 = 9") == [], "a longer expression is not a binary step"
    assert equations("7 * 4\n= 28") == [], "an equation lies on one line"


@pytest.mark.parametrize("written, parsed", [
    ("7 x 4 = 28", ("7", "*", "4", "28")), ("7x4=28", ("7", "*", "4", "28")),
    ("7 \u00d7 4 = 28", ("7", "*", "4", "28")), ("28 \u00f7 4 = 7", ("28", "/", "4", "7")),
    ("7 * 4 = 28", ("7", "*", "4", "28")), ("28/4=7", ("28", "/", "4", "7")),
    ("1,200 + 34 = 1,234", ("1200", "+", "34", "1234")), ("$12.50 * 2 = $25.00", ("12.5", "*", "2", "25")),
    ("-5 + 2 = -3", ("-5", "+", "2", "-3")), ("5 -3 = 2", ("5", "-", "3", "2")),
    ("0.5 * 4 = 2", ("0.5", "*", "4", "2")),
])
def test_how_numbers_and_operators_are_written(written, parsed):
    [e] = equations(written)
    assert (e.left, e.op, e.right, e.result) == parsed and e.arithmetic


@pytest.mark.parametrize("written, right", [("10 / 3 = 3.33", True), ("10 / 3 = 3.3", True), ("10 / 3 = 3", False),
                                            ("10 / 0 = 0", False), ("1,20 + 1 = 121", False), ("0.1 + 0.2 = 0.3", True),
                                            ("3 - 5 = -2", True), ("3 - 5 = 2", False)])
def test_arithmetic_is_exact_and_a_quotient_may_be_rounded_to_the_decimals_shown(written, right):
    assert equations(written)[-1].arithmetic == right  # "1,20 + 1": not a thousands group, the step is 20 + 1


def test_the_reference_chain_of_both_tasks():
    row = arithmetic_problems(1, seed=3, steps=(3,))[0]
    lines = row["info"]["solution"].splitlines()[:-1]
    assert reference_values(row["info"]["solution"]) == {line.split(" = ")[1] for line in lines} | {row["answer"]}
    gsm8k = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert reference_values(gsm8k) == {"24", "72"}
    assert problem_numbers("She sold 1,234 clips to 48 friends in 2.5 days.") == {"1234", "48", "2.5"}


def test_a_long_line_is_checked_in_linear_time():
    def seconds(n):
        text = ("12 + 3 = 15, 1,234 x 2 = 2468 and -7 - 1 = -9 " * n)[:n] + "9" * n + ",123" * (n // 8)
        start = time.perf_counter()
        steps = check_steps(text, PROMPT, SOLUTION)
        first_failure(steps, "reference")
        return time.perf_counter() - start, len(steps)

    seconds(10_000)  # warm
    short, found = min(seconds(10_000) for _ in range(3))
    long, found_long = min(seconds(100_000) for _ in range(3))
    assert found_long > 9 * found > 0
    assert long < 30 * short, f"10x the text took {long / short:.0f}x the time: not linear"


def test_precision_and_recall_per_chain_length():
    from azlib.step_check_precision import check_answer, precision_table

    one = {"prompt": "Ava has 7 apples. She gets 4 more apples.", "answer": "11",
           "info": {"solution": "7 + 4 = 11\n#### 11", "steps": 1}}
    two = {"prompt": PROMPT, "answer": "73", "info": {"solution": SOLUTION, "steps": 2}}
    answers = [check_answer("7 + 4 = 11\n#### 11\n", one),  # right, passes every check
               check_answer("7 + 4 = 12\n#### 12\n", one),  # wrong arithmetic: fails every check
               check_answer("#### 11\n", one),  # right without an equation: passes none (recall lost)
               check_answer("7 * 4 = 28\n#### 28\n", two),  # wrong, yet every step passes: precision lost
               check_answer("7 * 4 = 28\n28 + 45 = 73\n#### 73\n", two),
               check_answer("7 * 4 = 28\n28 + 45 = 73", two, finished=False)]  # cut: right, not "complete"
    cell = {(r["steps"], r["check"]): r for r in precision_table(answers)}
    assert [a.correct for a in answers] == [True, False, True, False, True, True]
    def read(steps, check, *keys):
        return tuple(cell[steps, check][k] for k in keys)

    assert read(1, "reference", "passed", "precision", "recall") == (1, 1.0, 0.5)
    assert read(2, "reference", "passed", "true_positives") == (3, 2)
    assert read(2, "complete", "passed", "precision", "recall") == (1, 1.0, 0.5)
    assert cell["all", "arithmetic"]["answers"] == 6 and cell["all", "arithmetic"]["equations_right"] == 6
    low, high = cell[2, "reference"]["precision_ci"]
    assert low < 2 / 3 < high
    assert precision_table([answers[1]])[0]["precision"] is None, "nothing passed: no precision"


@pytest.mark.parametrize("text, whole", [
    ("7 * 4 = 28\n28 + 45 = 73\n#### 73", True),
    ("4 x 7 = 28, then 45 + 28 = 73.\n#### 73", True),
    ("7 * 4 = 28\n7 * 45 = 315\n#### 315", False),  # the second step leaves the chain
    ("7 * 4 = 28\n#### 28", False),  # a step missing: 45 never used
    ("7 * 4 = 28\n28 + 4 = 32\n#### 32", False),  # 4 used twice, 45 never
    ("7 * 4 = 28\n28 + 45 = 73\n#### 74", False),  # the final answer is not the last result
    ("7 * 4 = 29\n29 + 45 = 74\n#### 74", False),
])
def test_a_whole_chain_from_the_text_alone(text, whole):
    from azlib.rewards.step_checks import answer_complete

    assert answer_complete(check_steps(text, PROMPT), PROMPT, text) == whole
