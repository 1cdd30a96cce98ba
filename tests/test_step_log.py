"""The training step's log line: the step's own fields as they are, the update's, the explorer's and the reward's
parts each under its namespace, and no key written twice; benchmarks/train_logs.py reads a line without namespaces
(another checkout's) under them."""

import importlib.util

import pytest

from azlib.paths import REPO_ROOT
from azlib.training import StepLog


def test_each_part_has_its_namespace():
    line = StepLog({"step": 1, "reward_mean": 0.5}, update={"loss": 0.1, "reward_mean": 0.7},
                   search={"answers": 2}, reward={"hre": 1.0}).line()
    assert line == {"step": 1, "reward_mean": 0.5, "update/loss": 0.1, "update/reward_mean": 0.7,
                    "search/answers": 2, "reward/hre": 1.0}, "the update's reward_mean does not replace the step's"


@pytest.mark.parametrize("space", ["update", "search", "reward"])
def test_a_key_two_parts_write_is_refused(space):
    with pytest.raises(KeyError, match=f"'{space}/x' is written twice"):
        StepLog({"step": 1, f"{space}/x": 0.0}, **{space: {"x": 1.0}}).line()


def test_a_line_without_namespaces_is_read_under_them():
    spec = importlib.util.spec_from_file_location("train_logs", REPO_ROOT / "benchmarks" / "train_logs.py")
    train_logs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_logs)
    namespaced = train_logs.namespaced
    grpo = {"step": 3, "reward_mean": 0.4, "reward_std": 0.2, "loss": 0.1, "kl": 0.01, "reward_hre": 1.0,
            "answers": 2, "answer_accuracy": 0.5, "tokens": 90}
    assert namespaced(grpo) == {"step": 3, "update/reward_mean": 0.4, "update/reward_std": 0.2, "update/loss": 0.1,
                                "update/kl": 0.01, "reward/hre": 1.0, "search/answers": 2,
                                "answer_accuracy": 0.5, "tokens": 90}, "a GRPO step's reward_mean was GRPO's"
    sft = {"step": 1, "reward_mean": 0.3, "loss": 0.2, "verified_by_teacher": 1}
    assert namespaced(sft) == {"step": 1, "reward_mean": 0.3, "update/loss": 0.2, "search/verified_by_teacher": 1}
    line = StepLog({"step": 1}, update={"loss": 0.1}).line()
    assert namespaced(line) is line
