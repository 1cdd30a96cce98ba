"""A learner's reward function with TRL's signature in azlib's training: called as TRL calls it (prompts,
completions, each other column), its values added to the rewards GRPO's advantages and imitation's choice read,
and a clear error for a function that answers with the wrong length or type. No model: the step's answers
are given, and the update records what it was handed."""

from types import SimpleNamespace

import pytest
import torch

from azlib.games.text import explorers
from azlib.grpo import group_advantages
from azlib.sampled_answer import Answer
from azlib.grpo import Rollout
from azlib.games.text.signals import best_verified, with_rewards
from azlib.rewards import RewardBreakdown, call_reward, correctness_reward
from azlib.settings import TrainerSettings, TrainSettings
from azlib.training import Trainer

ROWS = [{"prompt": "What is 2 + 3?", "answer": "5", "info": {"id": "a"}},
        {"prompt": "What is 4 * 2?", "answer": "8", "info": {"id": "b"}}]
# (problem, text, correct): two answers to each problem, a long and a short correct one to problem 0.
ANSWERS = [(0, "First 2 + 3 = 5, since adding three to two gives five in the end.\n#### 5", True),
           (0, "2 + 3 = 5\n#### 5", True),
           (1, "4 * 2 = 6\n#### 6", False),
           (1, "4 * 2 = 8\n#### 8", True)]


def answers() -> list[Rollout]:
    """The answers as rollouts, each scored by correctness (finished, with an EOS id)."""
    out = []
    for i, (problem, text, ok) in enumerate(ANSWERS):
        ids, reward = (10 + i, 11 + i, 12 + i), float(ok)
        answer = Answer(problem, ids, (-1.0,) * 3, text, True, True, reward, ok, RewardBreakdown(reward, 0, 0, 0, reward))
        out.append(Rollout(answer, [1, 2], list(ids), reward, problem))
    return out


class Recorder:
    """Stands in for a reward function and remembers how it was called."""

    __name__ = "brief_bonus"

    def __init__(self, values=None):
        self.calls, self.values = [], values

    def __call__(self, prompts, completions, **kwargs):
        self.calls.append({"prompts": prompts, "completions": completions, **kwargs})
        return self.values if self.values is not None else [0.5 if len(c.split()) <= 8 else 0.0 for c in completions]


def test_a_trl_shaped_function_is_called_as_trl_calls_it_and_its_values_are_added():
    bonus = Recorder()
    scored = with_rewards(answers(), ROWS, [bonus])
    (call,) = bonus.calls
    assert call["prompts"] == [ROWS[p]["prompt"] for p, _, _ in ANSWERS]
    assert call["completions"] == [text for _, text, _ in ANSWERS]
    assert call["answer"] == ["5", "5", "8", "8"] and call["info"] == [{"id": "a"}] * 2 + [{"id": "b"}] * 2
    assert call["completion_ids"] == [[10, 11, 12], [11, 12, 13], [12, 13, 14], [13, 14, 15]]
    assert [c.reward for c in scored] == [1.0, 1.5, 0.5, 1.5]
    assert [r.added for r in scored] == [{"brief_bonus": v} for v in (0.0, 0.5, 0.5, 0.5)]
    assert [r.answer for r in scored] == [r.answer for r in answers()], "the answers' own rewards stay as scored"
    # the kit's own TRL-shaped reward plugs in the same way
    assert [c.reward for c in with_rewards(answers(), ROWS, [correctness_reward])] == [2.0, 2.0, 0.0, 2.0]
    assert with_rewards(answers(), ROWS, []) == answers()


def test_imitation_keeps_each_problems_best_verified_answers():
    scored = with_rewards(answers(), ROWS, [Recorder()])
    assert [c.answer.text for c in best_verified(scored)] == [ANSWERS[1][1], ANSWERS[3][1]]  # the brief correct ones
    assert len(best_verified(answers())) == 3, "with correctness alone every verified answer ties and is kept"


@pytest.mark.parametrize("returned, error, match", [
    ([1.0, 2.0], ValueError, "returned 2 rewards for 4 completions"),
    ([0.0] * 5, ValueError, "returned 5 rewards for 4 completions"),
    (0.5, TypeError, "returned float; it must return a list of 4 floats"),
    ("1234", TypeError, "returned str"),
    ([0.0, None, 0.0, 0.0], TypeError, r"returned None \(NoneType\) for completion 1"),
    ([0.0, "1", 0.0, 0.0], TypeError, "every reward must be a number"),
    ([0.0, float("nan"), 0.0, 0.0], ValueError, "rewards must be finite"),
])
def test_a_wrong_answer_from_the_function_is_a_clear_error(returned, error, match):
    with pytest.raises(error, match=match):
        with_rewards(answers(), ROWS, [Recorder(returned)])
    assert call_reward(Recorder(torch.tensor([1, 0, 0, 1])), ["q"] * 4, ["a"] * 4) == [1.0, 0.0, 0.0, 1.0]


class FakeStudent:
    """What Trainer reads of a student when the answers are given and the update is a recorder."""

    backend, reference, name, device = None, "adapters_off", "fake", "cpu"

    def trainable_parameters(self):
        return [torch.nn.Parameter(torch.zeros(1))]


class FakeUpdate:
    def __init__(self):
        self.handed, self.updates = [], 0

    def step(self, rollouts):
        self.handed.append(list(rollouts))
        return {"loss": 0.0}

    sft_step = step


def trainer_with_answers(tmp_path, monkeypatch, update):
    trainer = Trainer(FakeStudent(), ROWS, tmp_path / "run",
                      TrainerSettings(train=TrainSettings(signal="independent", update=update, problems_per_step=2)))
    monkeypatch.setattr(trainer.explorer.forking, "grow", lambda indices, size, seed: [SimpleNamespace(tokens=8, prefill=4, independent_answers=list)])
    monkeypatch.setattr(explorers, "forked_groups", lambda trees, backend, kind: answers())
    trainer.policy_update = FakeUpdate()
    return trainer


def test_the_trainer_adds_the_function_to_what_grpo_and_imitation_train_on(tmp_path, monkeypatch):
    trainer = trainer_with_answers(tmp_path, monkeypatch, "grpo")
    plain = trainer.train_step()
    bonus = Recorder()
    trainer.add_reward(bonus)
    record = trainer.train_step()
    before, after = trainer.policy_update.handed
    assert [e.reward for e in before] == [1.0, 1.0, 0.0, 1.0] and [e.reward for e in after] == [1.0, 1.5, 0.5, 1.5]
    advantages = group_advantages(torch.tensor([e.reward for e in after]), torch.tensor([e.group for e in after]))
    assert advantages[1] > 0 > advantages[0], "within problem 0 the brief correct answer is now preferred"
    assert bonus.calls[0]["answer"] == ["5", "5", "8", "8"]
    assert "reward/brief_bonus" not in plain and record["reward/brief_bonus"] == pytest.approx(0.375)
    assert record["reward_mean"] == pytest.approx(1.125)
    assert trainer._flat_settings()["train.reward_functions"] == ["brief_bonus"]

    imitation = trainer_with_answers(tmp_path / "sft", monkeypatch, "sft")
    imitation.add_reward(Recorder())
    imitation.train_step()
    assert [e.answer.text for e in imitation.policy_update.handed[0]] == [ANSWERS[1][1], ANSWERS[3][1]]


def test_the_trainer_refuses_what_it_cannot_use_and_names_a_bad_return(tmp_path, monkeypatch):
    trainer = trainer_with_answers(tmp_path, monkeypatch, "grpo")
    assert "train.reward_functions" not in trainer._flat_settings(), "a run without one keeps its settings as before"

    def no_kwargs(prompts, completions):
        return [0.0] * len(completions)

    with pytest.raises(TypeError, match=r"cannot take the keyword\(s\) answer, info, completion_ids.*\*\*kwargs"):
        trainer.add_reward(no_kwargs)

    def hre(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match="'hre' is taken"):
        trainer.add_reward(hre)
    with pytest.raises(ValueError, match="train.signal must be one of"):
        Trainer(FakeStudent(), ROWS, tmp_path / "siblings",
                TrainerSettings(train=TrainSettings(signal="siblings"))).add_reward(Recorder())
    trainer.add_reward(Recorder([1.0]))
    with pytest.raises(ValueError, match="'brief_bonus' returned 1 rewards for 4 completions"):
        trainer.train_step()
