"""The explorer a training run uses: `explore(indices, seed)` turns problems into an Exploration, the rollouts one
update trains on and what the step's log counts. Not the update (azlib.grpo), not the loop (azlib.training)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Sequence

from azlib.data.rows import Row
from azlib.grpo import Rollout
from azlib.mcts.search import search
from azlib.models.generation import Backend
from azlib.rewards import RewardWeights
from azlib.settings import EXPLORER_OF, SIGNAL_KINDS, SearchSettings, SignalKind
from azlib.games.text.env import TextEnv, search_answer, teacher_values
from azlib.games.text.forking import ForkingSearch
from azlib.games.text.signals import forked_groups, tree_groups

if TYPE_CHECKING:
    from azlib.teachers import TeacherEnsemble, TerminalChecker


@dataclass(frozen=True)
class Exploration:
    """What a step's explorer found (on one rank: for its share of the step's problems)."""

    rollouts: list[Rollout]
    tokens: int
    prefill: int | None  # prompt tokens read (forking trees count them; the text env does not)
    correct: list[bool]  # what the step's accuracy counts: the explorer's `accuracy`
    credits: list[dict[str, list[float]]] = field(default_factory=list)  # per search, the teachers' backed-up values

    @staticmethod
    def joined(parts: Sequence[Exploration]) -> Exploration:
        """The ranks' explorations as one, in rank order; group keys renumbered so no two ranks' groups share one."""
        rollouts, offset = [], 0
        for part in parts:
            rollouts += [replace(r, group=r.group + offset) for r in part.rollouts]
            offset += 1 + max((r.group for r in part.rollouts), default=-1)
        prefills = [p.prefill for p in parts]
        return Exploration(rollouts, sum(p.tokens for p in parts), None if None in prefills else sum(prefills),
                           [a for p in parts for a in p.correct], [c for p in parts for c in p.credits])


class TreeExplorer:
    """One MCTS search (azlib.mcts.search) over the text env per problem, its tree turned into signal `kind`."""

    # each problem's search answer (its most-visited path, completed by its best rollout by reward) right or not:
    # search plus verifier, not the student alone
    accuracy = "answer_accuracy"

    def __init__(self, env: TextEnv, search: SearchSettings, kind: SignalKind):
        self.env, self.search, self.kind = env, search, kind
        # sibling steps are not answers: their runs count no truncated answers (the log's share reads 0)
        self.whole_answers = kind in ("answers", "paths")

    def explore(self, indices: Sequence[int], seed: int) -> Exploration:
        results = search(self.env, [self.env.root(i) for i in indices], self.search, random.Random(seed))
        credits = [teacher_values(r) for r in results] if self.env.teachers is not None else []
        # prefill None: the text env does not count its prompts
        return Exploration(tree_groups(results, self.env, self.kind), sum(r.tokens for r in results), None,
                           [search_answer(r).correct for r in results], credits)

    def step_log(self, found: Exploration, good: Sequence[Rollout]) -> dict:
        """The step log's own field of a search (search/answers): how many search answers its accuracy counts."""
        return {"answers": len(found.correct)}


class ForkExplorer:
    """One forking tree (azlib.games.text.forking) per problem: `group_size` independent answers, then forks."""

    # the student's own accuracy before the step's update: its G independent answers to problems it has not trained
    # on yet (forks aim at unsolved problems, so all leaves together would understate it)
    accuracy = "sampled_accuracy"
    whole_answers = True

    def __init__(self, forking: ForkingSearch, group_size: int, kind: Literal["answers", "treerl"]):
        self.forking, self.group_size, self.kind = forking, group_size, kind

    def explore(self, indices: Sequence[int], seed: int) -> Exploration:
        trees = self.forking.grow(indices, self.group_size, seed)
        return Exploration(forked_groups(trees, self.forking.backend, self.kind), sum(t.tokens for t in trees),
                           sum(t.prefill for t in trees), [a.correct for t in trees for a in t.independent_answers()])

    def step_log(self, found: Exploration, good: Sequence[Rollout]) -> dict:
        """The step log's own fields of forking trees (search/<key>): who wrote the verified answers."""
        return {"verified_by_teacher": sum(r.answer.writer != "student" for r in good),
                "verified_by_writer": dict(Counter(r.answer.writer for r in good))}


def explorer(settings, backend: Backend, problems: Sequence[Row], signal: SignalKind, *,
             teachers: TeacherEnsemble | None = None, checker: TerminalChecker | None = None,
             weights: RewardWeights = RewardWeights()) -> TreeExplorer | ForkExplorer:
    """The explorer of `signal` under a run's settings (azlib.settings.TrainerSettings)."""
    if signal != settings.train.signal:  # the sampling (a chunked search's length) follows the signal
        settings = replace(settings, train=replace(settings.train, signal=signal))
    t = settings.train
    if EXPLORER_OF[signal] == "tree":
        env = TextEnv(backend, problems, settings.text, settings.sampling, t.reward, teachers=teachers,
                      weights=weights, checker=checker)
        return TreeExplorer(env, settings.search, signal)
    fork = replace(settings.fork, rounds=0) if signal == "independent" else settings.fork
    forking = ForkingSearch(backend, problems, fork, sampling=settings.sampling, reward=t.reward, weights=weights,
                            teachers=teachers)
    return ForkExplorer(forking, t.group_size, "treerl" if signal == "treerl" else "answers")


def accuracy_column(signal: str) -> str:
    """The step log's accuracy for a run of this `train.signal`: its explorer's `accuracy`, "answer_accuracy" for
    a search (search plus verifier), "sampled_accuracy" where the answers are sampled or forked."""
    if signal not in SIGNAL_KINDS:
        raise ValueError(f"signal must be one of {SIGNAL_KINDS}, got {signal!r}")
    return {"tree": TreeExplorer, "fork": ForkExplorer}[EXPLORER_OF[signal]].accuracy
