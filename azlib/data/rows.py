"""The one row schema of the kit: {"prompt", "answer", "info"} for every task and dataset.
A type only; loaders and generators live in their own modules."""

from __future__ import annotations

from typing import Any, TypedDict


class Row(TypedDict):
    prompt: str  # the question, as a user would ask it
    answer: str  # the gold final number, normalised (no commas); compare with azlib.rewards
    info: dict[str, Any]  # id, reference solution, source, and task-specific extras
