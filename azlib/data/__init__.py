"""Data: GSM8K (hub or local JSONL) and the embedded easy arithmetic task, one row schema.
Nothing here calls a model or scores an answer."""

from azlib.data.arithmetic import arithmetic_problems
from azlib.data.gsm8k import DataUnavailable, easiest_by_steps, gold_answer, load_gsm8k, solution_steps
from azlib.data.rows import Row
from azlib.data.tasks import task_problems

__all__ = ["DataUnavailable", "Row", "arithmetic_problems", "easiest_by_steps", "gold_answer", "load_gsm8k",
           "solution_steps", "task_problems"]
