"""GSM8K as rows of the kit's schema, from a local JSONL folder (the kit's copy by default) or, when asked, the Hugging
Face hub; its rows ranked by steps. Reads and normalises only; answer extraction lives in azlib.rewards."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from azlib.paths import REPO_ROOT, repo_path
from azlib.data.rows import Row

HUB_NAME, HUB_CONFIG = "openai/gsm8k", "main"
# the dataset repo's file of each split, as `datasets` downloads it into the Hugging Face cache
HUB_FILES = {split: f"{HUB_CONFIG}/{split}-00000-of-00001.parquet" for split in ("train", "test")}
# The kit's copy, where "auto" reads it (beside the repo, never inside it).
LOCAL_DEFAULT = REPO_ROOT.parent / "shared" / "data" / "gsm8k"
Split = Literal["train", "test"]
GSM8K_TEST_PROBLEMS = 1_319  # the test split's size


class DataUnavailable(RuntimeError):
    """The requested dataset source cannot be read; the message names it and the alternatives."""


def gold_answer(solution: str) -> str:
    """The reference number of a GSM8K solution: text after the last '####', commas removed."""
    return solution.split("####")[-1].strip().replace(",", "")


def solution_steps(row: Row) -> int:
    """Calculation steps of a GSM8K row: the `<<...>>` calculator annotations of its reference solution, or,
    where it has none, the non-empty lines before '####'."""
    solution = row["info"]["solution"]
    annotations = len(re.findall(r"<<[^>]*>>", solution))
    return annotations or sum(1 for line in solution.split("####")[0].splitlines() if line.strip())


def easiest_by_steps(rows: list[Row], n: int, max_steps: int | None = None) -> list[Row]:
    """The `n` rows with the fewest solution steps (fewer if fewer have at most `max_steps`), ties in file
    order: GSM8K's easiest problems, a transfer set for what was learned on short arithmetic chains.
    Each returned row is a copy whose info gains "steps"."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got n={n}")
    counted = [(solution_steps(row), row) for row in rows]
    if max_steps is not None:
        counted = [(steps, row) for steps, row in counted if steps <= max_steps]
    easiest = sorted(counted, key=lambda pair: pair[0])[:n]  # sorted is stable: ties keep file order
    return [{**row, "info": {**row["info"], "steps": steps}} for steps, row in easiest]


def to_rows(records: list[dict], split: str) -> list[Row]:
    return [
        {
            "prompt": r["question"],
            "answer": gold_answer(r["answer"]),
            "info": {"id": f"gsm8k-{split}-{i}", "solution": r["answer"], "source": "gsm8k"},
        }
        for i, r in enumerate(records)
    ]


def load_local(directory: str | Path, split: Split) -> list[Row]:
    path = repo_path(directory) / f"{split}.jsonl"
    if not path.is_file():
        raise DataUnavailable(f"GSM8K {split} split not found: {path} does not exist")
    records = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise DataUnavailable(f"{path}, line {n}: not JSON ({err})") from None
    if any({"question", "answer"} - r.keys() for r in records):
        raise DataUnavailable(f"{path}: every line needs 'question' and 'answer'")
    return to_rows(records, split)


def load_hub(split: Split) -> list[Row]:
    try:
        import datasets

        records = datasets.load_dataset(HUB_NAME, HUB_CONFIG, split=split)
    except Exception as err:  # offline, no such dataset, auth: all mean "not from the hub"
        raise DataUnavailable(f"GSM8K could not be loaded from the hub ({HUB_NAME}, {HUB_CONFIG}): {err}") from err
    return to_rows(list(records), split)


def load_gsm8k(source: str, split: Split = "test", limit: int | None = None) -> list[Row]:
    """source: "auto" (the kit's copy, LOCAL_DEFAULT), a local folder holding {train,test}.jsonl, or "hub" (the
    only source that downloads). Raises DataUnavailable naming the missing file and the alternatives."""
    if source == "hub":
        rows = load_hub(split)
    elif source == "auto":
        if not (LOCAL_DEFAULT / f"{split}.jsonl").is_file():
            raise DataUnavailable(f"GSM8K {split} split not found: the kit's copy {LOCAL_DEFAULT / f'{split}.jsonl'} "
                                  "does not exist; set gsm8k to a folder holding train.jsonl and test.jsonl, or to "
                                  "'hub' to download it")
        rows = load_local(LOCAL_DEFAULT, split)
    else:
        rows = load_local(source, split)
    return rows[:limit] if limit is not None else rows
