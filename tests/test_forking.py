"""The forking tree (azlib.games.text.forking): sampling as its special case bit for bit, every generated token
counted once, forks that continue the sampled ids, TreeRL advantages on a hand-built tree, deduplication,
GRPO trained on per-token advantages, and forks written by the hint teacher (trained without the hint) or by
the teacher ensemble."""

import json
from types import SimpleNamespace
from dataclasses import asdict, replace

import pytest
import torch

from azlib.lab import config
from azlib.sampled_answer import Answer, ids_writing, scored_answer
from azlib.data import arithmetic_problems
from azlib.settings import ARMS, AnswerSampling, ForkSettings, arm_settings
from azlib.grpo import PolicyUpdate, GRPOSettings, Rollout
from azlib.games.text.signals import answer_rollout, forked_groups, verified
from azlib.mcts import tree_after
from azlib.games.text.forking import ForkingSearch, ForkTree, Segment, tree_advantages
from azlib.models.generation import TokenIds
from azlib.prompts import CHAT_INSTRUCTION, chat_prompt, hint_prompt
from azlib.rewards import RewardBreakdown, RewardWeights
from azlib.models.student import LoraSettings, Student
from azlib.models import DEFAULT_MODEL
from azlib.teachers import TeacherEnsemble, TeacherSpec
from azlib.games.text.explorers import accuracy_column
from azlib.settings import TrainerSettings, TrainSettings
from azlib.training import Trainer, _replayed


def breakdown(reward: float) -> RewardBreakdown:
    """The correctness reward's parts of an answer scored `reward` (no PRE, no penalties)."""
    return RewardBreakdown(reward, 0.0, 0.0, 0.0, reward)


def answer(reward: float, ids=(9,)) -> Answer:
    return Answer(0, tuple(ids), (-1.0,) * len(ids), "x", True, True, reward, reward == 1.0, breakdown(reward))


def hand_tree() -> ForkTree:
    """root -> A [1, 2] -> A1 [3] (reward 1), A2 [4, 5] (reward 0);  root -> B [6] (reward 0)."""
    tree = ForkTree(0, [0])
    tree.nodes[0].children = [1, 4]
    tree.nodes += [Segment(0, 0, [1, 2], [-1.0, -1.0], [2, 3]),
                   Segment(1, 2, [3], [-1.0], answer=answer(1.0, (1, 2, 3))),
                   Segment(1, 2, [4, 5], [-1.0, -1.0], answer=answer(0.0, (1, 2, 4, 5))),
                   Segment(0, 0, [6], [-1.0], answer=answer(0.0, (6,)))]
    return tree


def test_treerl_advantages_on_a_hand_built_tree():
    # V(root) = 1/3, V(A) = 1/2, L(A) = 2: R(A) = (1/6 + 1/6) / sqrt 2; R(A1) = 2/3 + 1/2; R(A2) = -1/3 - 1/2;
    # R(B) = -1/3 - 1/3
    adv = tree_advantages(hand_tree())
    assert adv[2] == pytest.approx([0.235702, 0.235702, 1.166667], abs=1e-6)
    assert adv[3] == pytest.approx([0.235702, 0.235702, -0.833333, -0.833333], abs=1e-6)
    assert adv[4] == pytest.approx([-0.666667], abs=1e-6)
    assert hand_tree().values() == pytest.approx([1 / 3, 0.5, 1.0, 0.0, 0.0])
    drawn = hand_tree().to_tree(lambda ids: " ".join(map(str, ids)))  # what the widget and the SVG draw
    assert [(n.action, n.visits, n.terminal) for n in drawn.nodes] == [
        (None, 3, False), ("1 2", 2, False), ("6", 1, True), ("3", 1, True), ("4 5", 1, True)]
    assert [n.q for n in drawn.nodes] == pytest.approx([1 / 3, 0.5, 0.0, 1.0, 0.0])
    replayed = tree_after(drawn, len(drawn.history))  # the widget's replay, answer by answer, ends at this tree
    assert [(n.visits, n.children) for n in replayed.nodes] == [(n.visits, n.children) for n in drawn.nodes]
    assert [n.q for n in replayed.nodes] == pytest.approx([n.q for n in drawn.nodes])
    assert tree_after(drawn, 1).root.visits == 1


def test_a_fork_splits_a_node_and_leaves_keep_their_ids():
    tree = ForkTree(0, [0])
    tree.nodes[0].children = [1]
    tree.nodes.append(Segment(0, 0, [1, 2, 3, 4, 5], [-0.1] * 5, answer=answer(0.0, (1, 2, 3, 4, 5))))
    head = tree.branch_point(1, 3)
    assert tree.prefix(head) == [1, 2, 3] and tree.nodes[1].start == 3 and tree.nodes[1].token_ids == [4, 5]
    assert tree.answer_ends() == [1] and tree.prefix(1) == [1, 2, 3, 4, 5], "the leaf is still its whole answer"
    assert tree.branch_point(1, 3) == head, "the same point again: the same node"
    assert tree.branch_point(1, 1) != head and tree.prefix(tree.branch_point(1, 1)) == [1]


def test_an_answers_text_is_its_ids_decoded_and_its_ids_end_at_the_answer_line():
    """Ids in, decoded once: without an answer line every id is kept; with one, the text ends at the answer line and
    the ids at the id that writes its last character (here one writing two newlines), whatever the ids after it."""
    words = ["2 + 3 = 5\n", "x", "#### 5", "\n\n", "more\n", "#### 6\n"]
    backend = SimpleNamespace(tokenizer=SimpleNamespace(decode=lambda ids, skip_special_tokens: "".join(
        words[i] for i in ids)))
    score = dict(kind="correctness", weights=RewardWeights())
    open_ = scored_answer(backend, 0, "5", (0, 1), (-1.0, -1.0), False, **score)
    assert (open_.token_ids, open_.text, open_.finished) == ((0, 1), "2 + 3 = 5\nx", False), "no answer line"
    done = scored_answer(backend, 0, "5", (0, 2, 3, 4, 5), (-1.0,) * 5, False, **score)
    assert (done.token_ids, done.text, done.finished, done.reward) == ((0, 2, 3), "2 + 3 = 5\n#### 5\n\n", True, 1.0)
    assert done.logprobs == (-1.0,) * 3 and done.eos
    assert [ids_writing(backend, (0, 2, 3), n) for n in (0, 1, 10, 11, 16, 17, 18, 19)] == [0, 1, 1, 2, 2, 3, 3, 3]


def test_the_ids_writing_a_character_hold_all_its_bytes():
    """Byte-level tokens split "×" (two UTF-8 bytes) over two ids: the ids writing "x = 6 ×" are three, not the two
    whose decoding ends in a replacement character of the same length."""
    pieces = [b"x = 6 ", b"\xc3", b"\x97", b" 7"]
    backend = SimpleNamespace(tokenizer=SimpleNamespace(decode=lambda ids, skip_special_tokens: b"".join(
        pieces[i] for i in ids).decode("utf-8", errors="replace")))
    assert backend.tokenizer.decode([0, 1], True) == "x = 6 \ufffd", "the prefix this is about"
    assert [ids_writing(backend, (0, 1, 2, 3), n) for n in (6, 7, 8, 9)] == [1, 3, 4, 4]


def test_verified_answers_are_deduplicated_by_their_normalised_solution():
    def c(text, correct=True, problem=0):
        return Rollout(replace(answer(float(correct)), text=text, problem=problem), [1], [2], 1.0, 0)

    kept = verified([c("2 + 3 = 5\n#### 5\n"), c("2 + 3  =  5\n####  5"), c("2+3 = 5\n#### 5"), c("x", False),
                     c("2 + 3 = 5\n#### 5\n", problem=1)])
    assert [(k.answer.problem, k.answer.text) for k in kept] == [(0, "2 + 3 = 5\n#### 5\n"), (0, "2+3 = 5\n#### 5"),
                                                  (1, "2 + 3 = 5\n#### 5\n")]


def test_the_hint_prompt_carries_the_question_and_the_solution():
    row = arithmetic_problems(1, seed=3, steps=(2,))[0]
    [turn] = hint_prompt(row["prompt"], row["info"]["solution"])
    assert turn["role"] == "user" and row["prompt"] in turn["content"] and row["info"]["solution"] in turn["content"]
    assert turn["content"].endswith(CHAT_INSTRUCTION), "the same instruction as the student's"
    [gsm8k] = hint_prompt("How many clips?", "48/2 = <<48/2=24>>24 clips in May.\n#### 72")
    assert "48/2 = 24 clips in May.\n#### 72" in gsm8k["content"] and "<<" not in gsm8k["content"]


def test_the_hint_writer_is_a_fork_setting_and_the_arms_that_use_it():
    with pytest.raises(ValueError, match="writer"):
        ForkSettings(writer="teacher")
    for arm in ARMS:
        if arm != "trl":
            fork, train = arm_settings(arm, ForkSettings(points=3))
            assert fork.points == 3 and TrainSettings(**train).signal == ARMS[arm]["signal"]
    assert arm_settings("tree_hint", ForkSettings())[0] == ForkSettings(writer="hint")
    assert arm_settings("rationalize", ForkSettings()) == (ForkSettings(where="root", writer="hint"),
                                                           {"signal": "forked", "update": "sft"})


def test_a_rollout_holds_its_answer_and_comes_back_from_a_checkpoint_equal():
    backend = SimpleNamespace(with_eos=lambda ids, finished: list(ids) + [9] * finished)
    hinted = replace(answer(1.0, (2, 3)), text="2 + 3 = 5\n#### 5", writer="hint")
    r = answer_rollout(backend, 0, [1], hinted, advantages=(0.5, 0.5))
    assert r.answer is hinted and (r.answer.text, r.correct, r.answer.problem, r.reward) == (hinted.text, True, 0, 1.0), "not a copy"
    assert r.completion_ids == [2, 3, 9] and r.advantages == (0.5, 0.5, 0.5), "the EOS id, and its advantage"
    added = replace(r, reward=1.25, added={"brief_bonus": 0.25})
    step = Rollout(None, [1, 2], [3], 0.5, 1)  # a sibling step: no whole answer
    assert not step.correct
    for rollout in (r, added, step):  # as Trainer.save_checkpoint writes the replay and restore_latest reads it
        saved = json.loads(json.dumps(asdict(rollout)))
        assert _replayed(saved) == rollout
    restored = _replayed(json.loads(json.dumps(asdict(added))))
    assert restored.answer.writer == "hint" and isinstance(restored.answer.breakdown, RewardBreakdown)
    # a replay saved in another shape is refused, a field named
    old = {"prompt_ids": [1], "completion_ids": [2], "reward": 1.0, "group": 0, "advantages": [], "problem": 0,
           "prompt": "q", "text": "x", "correct": True, "finished": True, "eos": True, "parts": {}, "writer": "hint"}
    with pytest.raises(KeyError, match="answer"):
        _replayed(old)
    broken = asdict(r)
    del broken["answer"]["breakdown"]["hre"]
    with pytest.raises(TypeError, match="hre"):
        _replayed(broken)


class Counting:
    """A backend that counts the tokens of every sample it returns (the tokens the model generated) and of
    every prompt it reads, and keeps the prompts."""

    def __init__(self, backend):
        self.inner, self.generated, self.calls, self.prompts, self.read = backend, 0, 0, [], 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, **kwargs):
        out = self.inner.generate(prompts, **kwargs)
        self.generated += sum(len(s.token_ids) for group in out for s in group)
        self.calls += 1
        self.prompts += list(prompts)
        self.read += sum(len(self.inner.encode_prompt(p)) for p in prompts)
        return out


@pytest.fixture(scope="module")
def student():
    return Student("embedded:smollm2-135m-instruct", lora=LoraSettings(r=4))


@pytest.mark.model
def test_with_no_forks_the_tree_is_the_independent_signal_bit_for_bit(student):
    rows = arithmetic_problems(3, seed=5, steps=(1,))
    direct = student.backend.generate([chat_prompt(r["prompt"]) for r in rows], n=2, max_new_tokens=24,
                                      temperature=0.7, top_p=1.0, seed=3, stop_at_answer=True)
    trees = ForkingSearch(student.backend, rows, ForkSettings(rounds=0),
                          sampling=AnswerSampling(temperature=0.7, max_new_tokens=24)).grow([0, 1, 2], 2, seed=3)
    samples = [s for group in direct for s in group]
    answers = [a for t in trees for a in t.answers()]
    assert [a.token_ids for a in answers] == [s.token_ids for s in samples], "hf stops at the answer line: all kept"
    assert [a.logprobs for a in answers] == [s.logprobs for s in samples]
    assert sum(t.tokens for t in trees) == sum(s.completion_tokens for s in samples)

    def first_step(signal, **fork):
        trainer = Trainer(student, rows, "/nonexistent", TrainerSettings(
            train=TrainSettings(signal=signal, update="sft", problems_per_step=3, group_size=2, max_new_tokens=24,
                                temperature=0.7, seed=3), **fork))
        trainer.policy_update.sft_step = lambda examples: {}  # the answers, not the update, are compared
        record = trainer.train_step()
        # the step log's accuracy is the student's own (its independent answers); answer_accuracy is a search's
        assert accuracy_column(signal) == "sampled_accuracy" in record and "answer_accuracy" not in record, sorted(record)
        return trainer.replay, trainer.explorer.forking.grow([0, 1, 2], 2, seed=9)

    sampled, again = first_step("independent")
    forked, forked_again = first_step("forked", fork=ForkSettings(rounds=0, points=3, branches=2))
    assert sampled == forked, "the replay (verified answers) of one step: equal"
    assert [t.answers() for t in again] == [t.answers() for t in forked_again]


@pytest.mark.model
def test_forks_continue_the_sampled_ids_and_every_token_is_counted_once(student):
    rows = arithmetic_problems(3, seed=20000, steps=(2,))
    backend = Counting(student.backend)
    trees = ForkingSearch(backend, rows, ForkSettings(rounds=2, points=2, branches=2),
                          sampling=AnswerSampling(temperature=0.7, max_new_tokens=40)).grow([0, 1, 2], 3, seed=1)
    assert backend.calls >= 2, "some problem was not all correct, so it forked"
    assert sum(t.tokens for t in trees) == backend.generated, "every generated token counted, none twice"
    for tree in trees:
        assert sum(len(n.token_ids) for n in tree.nodes) == tree.tokens, "each token lies in exactly one node"
        sampled = [tree.prefix(leaf) for leaf in tree.answer_ends()]
        forked = [leaf for leaf in tree.answer_ends() if tree.nodes[leaf].round > 0]
        if all(a.correct for a in tree.answers()[:3]):
            assert not forked, "a problem whose answers are all correct gets no forks"
        for leaf in forked:
            node = tree.nodes[leaf]
            prefix = tree.prefix(node.parent)
            assert 0 < len(prefix) and any(other[: len(prefix)] == prefix for other in sampled
                                           if other != tree.prefix(leaf)), "a fork continues another answer's ids"
            assert list(node.answer.token_ids) == (prefix + node.token_ids)[: len(node.answer.token_ids)]
            assert len(prefix) + len(node.token_ids) <= 40, "a forked answer is capped as a sampled one"
    rollouts = forked_groups(trees, student.backend, "treerl")
    assert all(len(r.advantages) == len(r.completion_ids) for r in rollouts)
    assert {r.group for r in rollouts} == {0, 1, 2}
    leaves = [tree.nodes[leaf].answer for tree in trees for leaf in tree.answer_ends()]
    assert all(r.answer is a for r, a in zip(rollouts, leaves, strict=True)), "each rollout holds its leaf's Answer"


@pytest.mark.model
def test_grpo_on_per_token_advantages_equal_to_the_groups_is_the_group_step(student):
    rows = arithmetic_problems(2, seed=7, steps=(1,))
    trees = ForkingSearch(student.backend, rows, ForkSettings(rounds=0),
                          sampling=AnswerSampling(temperature=1.0, max_new_tokens=12)).grow([0, 1], 3, seed=0)
    rollouts = [replace(r, reward=float(i % 2))  # mixed rewards in each group
                for i, r in enumerate(forked_groups(trees, student.backend))]
    settings = GRPOSettings(beta=0.0, scale_rewards="none", clip_advantages=None, learning_rate=1e-3, warmup_steps=0)

    def update(rollouts):
        """The step's parameter change, flattened (the student is put back after)."""
        torch.manual_seed(0)
        start = [p.detach().clone() for p in student.trainable_parameters()]
        PolicyUpdate(student, settings).step(rollouts)
        delta = torch.cat([(p.detach() - s).flatten() for p, s in zip(student.trainable_parameters(), start)])
        with torch.no_grad():
            for p, s in zip(student.trainable_parameters(), start):
                p.copy_(s)
        return delta

    def cosine(a, b):
        return float(a @ b / (a.norm() * b.norm()))

    by_group = update(rollouts)
    means = {g: sum(r.reward for r in rollouts if r.group == g) / 3 for g in (0, 1)}

    def with_advantages(sign):
        return [replace(r, advantages=[sign * (r.reward - means[r.group])] * len(r.completion_ids)) for r in rollouts]

    # Adam's first step is about lr x sign(gradient), so the directions are compared, not the last digits
    assert by_group.norm() > 0 and cosine(by_group, update(with_advantages(+1))) > 0.999
    assert cosine(by_group, update(with_advantages(-1))) < -0.999, "the advantages given are the ones used"


@pytest.mark.model
def test_fork_points_lie_in_the_work_never_in_the_answer_line_or_a_repeated_line(student):
    tokenizer = student.tokenizer
    ids = tokenizer("3 * 4 = 12\nWait.\nWait.\n12 + 5 = 17\n#### 17\n", add_special_tokens=False)["input_ids"]
    search = ForkingSearch(student.backend, [], ForkSettings(),
                           sampling=AnswerSampling(temperature=0.7, max_new_tokens=64))
    text_before = [tokenizer.decode(ids[:p]) for p in search._positions(ids)]
    assert text_before and all("####" not in t for t in text_before), "no fork redraws only the final number"
    assert not any(t.endswith("Wait.\nWait") for t in text_before), "nothing inside the repeated line"
    assert any(t.endswith("12 + 5 =") for t in text_before), "the second step's result can be redrawn"
    lines = ForkingSearch(student.backend, [], ForkSettings(where="line"),
                          sampling=AnswerSampling(temperature=0.7, max_new_tokens=64))
    assert {tokenizer.decode(ids[:p]) for p in lines._positions(ids)} == {"3 * 4 = 12\n", "3 * 4 = 12\nWait.\nWait.\n"}


@pytest.mark.model
def test_fork_from_chooses_whose_tokens_are_fork_points(student):
    """Two wrong answers: a finished one and one cut at the cap whose second token is the most surprising
    of all. 'any' forks there first; 'finished' never forks in the cut answer; 'wrong' skips the right one."""
    ids = student.tokenizer("3 * 4 = 11\n11 + 5 = 16\n", add_special_tokens=False)["input_ids"]
    tree = ForkTree(0, [0])
    cut = Answer(0, tuple(ids), (-0.1, -9.0) + (-0.1,) * (len(ids) - 2), "x", False, False, 0.0, False,
                 breakdown(0.0))
    done = Answer(0, tuple(ids[:3]), (-2.0,) * 3, "x", True, True, 0.0, False, breakdown(0.0))
    right = Answer(0, tuple(ids[3:6]), (-5.0,) * 3, "x", True, True, 1.0, True, breakdown(1.0))
    tree.nodes[0].children = [1, 2, 3]
    tree.nodes += [Segment(0, 0, list(a.token_ids), list(a.logprobs), answer=a) for a in (cut, done, right)]

    def points(fork_from: str) -> list[tuple[int, int]]:
        settings = ForkSettings(points=2, fork_from=fork_from)
        return ForkingSearch(student.backend, [], settings,
                             sampling=AnswerSampling(temperature=0.7, max_new_tokens=64)).fork_points(tree)

    assert points("any")[0] == (1, 1), "the least likely sampled token of all, in the cut answer"
    assert all(leaf != 1 for leaf, _ in points("finished")) and points("finished"), "never in the cut answer"
    assert all(leaf != 3 for leaf, _ in points("wrong")), "never in the right answer"
    with pytest.raises(ValueError, match="fork_from"):
        ForkSettings(fork_from="cut")


@pytest.mark.model
def test_the_hint_teacher_writes_the_forks_reading_the_solution_and_they_train_without_it(student):
    rows = arithmetic_problems(3, seed=20000, steps=(2,))
    backend = Counting(student.backend)
    trees = ForkingSearch(backend, rows, ForkSettings(rounds=1, points=2, branches=2, writer="hint"),
                          sampling=AnswerSampling(temperature=0.7, max_new_tokens=40)).grow([0, 1, 2], 3, seed=1)
    assert backend.calls >= 2, "some problem was not all correct, so the teacher forked it"
    assert sum(t.tokens for t in trees) == backend.generated, "the teacher's tokens count as the student's"
    assert sum(t.prefill for t in trees) == backend.read, "and so do the prompts it reads"
    for tree in trees:
        leaves = [tree.nodes[leaf] for leaf in tree.answer_ends()]
        assert [n.answer.writer for n in leaves] == ["hint" if n.round else "student" for n in leaves]
    assert any(a.writer == "hint" for t in trees for a in t.answers())
    for prompt in backend.prompts[len(rows):]:  # the fork calls'
        text = student.tokenizer.decode(list(prompt))
        [k] = [k for k, row in enumerate(rows) if row["prompt"] in text]
        assert isinstance(prompt, TokenIds) and rows[k]["info"]["solution"] in text, "the teacher reads the solution"
        hint = student.backend.encode_prompt(hint_prompt(rows[k]["prompt"], rows[k]["info"]["solution"]))
        prefix = tuple(prompt[len(hint):])
        assert list(prompt[: len(hint)]) == hint and prefix, "the hint, then a partial answer"
        assert any(a.token_ids[: len(prefix)] == prefix for a in trees[k].answers() if a.writer == "student"), \
            "it continues the student's answer as the student wrote it"
    rollouts = forked_groups(trees, student.backend)
    assert [r.answer.writer for r in rollouts] == [a.writer for t in trees for a in t.answers()]
    for r in rollouts:
        assert r.prompt_ids == student.backend.encode_prompt(chat_prompt(rows[r.answer.problem]["prompt"])), "no hint"


@pytest.mark.model
def test_the_teacher_ensemble_writes_the_forks_as_right_and_wrong_continuations(student):
    rows = arithmetic_problems(3, seed=20000, steps=(2,))
    settings = ForkSettings(rounds=1, points=2, branches=1, writer="teachers")
    with pytest.raises(ValueError, match="teacher ensemble"):
        ForkingSearch(student.backend, rows, settings, sampling=AnswerSampling(temperature=0.7, max_new_tokens=40))
    own, taught = Counting(student.backend), Counting(student.backend)
    spec = TeacherSpec(name="tutor", backend="hf", model=DEFAULT_MODEL, tier="cpu", temperature=0.7)
    teachers = TeacherEnsemble([spec], shared={DEFAULT_MODEL: taught}, per_node=1)
    trees = ForkingSearch(own, rows, settings, sampling=AnswerSampling(temperature=0.7, max_new_tokens=40),
                          teachers=teachers).grow([0, 1, 2], 3, seed=1)
    assert own.calls == 1 and taught.calls >= 1, "the student answers, the teacher writes every fork"
    assert sum(t.tokens for t in trees) == own.generated + taught.generated, "the teacher's tokens count once"
    writers = [(tree.nodes[leaf].round, tree.nodes[leaf].answer.writer) for tree in trees for leaf in tree.answer_ends()]
    assert {w for r, w in writers if r == 0} == {"student"} and {w for r, w in writers if r} == {"tutor:1", "tutor:0"}
    for tree in trees:
        for leaf in tree.answer_ends():
            node, answer = tree.nodes[leaf], tree.nodes[leaf].answer
            if node.round:  # a teacher's continuation after the student's own prefix, as the student's tokens
                prefix = tree.prefix(node.parent)
                assert answer.token_ids[: len(prefix)] == tuple(prefix) and len(answer.token_ids) > len(prefix)
                [scored] = student.backend.score([TokenIds(tree.prompt_ids + prefix)], [list(node.token_ids)])
                assert node.logprobs == pytest.approx(scored, abs=1e-4), "the student's log-probs of the teacher's text"
    rollouts = forked_groups(trees, student.backend)
    assert all(r.prompt_ids == student.backend.encode_prompt(chat_prompt(rows[r.answer.problem]["prompt"])) for r in rollouts)


def test_the_teacher_arm_needs_a_teacher_tier_or_teachers():
    assert arm_settings("tree_teachers", ForkSettings())[0] == ForkSettings(writer="teachers")
    defaults = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "05_base_vs_trained.ipynb"), "output_dir": "x"}
    with pytest.raises(ValueError, match="tree_teachers"):
        config.validate("05_base_vs_trained", {**defaults, "arms": ["tree_teachers"], "teacher_tier": "none"})
    assert config.validate("05_base_vs_trained", {**defaults, "arms": ["tree_teachers"], "teacher_tier": "cpu"})
    served = {"name": "served", "backend": "openai", "model": "m", "tier": "vllm",
              "base_url": "http://127.0.0.1:8001/v1"}
    assert config.validate("05_base_vs_trained", {**defaults, "arms": ["tree_teachers"], "teachers": [served]})
    with pytest.raises(ValueError, match="base_url"):  # a spec is checked where the run's parameters are
        config.validate("05_base_vs_trained", {**defaults, "arms": ["tree_teachers"],
                                               "teachers": [{**served, "base_url": None}]})


@pytest.mark.model
def test_rationalization_the_hint_teacher_writes_whole_answers_from_the_question(student):
    rows = arithmetic_problems(3, seed=20000, steps=(2,))
    trainer = Trainer(student, rows, "/nonexistent", TrainerSettings(
        train=TrainSettings(signal="forked", update="sft", problems_per_step=3, group_size=3, max_new_tokens=40,
                            temperature=0.7, seed=1),
        fork=ForkSettings(rounds=1, points=2, branches=2, where="root", writer="hint")))
    trainer.policy_update.sft_step = lambda examples: {}  # the answers, not the update, are looked at
    grown, grow = [], trainer.explorer.forking.grow
    trainer.explorer.forking.grow = lambda *args: grown.extend(grow(*args)) or grown
    record = trainer.train_step()
    forked = [(t, t.nodes[leaf]) for t in grown for leaf in t.answer_ends() if t.nodes[leaf].round]
    assert forked, "some problem was not all correct, so the teacher answered it"
    for tree, node in forked:
        assert node.parent == 0 and node.start == 0 and node.answer.writer == "hint", "a whole answer from the root"
        assert node.answer.token_ids == tuple(node.token_ids[: len(node.answer.token_ids)])
    assert record["search/verified_by_teacher"] == sum(r.answer.writer == "hint" for r in trainer.replay) <= record["verified"]


STEP_ROW = {"prompt": "Ava has 3 boxes with 4 coins in each box. She finds 5 more coins. How many coins?",
            "answer": "17", "info": {"id": "step", "solution": "3 * 4 = 12\n12 + 5 = 17\n#### 17", "steps": 2}}


@pytest.mark.model
def test_step_forks_start_where_the_first_step_fails(student):
    """A wrong result forks before the result; a wrong choice of numbers before the equation; a chain whose
    steps all pass is no fork point."""
    tokenizer = student.tokenizer
    texts = ["3 * 4 = 11\n11 + 5 = 16\n#### 16", "So 2 * 4 = 8\n8 + 5 = 13\n#### 13",
             "3 * 4 = 12\n12 + 5 = 17\n#### 17"]
    tree = ForkTree(0, [0])
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        a = Answer(0, tuple(ids), (-1.0,) * len(ids), tokenizer.decode(ids), True, True, float(text.endswith("17")),
                   text.endswith("17"), breakdown(float(text.endswith("17"))))
        tree.nodes[0].children.append(len(tree.nodes))
        tree.nodes.append(Segment(0, 0, list(ids), list(a.logprobs), answer=a))

    def before(check: str) -> set[str]:
        search = ForkingSearch(student.backend, [STEP_ROW], ForkSettings(where="step", check=check, points=3),
                               sampling=AnswerSampling(temperature=0.7, max_new_tokens=64))
        return {tokenizer.decode(tree.nodes[leaf].answer.token_ids[:p]) for leaf, p in search.fork_points(tree)}

    assert before("arithmetic") == {"3 * 4 = "}, "the wrong product's result is redrawn; 2 * 4 = 8 is arithmetic"
    assert before("traced") == {"3 * 4 = ", "So "}, "2 is no number of the problem: the equation is redrawn"
    assert before("reference") == {"3 * 4 = ", "So "}
    with pytest.raises(ValueError, match="check"):
        ForkSettings(where="step", check="exact")


@pytest.mark.model
def test_a_step_tree_whose_check_never_fails_is_sampling_bit_for_bit(student):
    """Five new tokens hold no whole equation, so no step fails: the tree forks nowhere (where the surprise rule
    does fork) and its answers are the independent samples at the same seed."""
    rows = arithmetic_problems(3, seed=5, steps=(2,))
    sampling = AnswerSampling(temperature=0.7, max_new_tokens=5)
    direct = student.backend.generate([chat_prompt(r["prompt"]) for r in rows], n=3, max_new_tokens=5,
                                      temperature=0.7, top_p=1.0, seed=3, stop_at_answer=True)
    counted = Counting(student.backend)
    trees = ForkingSearch(counted, rows, ForkSettings(rounds=2, where="step", check="arithmetic"),
                          sampling=sampling).grow([0, 1, 2], 3, seed=3)
    assert counted.calls == 1, "no fork"
    samples = [s for group in direct for s in group]
    answers = [a for t in trees for a in t.answers()]
    assert [a.token_ids for a in answers] == [s.token_ids for s in samples]
    assert [a.logprobs for a in answers] == [s.logprobs for s in samples]
    assert sum(t.tokens for t in trees) == sum(s.completion_tokens for s in samples) == counted.generated
    surprise = Counting(student.backend)
    ForkingSearch(surprise, rows, ForkSettings(rounds=1), sampling=sampling).grow([0, 1, 2], 3, seed=3)
    assert surprise.calls > 1, "the same answers are wrong, so the surprise rule forks them"


@pytest.mark.model
def test_a_step_tree_forks_the_sampled_ids_at_the_failing_step_and_counts_every_token_once(student):
    rows = arithmetic_problems(4, seed=20000, steps=(2,))
    backend = Counting(student.backend)
    search = ForkingSearch(backend, rows, ForkSettings(rounds=1, points=2, branches=2, where="step"),
                           sampling=AnswerSampling(temperature=0.7, max_new_tokens=48))
    trees = search.grow([0, 1, 2, 3], 3, seed=1)
    assert backend.calls >= 2, "some sampled step failed, so the tree forked"
    assert sum(t.tokens for t in trees) == backend.generated, "every generated token counted, none twice"
    for tree in trees:
        assert sum(len(n.token_ids) for n in tree.nodes) == tree.tokens, "each token lies in exactly one node"
        failing = {a.token_ids[:p] for a in tree.independent_answers() for p in search._failing_step(tree, a)}
        for leaf in tree.answer_ends():
            node = tree.nodes[leaf]
            if node.round:
                assert tuple(tree.prefix(node.parent)) in failing, "a fork continues a sampled answer's ids " \
                                                                      "up to its first failing step"
