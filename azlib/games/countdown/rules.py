"""Countdown's exact rules (Stream of Search, Gandhi et al. 2024): states, moves applied or refused, the exact oracle
and solver, and the one text format and parser of a written move. Plain Python, no model."""

from __future__ import annotations

import itertools
import random
import re
from functools import lru_cache
from typing import NamedTuple

OPERATORS = "+-*/"
MOVE_END = "="  # the model writes `a op b=`; the rules write the rest of the line
# One written move: two non-negative integers of at most 6 digits around one operator, nothing else.
MOVE_PATTERN = re.compile(r"([0-9]{1,6})([-+*/])([0-9]{1,6})")
MAX_MOVE_CHARS = 14  # the longest line MOVE_PATTERN accepts, plus its end mark: a longer line is refused unread


class State(NamedTuple):
    """The target and the numbers left, in the rules' order: a move's two operands removed, its result appended (as
    Stream of Search's `countdown.py` does). Solved when the one number left is the target."""

    target: int
    numbers: tuple[int, ...]  # the numbers left, in the rules' order

    @property
    def finished(self) -> bool:
        return len(self.numbers) <= 1

    @property
    def solved(self) -> bool:
        return self.numbers == (self.target,)

    @property
    def position(self) -> tuple[int, tuple[int, ...]]:
        """The state whatever the order of its numbers: lines that reach one position (3+4= and 4+3=) lead to the
        same game from there."""
        return self.target, tuple(sorted(self.numbers))


class Move(NamedTuple):
    a: int
    op: str
    b: int

    def __str__(self) -> str:
        return f"{self.a}{self.op}{self.b}"


def result(move: Move) -> int | None:
    """The move's value under the rules, or None where it is not a non-negative integer."""
    a, op, b = move
    if op == "+":
        return a + b
    if op == "*":
        return a * b
    if op == "-":
        return a - b if a >= b else None
    return a // b if b and a % b == 0 else None


def apply(state: State, move: Move) -> State | None:
    """The state after `move`, or None where the rules refuse it (an operand not left, a result that is not a
    non-negative integer, or a finished state)."""
    if state.finished:
        return None
    left = list(state.numbers)
    for operand in (move.a, move.b):
        if operand not in left:
            return None
        left.remove(operand)  # the first equal number: equal numbers are interchangeable
    value = result(move)
    return None if value is None else State(state.target, (*left, value))


def legal_moves(state: State) -> list[Move]:
    """Every legal move, each pair of positions once per operator and order (equal moves kept once)."""
    moves = dict.fromkeys(Move(state.numbers[i], op, state.numbers[j])
                          for i, j in itertools.permutations(range(len(state.numbers)), 2) for op in OPERATORS
                          if not state.finished)
    return [m for m in moves if result(m) is not None]


def _values(a: int, b: int) -> set[int]:
    """The values a legal move on a and b can make, in either order (a smaller minus a larger number and an inexact
    division are refused; 0 / a makes 0, as 0 * a does)."""
    high, low = max(a, b), min(a, b)
    values = {high + low, high * low, high - low}
    if low and high % low == 0:
        values.add(high // low)
    return values


@lru_cache(maxsize=1 << 21)
def reachable(numbers: tuple[int, ...]) -> frozenset[int]:
    """Every value the sorted numbers reach using each of them once: the same moves as legal_moves (the tests check
    the two against each other), without building states, since the oracle runs inside every search."""
    if len(numbers) == 1:
        return frozenset(numbers)
    out: set[int] = set()
    for i, j in itertools.combinations(range(len(numbers)), 2):
        rest = numbers[:i] + numbers[i + 1:j] + numbers[j + 1:]
        for value in _values(numbers[i], numbers[j]):
            out |= reachable(tuple(sorted((*rest, value)))) if rest else {value}
    return frozenset(out)


def solvable(state: State) -> bool:
    """The exact oracle: can the numbers left still reach the target? Memoised on the numbers alone (the sets of
    values they reach), so every target shares the work."""
    return state.target in reachable(tuple(sorted(state.numbers)))


def solve(state: State, rng: random.Random | None = None) -> list[Move] | None:
    """One solution (moves in order), or None: at each step the first move that keeps the state solvable (by the
    oracle), the legal moves taken in order, or shuffled by `rng` (so that solutions vary)."""
    moves: list[Move] = []
    while not state.finished:
        candidates = legal_moves(state)
        if rng is not None:
            rng.shuffle(candidates)
        move = next((m for m in candidates if solvable(apply(state, m))), None)
        if move is None:
            return None
        moves.append(move)
        state = apply(state, move)
    return moves if state.solved else None


# -- the text a language model reads and writes ------------------------------------------------------------------
# A problem:  "3 8 11 5 -> 52\n".  A step: the model writes "8*5=", the rules write "40 (3 11 40)\n" (the result
# and the numbers left), or refuse the move and the episode ends as a loss.

def legal_lines(state: State) -> list[str]:
    """Every legal move as the model writes it, end mark included: what the engine offers when it masks."""
    return [f"{m}{MOVE_END}" for m in legal_moves(state)]


def problem_text(state: State) -> str:
    return f"{' '.join(map(str, state.numbers))} -> {state.target}\n"


def written_result(state_after: State) -> str:
    """What the rules write after a legal move's `=`: its result and the numbers left, then the line's end."""
    return f"{state_after.numbers[-1]} ({' '.join(map(str, state_after.numbers))})\n"


def parse_move(line: str) -> Move | None:
    """The move a written line names (`a op b`, the end mark already cut), or None: anything else is refused,
    never evaluated."""
    if len(line) > MAX_MOVE_CHARS:
        return None
    match = MOVE_PATTERN.fullmatch(line)
    return Move(int(match[1]), match[2], int(match[3])) if match else None


def step(state: State, line: str) -> State | None:
    """The state after a written line (`a op b`, without its end mark), or None where the rules refuse it."""
    move = parse_move(line)
    return None if move is None else apply(state, move)
