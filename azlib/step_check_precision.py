"""How good each step check (azlib.rewards.step_checks) is as a verifier of whole answers: its precision and recall
against the final answer's correctness, per chain length, on recorded answers. Reads answers; generates nothing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Sequence

from azlib.data.rows import Row
from azlib.statistics import wilson_interval
from azlib.rewards import complete_answer, extract_answer, is_correct
from azlib.rewards.step_checks import STEP_CHECKS, answer_complete, answer_passes, check_steps

ANSWER_CHECKS = (*STEP_CHECKS, "complete")


@dataclass(frozen=True)
class CheckedAnswer:
    """One answer with its chain length, its correctness and each check's verdict on it."""

    steps: int  # the problem's chain length (the reference solution's equations)
    correct: bool
    equations: int
    equations_right: int  # arithmetic exact
    passes: dict[str, bool]  # check -> the answer passes it


def check_answer(text: str, row: Row, finished: bool = True) -> CheckedAnswer:
    """An answer as training scores it (cut at its answer line), checked against its problem `row`."""
    text, finished = complete_answer(text, finished)
    steps = check_steps(text, row["prompt"], row["info"]["solution"])
    passes = {c: answer_passes(steps, c) for c in STEP_CHECKS}
    passes["complete"] = finished and answer_complete(steps, row["prompt"], text)
    return CheckedAnswer(row["info"]["steps"], is_correct(extract_answer(text), row["answer"]), len(steps),
                         sum(s.arithmetic for s in steps), passes)


def check_records(records: Iterable[dict], rows: Sequence[Row]) -> list[CheckedAnswer]:
    """Per-problem evaluation records (azlib.evaluation: `id`, `output`, `finish_reason`) checked against the rows
    they answered, matched by id."""
    by_id = {row["info"]["id"]: row for row in rows}
    out = []
    for record in records:
        if record["id"] not in by_id:
            raise ValueError(f"record {record['id']!r} answers no given problem")
        out.append(check_answer(record["output"], by_id[record["id"]], record.get("finish_reason") == "stop"))
    return out


def precision_table(answers: Sequence[CheckedAnswer], checks: Sequence[str] = ANSWER_CHECKS) -> list[dict]:
    """Per chain length (and "all") and check: answers, right ones, the share of written equations that are
    arithmetically right, answers passing, precision and recall with 95% Wilson intervals (precision is None
    when nothing passes, recall when nothing is right). Precision: of the answers that pass, the share that are
    right (what a search that trusts the check keeps); recall: of the right answers, the share that pass (what it
    loses)."""
    groups: dict[object, list[CheckedAnswer]] = defaultdict(list)
    for a in answers:
        groups[a.steps].append(a)
    groups["all"] = list(answers)
    rows = []
    for steps, group in sorted(groups.items(), key=lambda kv: (kv[0] == "all", str(kv[0]))):
        right = sum(a.correct for a in group)
        written = sum(a.equations for a in group)
        for check in checks:
            passed = sum(a.passes[check] for a in group)
            both = sum(a.passes[check] and a.correct for a in group)
            rows.append({"steps": steps, "check": check, "answers": len(group), "right": right,
                         "equations": written, "equations_right": sum(a.equations_right for a in group),
                         "passed": passed, "true_positives": both,
                         "precision": both / passed if passed else None,
                         "precision_ci": wilson_interval(both, passed) if passed else None,
                         "recall": both / right if right else None,
                         "recall_ci": wilson_interval(both, right) if right else None})
    return rows
