"""Step checks: every written equation `a op b = c` of an answer, found and judged (arithmetic, traced, or in the
reference chain) by pure string work in linear time. Never evaluates model text; scores no answer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, get_args

from azlib.rewards.answers import extract_answer, normalize_number
from azlib.settings import StepCheckKind

STEP_CHECKS = get_args(StepCheckKind)
# the symbols an operator is written with (the letter x, standing alone between numbers, is a times sign too)
OPERATORS = {"+": "+", "-": "-", "*": "*", "\u00d7": "*", "\u00b7": "*", "\u22c5": "*", "/": "/", "\u00f7": "/"}
MAX_DIGITS = 30  # a number with more digits is no step of a word problem: its equation fails (and stays linear)
_SPACE = " \t"  # an equation lies on one line


@dataclass(frozen=True)
class Equation:
    """One written `a op b = c`, its numbers normalised ('1,234.50' -> '1234.5'); `start`, `result_start` and
    `end` are character positions in the text (the equation's first character, its result's first, and one
    past its last)."""

    left: str
    op: str  # one of + - * /
    right: str
    result: str
    start: int
    result_start: int
    end: int

    @property
    def arithmetic(self) -> bool:
        """Whether `left op right` is `result` exactly, or rounded to the decimals the result shows."""
        a, b, c = (_fraction(x) for x in (self.left, self.right, self.result))
        if a is None or b is None or c is None or (self.op == "/" and b == 0):
            return False
        value = a + b if self.op == "+" else a - b if self.op == "-" else a * b if self.op == "*" else a / b
        if value == c:
            return True
        decimals = len(self.result.partition(".")[2])
        return self.op == "/" and decimals > 0 and round(value, decimals) == c


@dataclass(frozen=True)
class Step:
    """An equation with each check's verdict; `failure` says where a fork would redraw it: before the result for
    a wrong result, before the equation for a wrong choice of numbers."""

    equation: Equation
    arithmetic: bool
    traced: bool
    in_reference: bool | None  # None: no reference given

    def passes(self, check: StepCheckKind) -> bool:
        if check not in STEP_CHECKS:
            raise ValueError(f"check must be one of {STEP_CHECKS}, got {check!r}")
        if check == "arithmetic":
            return self.arithmetic
        if check == "traced":
            return self.arithmetic and self.traced
        if self.in_reference is None:
            raise ValueError("the reference check needs the reference solution")
        return self.arithmetic and self.in_reference

    def failure(self, check: StepCheckKind) -> tuple[int, Literal["result", "numbers"]] | None:
        """(character position, what failed) under `check`, or None when the step passes."""
        if self.passes(check):
            return None
        if not self.arithmetic:
            return self.equation.result_start, "result"
        return self.equation.start, "numbers"


def _fraction(number: str) -> Fraction | None:
    digits = number.lstrip("-").replace(".", "")
    return None if len(digits) > MAX_DIGITS else Fraction(number)


def _tokens(text: str) -> list[tuple[str, str, int, int]]:
    """(kind, value, start, end) of the text's numbers ("num", normalised), operators ("op"), equals signs
    ("=") and anything else ("other", a line end too; whitespace between tokens is skipped). One pass: every
    character is read a bounded number of times. A '-' directly before a digit is a sign unless a number stands
    just before it ("5 -3" is a subtraction, "= -3" a negative result)."""
    out: list[tuple[str, str, int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _SPACE or ch == "$":
            i += 1
            continue
        if ch.isdigit() or (ch == "-" and i + 1 < n and text[i + 1].isdigit() and (not out or out[-1][0] != "num")):
            start, i = i, i + 1
            while i < n and text[i].isdigit():
                i += 1
            while text.startswith(",", i) and len(group := text[i + 1:i + 4]) == 3 and group.isdigit() \
                    and not (i + 4 < n and text[i + 4].isdigit()):
                i += 4  # thousands groups: ',' and exactly three digits
            if i + 1 < n and text[i] == "." and text[i + 1].isdigit():
                i += 1
                while i < n and text[i].isdigit():
                    i += 1
            out.append(("num", normalize_number(text[start:i]) or "0", start, i))
        elif ch.isalpha():
            start = i
            while i < n and text[i].isalpha():
                i += 1
            word = text[start:i]
            out.append(("op", "*", start, i) if word in ("x", "X") else ("other", word, start, i))
        else:
            kind = "op" if ch in OPERATORS else "=" if ch == "=" else "other"
            out.append((kind, OPERATORS.get(ch, ch), i, i + 1))
            i += 1
    return out


def equations(text: str) -> list[Equation]:
    """Every `a op b = c` written in the text, in order: two numbers and one operator before '=' and a number
    after it, on one line. A longer expression ('2 + 3 + 4 = 9') is not a binary step and is skipped; a chained
    one ('3 + 4 = 7 - 2 = 5') gives both of its steps."""
    tokens, out = _tokens(text), []
    for k in range(len(tokens) - 4):
        (ka, a, start, _), (ko, op, _, _), (kb, b, _, _), (ke, _, _, _), (kc, c, c_start, end) = tokens[k:k + 5]
        if (ka, ko, kb, ke, kc) != ("num", "op", "num", "=", "num"):
            continue
        if k and tokens[k - 1][0] == "op":
            continue
        out.append(Equation(a, op, b, c, start, c_start, end))
    return out


def _numbers(text: str) -> list[str]:
    return [value for kind, value, _, _ in _tokens(text) if kind == "num"]


def problem_numbers(prompt: str) -> set[str]:
    """The numbers the problem's text states, normalised."""
    return set(_numbers(prompt))


def reference_values(solution: str) -> set[str]:
    """The values of a reference solution's chain: its equations' results and its final answer."""
    values = {e.result for e in equations(solution)}
    final = extract_answer(solution)
    return values | ({final} if final is not None else set())


def check_steps(text: str, prompt: str, solution: str | None = None) -> list[Step]:
    """Each equation of `text` with its verdicts: arithmetic; traced (both operands among the problem's numbers
    and the results written before it); in the reference chain (None without a `solution`: the arithmetic task's
    `info.solution` lines, GSM8K's with its `<<48/2=24>>` marks). The first two read the text alone (a test-time
    verifier), the third the reference (a training-time one)."""
    known, values = problem_numbers(prompt), None if solution is None else reference_values(solution)
    steps = []
    for e in equations(text):
        steps.append(Step(e, e.arithmetic, e.left in known and e.right in known,
                          None if values is None else e.result in values))
        known.add(e.result)
    return steps


def first_failure(steps: list[Step], check: StepCheckKind) -> tuple[int, Literal["result", "numbers"]] | None:
    """Where the first step that fails `check` fails (its `Step.failure`), or None when every step passes."""
    for step in steps:
        failed = step.failure(check)
        if failed is not None:
            return failed
    return None


def answer_passes(steps: list[Step], check: StepCheckKind) -> bool:
    """The check as a verifier of a whole answer: it wrote at least one equation and every one passes."""
    return bool(steps) and all(step.passes(check) for step in steps)


def answer_complete(steps: list[Step], prompt: str, text: str) -> bool:
    """A whole answer's chain read from its text alone, as a chain of the arithmetic task is written: every step
    arithmetic; each step after the first uses the previous result; the other operands are the problem's numbers,
    each used as many times as the problem states it; the final answer is the last step's result."""
    if not steps or not all(step.arithmetic for step in steps):
        return False
    stated, used = Counter(_numbers(prompt)), Counter()
    for i, step in enumerate(steps):
        operands = [step.equation.left, step.equation.right]
        if i:
            previous = steps[i - 1].equation.result
            if previous not in operands:
                return False
            operands.remove(previous)
        used.update(operands)
    return used == stated and extract_answer(text) == steps[-1].equation.result
