"""A notebook's task as rows: GSM8K from its source, or the easy arithmetic problems, and when GSM8K
cannot be read, arithmetic instead with a note saying why (where the run allows it) or an error."""

from __future__ import annotations

from typing import Literal

from azlib.data.arithmetic import arithmetic_problems
from azlib.data.gsm8k import DataUnavailable, Split, load_gsm8k
from azlib.data.rows import Row


def task_problems(task: Literal["arithmetic", "gsm8k"], gsm8k: str, split: Split, n: int, *, seed: int,
                  fallback: bool, steps: tuple[int, ...] = (1, 2)) -> tuple[list[Row], str]:
    """(the first `n` rows of the task, a note: "" or why GSM8K was replaced by arithmetic problems).
    fallback: an unreadable GSM8K is replaced (with the note), else DataUnavailable naming the source."""
    if task == "gsm8k":
        try:
            return load_gsm8k(gsm8k, split, limit=n), ""
        except DataUnavailable as err:
            if not fallback:
                raise DataUnavailable(f"{err} (gsm8k_fallback is off: the run stops rather than train on "
                                      "arithmetic problems)") from err
            return arithmetic_problems(n, seed=seed, steps=steps), f"GSM8K unavailable, using arithmetic problems: {err}"
    return arithmetic_problems(n, seed=seed, steps=steps), ""
