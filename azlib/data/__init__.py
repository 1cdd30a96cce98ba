"""Data: GSM8K (hub or local JSONL) and the embedded easy arithmetic task, one row schema.
Nothing here calls a model or scores an answer."""

from azlib.data.arithmetic import arithmetic_problems
from azlib.data.gsm8k import DataUnavailable, gold_answer, load_gsm8k
from azlib.data.rows import Row
from azlib.data.tasks import task_problems

__all__ = ["DataUnavailable", "Row", "arithmetic_problems", "gold_answer", "load_gsm8k", "task_problems"]
