"""AlphaZero's rounds, shared by the games: play, keep a replay window of the latest rounds, learn on it, log a row.
Tic-tac-toe keeps 20 rounds and an arena; Countdown's arms one round each, at a budget of generated characters."""

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
