"""GSM8K loading (local real, hub unreachable) and the seeded arithmetic generator."""

import json
import re

import pytest

from azlib.data import DataUnavailable, arithmetic_problems, gold_answer, load_gsm8k
from azlib.data import gsm8k


def test_local_gsm8k_has_both_splits_in_the_kit_schema(gsm8k_dir):
    test, train = load_gsm8k(str(gsm8k_dir), "test"), load_gsm8k(str(gsm8k_dir), "train")
    assert (len(train), len(test)) == ((7473, 1319) if gsm8k_dir == gsm8k.LOCAL_DEFAULT else (20, 12))
    row = test[0]
    assert set(row) == {"prompt", "answer", "info"}
    assert row["answer"] == "18" and row["prompt"].startswith("Janet")
    assert row["info"]["id"] == "gsm8k-test-0" and "#### 18" in row["info"]["solution"]
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", r["answer"]) for r in train + test), "gold must be a bare number"


def test_relative_folder_resolves_from_the_repo_root_and_limit_applies():
    assert len(load_gsm8k("tests/fixtures/gsm8k", "test", limit=5)) == 5


def test_gold_answer_removes_commas():
    assert gold_answer("He pays 1,000 + 234 = 1,234\n#### 1,234") == "1234"


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(DataUnavailable, match=r"test split not found: .*missing/test.jsonl does not exist"):
        load_gsm8k(str(tmp_path / "missing"), "test")


def test_corrupt_jsonl_names_the_line(tmp_path):
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n{oops\n")
    with pytest.raises(DataUnavailable, match="line 2: not JSON"):
        load_gsm8k(str(tmp_path), "test")


def test_unreachable_hub_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-azlib-test-cache")
    with pytest.raises(DataUnavailable, match=r"could not be loaded from the hub \(openai/gsm8k, main\)"):
        load_gsm8k("hub", "test")


def test_auto_prefers_the_local_copy_then_the_hub(monkeypatch, tmp_path, gsm8k_dir):
    assert load_gsm8k("auto", "test", limit=1)[0]["info"]["id"] == "gsm8k-test-0"
    monkeypatch.setattr(gsm8k, "LOCAL_DEFAULT", tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-azlib-test-cache")
    with pytest.raises(DataUnavailable, match="no local copy at .* and GSM8K could not be loaded from the hub"):
        load_gsm8k("auto", "test")


def test_arithmetic_problems_are_seeded_and_correct():
    rows = arithmetic_problems(300, seed=3)
    assert rows == arithmetic_problems(300, seed=3)
    assert rows != arithmetic_problems(300, seed=4)
    assert {r["info"]["steps"] for r in rows} == {1, 2}
    assert len({r["info"]["operation"] for r in rows}) == 6
    for r in rows:
        work = r["info"]["solution"].split("\n#### ")[0]
        value = None
        for line in work.splitlines():  # re-check every step of the worked solution
            a, op, b, _, c = line.split()
            expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
            assert expected == int(c) >= 0
            value = c
        assert r["answer"] == value and r["info"]["solution"].endswith(f"#### {value}")
    one_step = arithmetic_problems(50, seed=0, steps=(1,))
    assert {r["info"]["steps"] for r in one_step} == {1}
    with pytest.raises(ValueError):
        arithmetic_problems(5, steps=(3,))
