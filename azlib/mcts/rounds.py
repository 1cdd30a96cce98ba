"""AlphaZero's rounds, shared by the games: each round the acting net plays (self-play through azlib.mcts.selfplay,
or a baseline's sampling), what it played joins a replay window of the latest rounds, and the learner updates on the
window (through azlib.mcts.learn). Tic-tac-toe (azlib.games.tictactoe_alphazero: a window of 20 rounds, the trained
net kept only if it wins an arena) and Countdown (azlib.games.countdown.arms: a window of one round, every arm's
round at a budget of generated characters) run through this one loop."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

Play = Callable[[], tuple[list[Any], dict]]  # one round's play -> its examples and the numbers to log
Learn = Callable[[list[Any]], dict]  # the replay window's examples, oldest round first -> the numbers to log
Measure = Callable[[int], dict]  # the round's number -> numbers to log that are not part of the loop's time


def run_rounds(count: int, play: Play, learn: Learn, window: int = 1, measure: Measure | None = None,
               progress=None) -> list[dict]:
    """`count` rounds of play -> replay window (the examples of the latest `window` rounds) -> learn. A row per
    round: its number (`iteration`), what play and learn logged, `seconds` (the loop's own time so far), then what
    `measure` returns (a grade or a test: measured, not part of the loop's time). `progress` (a tqdm bar) is updated
    once a round."""
    replay: deque[list[Any]] = deque(maxlen=window)
    history, seconds = [], 0.0
    for iteration in range(1, count + 1):
        started = time.perf_counter()
        examples, played = play()
        replay.append(examples)
        learned = learn([example for examples in replay for example in examples])
        seconds += time.perf_counter() - started
        row = {"iteration": iteration, **played, **learned, "seconds": seconds}
        history.append(row | (measure(iteration) if measure is not None else {}))
        if progress is not None:
            progress.update(1)
    return history
