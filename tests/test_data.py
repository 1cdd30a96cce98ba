"""GSM8K loading (local real, hub unreachable), its step counts, and the seeded arithmetic chain generator."""

import json
import re

import pytest

from azlib.data import (DataUnavailable, arithmetic_problems, easiest_by_steps, gold_answer, load_gsm8k,
                        solution_steps, task_problems)
from azlib.data import arithmetic, gsm8k


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


@pytest.fixture
def hub_offline(monkeypatch, tmp_path):
    """The hub unreachable and its caches empty, whatever the machine's network: set where huggingface_hub and
    datasets read them. Both read the environment once, at their first import (transformers' in an earlier test,
    often), so the variables alone came too late: each load then waited out the hub client's retries (23 s
    here, with no network) and would have downloaded GSM8K where a network is."""
    import datasets.config
    import huggingface_hub.constants

    for module, name, value in [(huggingface_hub.constants, "HF_HUB_OFFLINE", True),
                                (huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub")),
                                (datasets.config, "HF_HUB_OFFLINE", True),
                                (datasets.config, "HF_DATASETS_OFFLINE", True),
                                (datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")]:
        monkeypatch.setattr(module, name, value)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # and for whatever imports them later
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))


def test_unreachable_hub_is_a_clear_error(hub_offline):
    with pytest.raises(DataUnavailable, match=r"could not be loaded from the hub \(openai/gsm8k, main\)"):
        load_gsm8k("hub", "test")


@pytest.fixture
def no_network(monkeypatch, hub_offline):
    """The hub offline, and every connection or name lookup an error: a download fails the test at once."""
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"the network was used: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_auto_reads_the_kits_copy_and_never_the_hub(monkeypatch, tmp_path, gsm8k_dir, no_network):
    monkeypatch.setattr(gsm8k, "LOCAL_DEFAULT", gsm8k_dir)
    assert load_gsm8k("auto", "test", limit=1)[0]["info"]["id"] == "gsm8k-test-0"
    monkeypatch.setattr(gsm8k, "LOCAL_DEFAULT", tmp_path)
    missing = re.escape(str(tmp_path / "test.jsonl"))
    with pytest.raises(DataUnavailable, match=rf"the kit's copy {missing} does not exist; .* or to 'hub' to download"):
        load_gsm8k("auto", "test")


GSM8K_NOTEBOOKS = ("02_mcts_tree", "03_teacher_ensemble", "04_gsm8k_run", "05_base_vs_trained", "06_rlt_teachers",
                   "07_referee_rl")


@pytest.mark.parametrize("profile", [None, "cpu", "smoke"], ids=lambda p: p or "defaults")
@pytest.mark.parametrize("notebook", GSM8K_NOTEBOOKS)
def test_a_notebooks_defaults_read_local_data_only(notebook, profile, monkeypatch, tmp_path, gsm8k_dir, no_network):
    """At its parameters cell's defaults and in the cpu and smoke profiles, a notebook's data is the kit's GSM8K
    copy or the embedded arithmetic problems, with no network; without the copy, arithmetic with a note naming
    the missing file (the hub is `gsm8k = "hub"`, a parameter away)."""
    from azlib.lab import config
    from azlib.referee import load_corpus

    params, _ = config.resolve(config.NOTEBOOKS_DIR / f"{notebook}.ipynb", profile, tmp_path / "run")
    assert params.gsm8k == "auto" and params.gsm8k_fallback

    def source() -> tuple[str, str]:
        if notebook == "07_referee_rl":
            corpus, note = load_corpus(params.gsm8k, max_chars=10_000, max_rows=200, fallback=True)
            return corpus.source, note
        rows, note = task_problems(params.task, params.gsm8k, "train", 4, seed=0, fallback=True)
        return rows[0]["info"].get("source", "arithmetic"), note

    monkeypatch.setattr(gsm8k, "LOCAL_DEFAULT", gsm8k_dir)
    read, note = source()
    uses_gsm8k = notebook == "07_referee_rl" or params.task == "gsm8k"
    assert (read, note) == ("gsm8k" if uses_gsm8k else "arithmetic", "")
    monkeypatch.setattr(gsm8k, "LOCAL_DEFAULT", tmp_path / "absent")
    read, note = source()
    assert read == "arithmetic" and (not uses_gsm8k or str(tmp_path / "absent" / "train.jsonl") in note)


def test_an_unreachable_gsm8k_becomes_arithmetic_only_where_the_fallback_is_allowed(tmp_path, hub_offline):
    with pytest.raises(DataUnavailable, match=r"the hub \(openai/gsm8k, main\).*gsm8k_fallback is off"):
        task_problems("gsm8k", "hub", "train", 4, seed=0, fallback=False)
    with pytest.raises(DataUnavailable, match=r"not found: .*missing/train.jsonl does not exist.*gsm8k_fallback is off"):
        task_problems("gsm8k", str(tmp_path / "missing"), "train", 4, seed=0, fallback=False)
    rows, note = task_problems("gsm8k", "hub", "train", 4, seed=0, fallback=True)
    assert rows == arithmetic_problems(4, seed=0) and note.startswith("GSM8K unavailable, using arithmetic problems")
    assert task_problems("arithmetic", "hub", "train", 4, seed=0, fallback=False) == (rows, "")


def test_the_referee_corpus_falls_back_to_arithmetic_text_only_where_allowed(tmp_path):
    from azlib.referee import load_corpus

    with pytest.raises(DataUnavailable, match=r"missing/train.jsonl does not exist.*gsm8k_fallback is off"):
        load_corpus(str(tmp_path / "missing"), fallback=False)
    corpus, note = load_corpus(str(tmp_path / "missing"), max_chars=10_000, max_rows=200, fallback=True)
    assert corpus.source == "arithmetic" and note.startswith("GSM8K unavailable")


LINE = re.compile(r"(\d+) ([-+*]) (\d+) = (\d+)")
OPERATION = {"+": "add", "-": "sub", "*": "mul"}
WORDINGS = ("train", "transfer", "all")


@pytest.mark.parametrize("wording", WORDINGS)
def test_every_step_of_every_chain_checks_out(wording):
    rows = arithmetic_problems(500, seed=3, steps=(1, 2, 3, 4), wording=wording)
    assert {r["info"]["steps"] for r in rows} == {1, 2, 3, 4}
    for r in rows:
        info = r["info"]
        *work, last = info["solution"].split("\n")
        assert last == f"#### {r['answer']}"
        assert len(work) == info["steps"] and info["operation"].count("-") == info["steps"] - 1
        value, operands = None, []
        for line, operation in zip(work, info["operation"].split("-"), strict=True):
            a, op, b, c = LINE.fullmatch(line).groups()
            a, b, c = int(a), int(b), int(c)
            assert value is None or a == value, "each step starts from the previous result"
            assert OPERATION[op] == operation
            assert {"+": a + b, "-": a - b, "*": a * b}[op] == c and 0 < c < 1000
            operands += [a, b] if value is None else [b]
            value = c
        assert r["answer"] == str(value)
        assert [int(x) for x in re.findall(r"\d+", r["prompt"])] == operands, "the prompt states exactly these numbers"
        assert info["source"] == "arithmetic" and info["wording"] == wording
        assert len(info["templates"]) in (info["steps"] + 1, info["steps"] + 2), "an opening, one per step, a question"


def sentences(prompt):
    return re.split(r"(?<=[.?])\s+", prompt)


def skeleton(sentence):
    """A sentence with numbers, names and items masked: what its template contributes."""
    names = "|".join(name for name, _, _ in arithmetic.NAMES)
    items = "|".join(arithmetic.ITEMS)
    sentence = re.sub(rf"\b({names})\b", "NAME", re.sub(rf"\b({items})\b", "ITEM", sentence))
    return re.sub(r"\d+", "#", sentence)


def test_transfer_wordings_share_no_template_and_no_sentence_with_training():
    train = arithmetic_problems(2000, seed=5, steps=(1, 2, 3, 4), wording="train")
    transfer = arithmetic_problems(2000, seed=6, steps=(1, 2, 3, 4), wording="transfer")
    train_ids = {t for r in train for t in r["info"]["templates"]}
    transfer_ids = {t for r in transfer for t in r["info"]["templates"]}
    assert not train_ids & transfer_ids
    train_sentences, transfer_sentences = ({skeleton(s) for r in rows for s in sentences(r["prompt"])}
                                           for rows in (train, transfer))
    assert not train_sentences & transfer_sentences
    train_questions, transfer_questions = ({skeleton(sentences(r["prompt"])[-1]) for r in rows}
                                           for rows in (train, transfer))
    assert len(train_questions) >= 3 and len(transfer_questions) >= 2 and not train_questions & transfer_questions
    for prefix in ("start", "add", "sub", "mul", "question"):
        assert len({t for t in train_ids if t.startswith(prefix + ".")}) >= 3, prefix
        assert len({t for t in transfer_ids if t.startswith(prefix + ".")}) >= 2, prefix
    mixed = arithmetic_problems(500, seed=7, steps=(1, 2, 3, 4), wording="all")
    assert {t for r in mixed for t in r["info"]["templates"]} == train_ids | transfer_ids, "'all' draws from both"


def test_the_wordings_of_one_seed_pose_the_same_chains():
    train, transfer = (arithmetic_problems(100, seed=8, steps=(2, 3), wording=w) for w in ("train", "transfer"))
    assert [r["info"]["solution"] for r in train] == [r["info"]["solution"] for r in transfer]
    assert all(a["prompt"] != b["prompt"] for a, b in zip(train, transfer, strict=True))
    assert len({r["info"]["id"] for r in train + transfer}) == 200, "ids never collide across wordings"


def test_arithmetic_problems_are_seeded_and_keep_the_old_call_forms():
    rows = arithmetic_problems(300, seed=3)
    assert rows == arithmetic_problems(300, 3) == arithmetic_problems(300, 3, steps=(1, 2))
    assert rows != arithmetic_problems(300, seed=4)
    assert {r["info"]["steps"] for r in rows} == {1, 2}
    assert arithmetic_problems(300, seed=3, steps=(1, 2, 3, 4), wording="transfer") == \
        arithmetic_problems(300, seed=3, steps=(1, 2, 3, 4), wording="transfer")
    assert {r["info"]["steps"] for r in arithmetic_problems(50, seed=0, steps=(1,))} == {1}
    assert {r["info"]["steps"] for r in arithmetic_problems(50, seed=0, steps=(4,))} == {4}
    assert arithmetic_problems(0) == []


@pytest.mark.parametrize("kwargs, argument", [
    ({"n": -1}, "n"), ({"n": 5, "steps": ()}, "steps"), ({"n": 5, "steps": (5,)}, "steps"),
    ({"n": 5, "steps": (0, 1)}, "steps"), ({"n": 5, "wording": "test"}, "wording"),
])
def test_bad_arithmetic_arguments_are_named(kwargs, argument):
    with pytest.raises(ValueError, match=rf"^{argument} must"):
        arithmetic_problems(**kwargs)


def test_solution_steps_counts_calculator_annotations_or_lines():
    test, train = load_gsm8k("tests/fixtures/gsm8k", "test"), load_gsm8k("tests/fixtures/gsm8k", "train")
    # Read off the fixture: Janet's ducks (2 annotations), Josh's house (4), Kylar's glasses (5), Betty's wallet (3).
    assert [solution_steps(test[i]) for i in (0, 2, 5)] == [2, 4, 5] and solution_steps(train[2]) == 3
    plain = {"prompt": "q", "answer": "10", "info": {"solution": "First 2 + 3 = 5.\n\nThen 5 * 2 = 10.\n#### 10"}}
    assert solution_steps(plain) == 2, "without annotations, the non-empty lines before ####"


def test_easiest_by_steps_keeps_file_order_among_ties():
    test = load_gsm8k("tests/fixtures/gsm8k", "test")
    easiest = easiest_by_steps(test, 5)
    # Rows 0, 1, 3 and 4 of the fixture take 2 steps, row 6 (the sheep) is the first of 3.
    assert [(r["info"]["id"], r["info"]["steps"]) for r in easiest] == [
        ("gsm8k-test-0", 2), ("gsm8k-test-1", 2), ("gsm8k-test-3", 2), ("gsm8k-test-4", 2), ("gsm8k-test-6", 3)]
    assert [r["prompt"] for r in easiest_by_steps(test, 10, max_steps=2)] == [test[i]["prompt"] for i in (0, 1, 3, 4)]
    assert "steps" not in test[0]["info"], "the input rows are left as they were"
    assert easiest_by_steps(test, 0) == []
    with pytest.raises(ValueError, match="^n must"):
        easiest_by_steps(test, -1)
