"""Text as a search environment: a node is a partial answer (its token ids), a child appends a step (a line or a chunk)
from the student and, when given, "right" and "wrong" chunks from teachers. Not the search (azlib.mcts.search)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple, Sequence

from azlib.sampled_answer import Answer, scored_answer
from azlib.data.rows import Row
from azlib.prompts import chat_prompt
from azlib.mcts.search import Child, Expansion, SearchResult
from azlib.mcts.tree import Node
from azlib.models.generation import Backend, Sample, TokenIds
from azlib.rewards import RewardWeights, perplexity_reward
from azlib.settings import AnswerSampling, RewardKind, TextSearchSettings

if TYPE_CHECKING:
    from azlib.teachers import TeacherEnsemble, TerminalChecker



# TextEnv's sampling when none is given (AnswerSampling's length): a partial answer of max_new_tokens is terminal,
# rollouts stop there.
TEXT_SEARCH_SAMPLING = AnswerSampling(temperature=0.8, top_p=0.95)


@dataclass(frozen=True)
class TextState:
    """A partial answer: its ids so far as an Answer (which names its problem and holds their text), scored as if it
    ended here (ids in the student's vocabulary: as sampled; a teacher's chunk as the student encodes it, with the
    student's log-probs), and the search's bookkeeping: the path code ('1' right, '0' wrong, 's' student chunk
    without a teacher to judge it), each step's PRE, and the tokens generated."""

    answer: Answer
    code: str = ""
    step_pres: tuple[float, ...] = ()
    tokens: int = 0


class ProposedStep(NamedTuple):
    """A child's step as proposed, in the student's ids: who wrote it ("student" or a teacher), the teacher's label
    ("1" right, "0" wrong; None for the student), the step (a teacher's Proposal as the student encodes and scores
    its text), and the whole rollout it was cut from (None: a chunk)."""

    writer: str
    label: str | None
    step: Sample
    rollout: Sample | None = None


def word_similarity(a: str, b: str) -> float:
    """Jaccard overlap of the words of two chunks (how close the student came to a teacher chunk)."""
    x, y = set(a.split()), set(b.split())
    return len(x & y) / len(x | y) if x | y else 1.0


class TextEnv:
    """States are TextStates: each child's text is cut at its answer line and scored once, when it is made (under reward
    "combined", the original system's sum, `partial` also scores a state that is not finished, as a partial answer)."""

    two_player = False

    def __init__(self, student: Backend, problems: Sequence[Row], settings: TextSearchSettings = TextSearchSettings(),
                 sampling: AnswerSampling = TEXT_SEARCH_SAMPLING, reward: RewardKind = "correctness",
                 teachers: TeacherEnsemble | None = None, weights: RewardWeights = RewardWeights(),
                 checker: TerminalChecker | None = None):
        self.student, self.teachers, self.checker = student, teachers, checker
        self.problems, self.settings, self.sampling, self.weights = list(problems), settings, sampling, weights
        self.reward = reward
        self.calls = 0
        self._prompt_ids: dict[int, list[int]] = {}

    def root(self, problem: int) -> TextState:
        return TextState(self._answer(problem, (), (), False, terminal=True))

    def context(self, problem: int, ids: Sequence[int] = ()) -> TokenIds:
        """A problem's chat prompt in the student's ids (encoded once; what its answers are trained under), then a
        partial answer's ids as they were sampled: what the student continues a state from, and a step after it is
        scored and trained under."""
        if problem not in self._prompt_ids:
            self._prompt_ids[problem] = self.student.encode_prompt(chat_prompt(self.problems[problem]["prompt"]))
        return TokenIds(self._prompt_ids[problem] + list(ids))

    def is_terminal(self, state: TextState) -> bool:
        return state.answer.finished or state.tokens >= self.sampling.max_new_tokens

    def terminal_value(self, state: TextState) -> float:
        return state.answer.reward

    def partial(self, state: TextState) -> Answer:
        """A state's answer scored as a partial one: reward "combined" (the original system's sum) counts HRE
        only at a terminal (a state's answer is scored as one), the correctness reward only for a finished answer
        (no other score)."""
        a = state.answer
        if self.reward != "combined" or a.finished:
            return a
        # its ids are cut already: scored again as they are, not terminal
        return self._answer(a.problem, a.token_ids, a.logprobs, False, pres=state.step_pres, code=state.code)

    def _answer(self, problem: int, ids: Sequence[int], logprobs: Sequence[float], ended: bool, **scoring) -> Answer:
        return scored_answer(self.student, problem, self.problems[problem]["answer"], ids, logprobs, ended,
                             kind=self.reward, weights=self.weights, **scoring)

    def expand(self, states: Sequence[TextState], rng: random.Random) -> list[Expansion]:
        """Every leaf of every problem at once: one batched student generate, one batched call per asked teacher, one
        batched student score of the teachers' chunks. Expansion "rollout" (classic MCTS simulation): K complete
        answers from the leaf, each answer's first line a child valued by its reward, so every generated token ends
        in a checkable answer; "chunk" (the original system): `chunk_tokens`-long chunks, the leaf valued by the
        reward of its partial text."""
        s, sampling = self.settings, self.sampling
        self.calls += 1
        questions = [self.problems[st.answer.problem]["prompt"] for st in states]
        seed = rng.randrange(2**31)
        prompts = [self.context(st.answer.problem, st.answer.token_ids) for st in states]
        if s.expansion == "rollout":  # each leaf gets K complete answers; one call for all leaves
            left = max(sampling.max_new_tokens - min(st.tokens for st in states), 1)
            student = self.student.generate(prompts, n=s.student_samples, max_new_tokens=left,
                                            temperature=sampling.temperature, top_p=sampling.top_p, seed=seed,
                                            stop_at_answer=True)
            proposals = [[ProposedStep("student", None, self._first_line(x, st), x) for x in group]
                         for group, st in zip(student, states)]
        else:
            student = self.student.generate(prompts, n=s.student_samples, max_new_tokens=s.chunk_tokens,
                                            temperature=sampling.temperature, top_p=sampling.top_p, seed=seed)
            proposals = [[ProposedStep("student", None, x) for x in group] for group in student]
        if self.teachers is not None:
            asked = self.teachers.propose([(q, st.answer.text) for q, st in zip(questions, states)],
                                          n=s.teacher_samples, max_new_tokens=s.chunk_tokens, seed=seed + 1)
            # A teacher writes text: its chunk in the student's ids, encoded once, is the step (scored and trained on);
            # the student's log-probs of those ids are its prior and its PRE.
            flat = [(i, p, tuple(self.student.encode_continuation(p.sample.text))) for i, group in enumerate(asked)
                    for p in group]
            scores = self.student.score([prompts[i] for i, _, _ in flat], [ids for *_, ids in flat]) if flat else []
            for (i, p, ids), logprobs in zip(flat, scores):
                proposals[i].append(ProposedStep(p.teacher, p.label, replace(p.sample, token_ids=ids,
                                                                             logprobs=tuple(logprobs))))
        expansions = [self._expansion(st, props) for st, props in zip(states, proposals)]
        if self.checker is not None:
            self._check(expansions, questions)
        return expansions

    def _first_line(self, rollout: Sample, state: TextState) -> Sample:
        """A rollout as its first line (the child's step), the whole answer kept in the ProposedStep."""
        left = self.sampling.max_new_tokens - state.tokens
        tokens, logprobs = rollout.token_ids[:left], rollout.logprobs[:left]
        cut = next((i + 1 for i, token in enumerate(tokens[:-1]) if self.student.writes_newline(token)), len(tokens))
        if self.student.tokenizer.decode(tokens[cut:], skip_special_tokens=True).strip() == "":
            cut = len(tokens)  # nothing but space after the line: the line is the whole answer
        whole = cut == len(tokens) == len(rollout.token_ids)  # the line is the whole rollout, not cut at the cap
        text = rollout.text if whole else self.student.tokenizer.decode(tokens[:cut], skip_special_tokens=True)
        finish = rollout.finish_reason if whole else "length"
        return Sample(text, tuple(tokens[:cut]), tuple(logprobs[:cut]), finish, rollout.prompt_tokens, cut)

    def _rollout(self, state: TextState, rollout: Sample) -> Answer:
        """A rollout's complete answer, scored (finished: ended by EOS or by its answer line). Leaves of every depth
        share one generate call, whose cap is the shallowest leaf's: a deeper leaf's rollout is cut at its own cap
        (the tokens past it were generated, and the backend counted them)."""
        left = self.sampling.max_new_tokens - state.tokens
        if rollout.completion_tokens > left:
            ids = rollout.token_ids[:left]
            rollout = Sample(self.student.tokenizer.decode(ids, skip_special_tokens=True), tuple(ids),
                             tuple(rollout.logprobs[:left]), "length", rollout.prompt_tokens, left)
        return self._continued(state, rollout, "s", perplexity_reward(rollout.logprobs)).answer

    def _continued(self, state: TextState, step: Sample, label: str, pre: float, terminal: bool = False) -> TextState:
        """The state continued by a step's ids: its answer cut at its answer line and scored, the step's label and PRE
        on its path. Its length counts the step's ids (a teacher's chunk as the student encodes it, not the teacher's
        own token count)."""
        a, code, pres = state.answer, state.code + label, (*state.step_pres, pre)
        answer = self._answer(a.problem, a.token_ids + step.token_ids, a.logprobs + step.logprobs,
                              step.finish_reason == "stop", pres=pres, code=code, terminal=terminal)
        return TextState(answer, code, pres, state.tokens + len(step.token_ids))

    def _expansion(self, state: TextState, proposals: list[ProposedStep]) -> Expansion:
        teacher_chunks = {p.label: p.step.text for p in proposals if p.label is not None}
        merged: dict[str, list[ProposedStep]] = {}  # one child per distinct step, proposed by one or more
        for p in proposals:
            if p.step.text:
                merged.setdefault(p.step.text, []).append(p)
        children, weights = [], []
        for chunk, same in merged.items():
            step = same[0].step
            similarity = {label: word_similarity(chunk, t) for label, t in teacher_chunks.items()}
            labels = [p.label for p in same if p.label is not None]
            if labels:
                label = labels[0]
            elif similarity:  # a student chunk joins the teacher branch it resembles most
                label = "1" if similarity.get("1", 0.0) >= similarity.get("0", 0.0) else "0"
            else:
                label = "s"
            rollouts = [self._rollout(state, p.rollout) for p in same if p.rollout is not None]
            pre = perplexity_reward(step.logprobs)
            # finished: EOS, or an answer line (a rollout that was stopped there, or a chunk that wrote one)
            child = self._continued(state, step, label, pre, terminal=True)
            weights.append(math.exp(pre))  # prior: normalised exp(mean token log-prob) under the student
            proposers = [p.writer if p.label is None else f"{p.writer}:{p.label}" for p in same]
            info = {"chunk": chunk, "proposers": proposers, "pre": pre, "student_similarity": similarity.get("1")}
            if rollouts:
                info["rollouts"] = rollouts
            children.append(Child(chunk, child, 0.0, info, tuple(r.reward for r in rollouts)))
        total = sum(weights) or 1.0
        children = [c._replace(prior=w / total) for c, w in zip(children, weights)]
        tokens = sum((p.rollout or p.step).completion_tokens for p in proposals)
        return Expansion(children, self.partial(state).reward, tokens)

    def _check(self, expansions: list[Expansion], questions: list[str]) -> None:
        """Children the rules left open: the checker decides (one batched call) whether they are complete."""
        open_children = [(q, e, k) for q, e in zip(questions, expansions) for k, c in enumerate(e.children)
                         if not c.state.answer.finished]
        verdicts = self.checker.check([q for q, _, _ in open_children],
                                      [e.children[k].state.answer.text for _, e, k in open_children])
        for (_, expansion, k), done in zip(open_children, verdicts):
            child = expansion.children[k]
            if done:  # complete without its answer line: finished, with no end-of-sequence token to train
                a = child.state.answer
                finished = self._answer(a.problem, a.token_ids, a.logprobs, True,
                                        pres=child.state.step_pres, code=child.state.code, terminal=True)
                child = child._replace(state=replace(child.state, answer=replace(finished, eos=False)))
            expansion.children[k] = child._replace(info={**child.info, "checker": done})


def teacher_values(result: SearchResult) -> dict[str, list[float]]:
    """Per teacher, the mean backed-up value (Q) of every visited child it proposed: what
    TeacherEnsemble.credit turns into weights."""
    out: dict[str, list[float]] = {}
    for node in result.tree.nodes:
        if node.visits:
            for proposer in node.info.get("proposers", []):
                if ":" in proposer:
                    out.setdefault(proposer.split(":")[0], []).append(node.q)
    return out


def trajectories(result: SearchResult, env: TextEnv) -> list[tuple[Node, Answer]]:
    """Every root-to-leaf path of a searched tree: its leaf (visits, Q, path code) and its text scored as an answer
    (a partial one at a leaf that is not terminal): the raw material for GRPO groups."""
    tree = result.tree
    return [(node, node.state.answer if node.terminal else env.partial(node.state))
            for node in (tree.nodes[i] for i in tree.leaves())]


def tree_answers(result: SearchResult) -> list[Answer]:
    """Every complete answer the search wrote for its problem, once each: the rollouts ("rollout" expansion) and
    the finished or capped terminal nodes."""
    out, seen = [], set()
    for node in result.tree.nodes[1:]:
        for answer in [*node.info.get("rollouts", []), *([node.state.answer] if node.terminal and node.visits else [])]:
            if answer.text not in seen:
                seen.add(answer.text)
                out.append(answer)
    return out


def search_answer(result: SearchResult) -> Answer:
    """The answer the search recommends: most visited children down to a leaf, completed by its best rollout."""
    tree, node = result.tree, result.tree.root
    while node.children:
        node = max((tree.nodes[c] for c in node.children), key=lambda n: n.visits)
    rollouts = node.info.get("rollouts")
    return max(rollouts, key=lambda r: r.reward) if rollouts and not node.terminal else node.state.answer
