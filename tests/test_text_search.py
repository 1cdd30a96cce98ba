"""Tree search over text with the real embedded model: batching, priors, rewards, determinism."""

import math
import random
from dataclasses import replace

import pytest

from azlib.data import arithmetic_problems
from azlib.mcts import search
from azlib.games.text.env import (
    TEXT_SEARCH_SAMPLING, TextEnv, TextSearchSettings, trajectories, word_similarity,
)
from azlib.teachers import TeacherSpec
from azlib.rewards import ANSWER_LINE, complete_answer
from azlib.settings import SearchSettings
from azlib.models import DEFAULT_MODEL, make_backend
from azlib.teachers import TeacherEnsemble


class Spy:
    """Counts the calls a real backend receives (a pass-through, not a stand-in)."""

    def __init__(self, backend):
        self.backend, self.generate_calls, self.score_calls = backend, 0, 0

    def generate(self, *args, **kwargs):
        self.generate_calls += 1
        return self.backend.generate(*args, **kwargs)

    def score(self, *args, **kwargs):
        self.score_calls += 1
        return self.backend.score(*args, **kwargs)

    def __getattr__(self, name):  # everything else (the tokenizer) is the backend's own
        return getattr(self.backend, name)


@pytest.fixture(scope="module")
def student():
    return make_backend("hf")


def run_search(student, teacher=None, seed=0):
    rows = arithmetic_problems(2, seed=3, steps=(1,))
    # the original system's search (fixed-size chunks, combined reward); rollout expansion is tested in test_training
    settings = TextSearchSettings(expansion="chunk", student_samples=3, chunk_tokens=8)
    teachers = None
    if teacher is not None:
        spec = TeacherSpec(name="tutor", backend="hf", model=DEFAULT_MODEL, tier="cpu")
        teachers = TeacherEnsemble([spec], shared={DEFAULT_MODEL: teacher})
    env = TextEnv(student, rows, settings, replace(TEXT_SEARCH_SAMPLING, max_new_tokens=48), reward="combined",
                  teachers=teachers)
    config = SearchSettings(num_simulations=6, max_depth=6, leaves_per_step=2, skip_solved=True)
    return env, search(env, [env.root(i) for i in range(2)], config, random.Random(seed))


def test_one_generate_call_per_step_for_all_problems_and_leaves(student):
    spy_student, spy_teacher = Spy(student), Spy(student)
    env, results = run_search(spy_student, teacher=spy_teacher)
    steps = env.calls
    assert steps <= 4, "2 problems x 6 simulations at 2 leaves per step: a handful of steps, not 12 calls"
    assert spy_student.generate_calls == steps and spy_teacher.generate_calls == steps
    assert spy_student.score_calls == steps, "teacher chunks are scored by the student in one call per step"
    for result in results:
        tree = result.tree
        children = [tree.nodes[i] for i in tree.root.children]
        assert sum(c.prior for c in children) == pytest.approx(1.0)
        proposers = {p for c in children for p in c.info["proposers"]}
        assert proposers >= {"student", "tutor:1", "tutor:0"}
        assert len({c.action for c in children}) == len(children), "duplicate chunks are merged"
        for c in children:
            assert c.state.code in ("1", "0") and len(c.state.step_pres) == 1
            assert c.prior == pytest.approx(math.exp(c.info["pre"]) / sum(math.exp(x.info["pre"]) for x in children))


def test_trajectories_carry_the_combined_reward(student):
    env, results = run_search(student)
    for result in results:
        paths = trajectories(result, env)
        assert paths, "every search yields root-to-leaf paths"
        for leaf, answer in paths:
            state, parts = leaf.state, answer.breakdown
            assert set(state.code) <= {"s"}, "without a teacher, student chunks are unlabelled"
            assert answer.text == state.answer.text and answer.token_ids == state.answer.token_ids
            assert parts.accumulated_pre == pytest.approx(sum(0.95**i * x for i, x in enumerate(state.step_pres)))
            assert answer.reward == pytest.approx(0.4 * parts.hre + 0.6 * parts.accumulated_pre
                                                  + parts.length_penalty + parts.direction_bonus)
            assert parts.length_penalty == pytest.approx(-0.01 * len(state.code))
            assert leaf.terminal or parts.hre == 0.0, \
                "reward 'combined' (the original system's sum) counts HRE only at a terminal"


def test_seeded_text_search_is_reproducible(student):
    _, first = run_search(student, seed=5)
    _, second = run_search(student, seed=5)
    assert [r.tree.to_json() for r in first] == [r.tree.to_json() for r in second]


def test_answer_line_and_similarity():
    assert ANSWER_LINE.search("so 3 + 4 = 7\n#### 7\n") and not ANSWER_LINE.search("#### 7")
    assert complete_answer("3 + 4 = 7\n#### 7\n#### 7\n#### 7", ended=False) == ("3 + 4 = 7\n#### 7\n", True)
    assert complete_answer("3 + 4 = 7\n#### 7", ended=True) == ("3 + 4 = 7\n#### 7", True)
    assert complete_answer("3 + 4 = 7\n#### 7", ended=False) == ("3 + 4 = 7\n#### 7", False), "cut: unfinished"
    assert word_similarity("a b c", "a b d") == pytest.approx(0.5)


def test_a_checkers_verdict_finishes_a_child_without_an_end_of_sequence_token(student):
    class Always:  # a terminal checker that calls every text complete
        def check(self, questions, texts):
            return [True] * len(texts)

    rows = arithmetic_problems(1, seed=3, steps=(1,))
    env = TextEnv(student, rows, TextSearchSettings(expansion="chunk", student_samples=2, chunk_tokens=8),
                  replace(TEXT_SEARCH_SAMPLING, max_new_tokens=48), checker=Always())
    (expansion,) = env.expand([env.root(0)], random.Random(0))
    assert any("checker" in c.info for c in expansion.children), "8-token chunks leave some children open"
    for child in expansion.children:
        answer = child.state.answer
        assert answer.finished and env.is_terminal(child.state)
        assert answer.eos == ("checker" not in child.info), "an answer line ends with EOS, a verdict does not"
        assert answer.reward == float(answer.correct), "scored as a finished answer"
