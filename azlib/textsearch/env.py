"""Text as a search environment: a node is a partial answer, a child appends a step (a line, or a
chunk of tokens) proposed by the student and, when given, "right" and "wrong" chunks from teachers.

Two expansions. "rollout" (default; classic MCTS simulation): the student writes K complete answers
from the leaf; each answer's first line becomes a child, valued by the answer's reward, so the search
sees correctness before any node is terminal and every generated token ends in a checkable answer.
"chunk" (the original system): children are `chunk_tokens`-long chunks and the leaf is valued by the reward of
its partial text. One `expand` call serves every leaf of every problem: one batched student generate,
one batched call per asked teacher, one batched student score of the teachers' chunks.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Sequence

from azlib.data.rows import Row
from azlib.prompts import continuation_prompt
from azlib.textsearch.forking import ids_for_text
from azlib.mcts.search import Child, Expansion, SearchResult
from azlib.models.generation import AnswerSampling, Backend, Sample
from azlib.rewards import RewardBreakdown, RewardKind, RewardWeights, answer_reward, complete_answer, perplexity_reward

if TYPE_CHECKING:
    from azlib.teachers import TeacherEnsemble, TerminalChecker



@dataclass(frozen=True)
class TextSearchSettings:
    """How a leaf is expanded. Defaults: 3 student rollouts per leaf; a teacher, when present, adds
    `teacher_samples` right and as many wrong chunks (the original: 5 each, 10 tokens). How the text is
    sampled (AnswerSampling) and rewarded (RewardKind) are the env's other arguments: a training run shares
    them with its update and its forks."""

    expansion: Literal["rollout", "chunk"] = "rollout"
    student_samples: int = 3  # rollouts (or chunks) per expanded leaf
    teacher_samples: int = 1
    chunk_tokens: int = 16  # "chunk" expansion, and teachers' chunks

    def __post_init__(self):
        if self.expansion not in ("rollout", "chunk"):
            raise ValueError(f"expansion must be 'rollout' or 'chunk', got {self.expansion!r}")
        if min(self.student_samples, self.teacher_samples, self.chunk_tokens) < 1:
            raise ValueError("student_samples, teacher_samples and chunk_tokens must be >= 1")


# TextEnv's sampling when none is given: a partial answer of max_new_tokens is terminal, rollouts stop there.
TEXT_SEARCH_SAMPLING = AnswerSampling(temperature=0.8, top_p=0.95, max_new_tokens=256)


def word_similarity(a: str, b: str) -> float:
    """Jaccard overlap of the words of two chunks (how close the student came to a teacher chunk)."""
    x, y = set(a.split()), set(b.split())
    return len(x & y) / len(x | y) if x | y else 1.0


@functools.lru_cache(maxsize=1 << 15)
def _answer_reward(text: str, gold: str, finished: bool, step_pres: tuple[float, ...], path_code: str,
                   kind: RewardKind, weights: RewardWeights) -> RewardBreakdown:
    """answer_reward is a pure function of its arguments: memoised, each answer's reward is computed once, however
    many readers (the search's values, tree_answers, search_answer, the update's groups) ask for it."""
    return answer_reward(text, gold, finished=finished, step_pres=step_pres, path_code=path_code, kind=kind,
                         weights=weights)


class TextEnv:
    """States are dicts: problem index, text so far and its token ids in the student's vocabulary (as sampled;
    a teacher's chunk as the student encodes it), path code ('1' right, '0' wrong, 's' student chunk without a
    teacher to judge it), per-step PRE, tokens, finished, and whether it ended with EOS."""

    two_player = False

    def __init__(self, student: Backend, problems: Sequence[Row], settings: TextSearchSettings = TextSearchSettings(),
                 sampling: AnswerSampling = TEXT_SEARCH_SAMPLING, reward: RewardKind = "correctness",
                 teachers: TeacherEnsemble | None = None, weights: RewardWeights = RewardWeights(),
                 checker: TerminalChecker | None = None):
        self.student, self.teachers, self.checker = student, teachers, checker
        self.problems, self.settings, self.sampling, self.weights = list(problems), settings, sampling, weights
        self.reward = reward
        self.calls = 0

    def root(self, problem: int) -> dict[str, Any]:
        return {"problem": problem, "text": "", "ids": [], "code": "", "step_pres": [], "tokens": 0, "finished": False,
                "eos": False}

    def is_terminal(self, state: dict) -> bool:
        return state["finished"] or state["tokens"] >= self.sampling.max_new_tokens

    def rewards(self, state: dict, terminal: bool):
        """The reward of a state's text. The original system counts HRE at any terminal (a depth or token cap
        too); the correctness reward only for a finished answer."""
        finished = state["finished"] if self.reward == "correctness" else terminal
        return _answer_reward(state["text"], self.problems[state["problem"]]["answer"], finished,
                              tuple(state["step_pres"]), state["code"], self.reward, self.weights)

    def terminal_value(self, state: dict) -> float:
        return self.rewards(state, terminal=True).total

    def expand(self, states: Sequence[dict], rng: random.Random) -> list[Expansion]:
        s, sampling = self.settings, self.sampling
        self.calls += 1
        questions = [self.problems[st["problem"]]["prompt"] for st in states]
        seed = rng.randrange(2**31)
        prompts = [continuation_prompt(q, st["text"]) for q, st in zip(questions, states)]
        if s.expansion == "rollout":  # each leaf gets K complete answers; one call for all leaves
            left = max(sampling.max_new_tokens - min(st["tokens"] for st in states), 1)
            student = self.student.generate(prompts, n=s.student_samples, max_new_tokens=left,
                                            temperature=sampling.temperature, top_p=sampling.top_p, seed=seed,
                                            stop_at_answer=True)
            proposals = [[("student", None, self._first_line(x, st), x) for x in group]
                         for group, st in zip(student, states)]
        else:
            student = self.student.generate(prompts, n=s.student_samples, max_new_tokens=s.chunk_tokens,
                                            temperature=sampling.temperature, top_p=sampling.top_p, seed=seed)
            proposals = [[("student", None, x, None) for x in group] for group in student]
        if self.teachers is not None:
            asked = self.teachers.propose([(q, st["text"]) for q, st in zip(questions, states)],
                                          n=s.teacher_samples, max_new_tokens=s.chunk_tokens, seed=seed + 1)
            flat = [(i, p, tuple(self.student.encode_continuation(p.sample.text))) for i, group in enumerate(asked)
                    for p in group]
            # The student's own ids and log-probs of the teachers' chunks: their prior and their PRE.
            scores = self.student.score([continuation_prompt(questions[i], states[i]["text"]) for i, _, _ in flat],
                                        [ids for *_, ids in flat]) if flat else []
            for (i, p, ids), logprobs in zip(flat, scores):
                proposals[i].append((p.teacher, p.label, replace(p.sample, token_ids=ids, logprobs=tuple(logprobs)),
                                     None))
        expansions = [self._expansion(st, props) for st, props in zip(states, proposals)]
        if self.checker is not None:
            self._check(expansions, questions)
        return expansions

    def _first_line(self, rollout: Sample, state: dict) -> Sample:
        """A rollout as its first line (the child's step), the whole answer kept in `rollout`."""
        left = self.sampling.max_new_tokens - state["tokens"]
        tokens, logprobs = rollout.token_ids[:left], rollout.logprobs[:left]
        cut = next((i + 1 for i, token in enumerate(tokens[:-1]) if self.student.writes_newline(token)), len(tokens))
        if self.student.tokenizer.decode(tokens[cut:], skip_special_tokens=True).strip() == "":
            cut = len(tokens)  # nothing but space after the line: the line is the whole answer
        whole = cut == len(tokens) == len(rollout.token_ids)  # the line is the whole rollout, not cut at the cap
        text = rollout.text if whole else self.student.tokenizer.decode(tokens[:cut], skip_special_tokens=True)
        finish = rollout.finish_reason if whole else "length"
        return Sample(text, tuple(tokens[:cut]), tuple(logprobs[:cut]), finish, rollout.prompt_tokens, cut)

    def _rollout_value(self, state: dict, rollout: Sample) -> dict[str, Any]:
        """A rollout's complete answer and its reward (finished: ended by EOS or by its answer line). Leaves of
        every depth share one generate call, whose cap is the shallowest leaf's: a deeper leaf's rollout is cut
        at its own cap (the tokens past it were generated, and the backend counted them)."""
        left = self.sampling.max_new_tokens - state["tokens"]
        if rollout.completion_tokens > left:
            ids = rollout.token_ids[:left]
            rollout = Sample(self.student.tokenizer.decode(ids, skip_special_tokens=True), tuple(ids),
                             tuple(rollout.logprobs[:left]), "length", rollout.prompt_tokens, left)
        text, finished = complete_answer(state["text"] + rollout.text, rollout.finish_reason == "stop")
        ids = self._ids_of(text, state["ids"] + list(rollout.token_ids))
        r = _answer_reward(text, self.problems[state["problem"]]["answer"], finished,
                           (*state["step_pres"], perplexity_reward(rollout.logprobs)), state["code"] + "s",
                           self.reward, self.weights)
        return {"text": text, "ids": ids, "reward": r.total, "hre": r.hre, "finished": finished, "eos": finished,
                "tokens": state["tokens"] + rollout.completion_tokens}

    def _ids_of(self, text: str, ids: list[int]) -> list[int]:
        """The sampled ids of `text`, which is all of their text or its head (cut at the answer line)."""
        return ids if len(text) >= len(self.student.tokenizer.decode(ids, skip_special_tokens=True)) else \
            ids[:ids_for_text(self.student.tokenizer, ids, len(text))]

    def _expansion(self, state: dict, proposals: list[tuple[str, str | None, Sample, Sample | None]]) -> Expansion:
        """proposals: (who, teacher label or None, the child's step, the rollout it was cut from or None)."""
        teacher_chunks = {label: x.text for _, label, x, _ in proposals if label is not None}
        merged: dict[str, dict] = {}
        for who, label, sample, rollout in proposals:
            if not sample.text:
                continue
            entry = merged.setdefault(sample.text, {"sample": sample, "proposers": [], "labels": [], "rollouts": []})
            entry["proposers"].append(who if label is None else f"{who}:{label}")
            entry["labels"] += [label] if label is not None else []
            if rollout is not None:
                entry["rollouts"].append(self._rollout_value(state, rollout))
        children, weights = [], []
        for chunk, entry in merged.items():
            sample = entry["sample"]
            similarity = {label: word_similarity(chunk, t) for label, t in teacher_chunks.items()}
            if entry["labels"]:
                label = entry["labels"][0]
            elif similarity:  # a student chunk joins the teacher branch it resembles most
                label = "1" if similarity.get("1", 0.0) >= similarity.get("0", 0.0) else "0"
            else:
                label = "s"
            # finished: EOS, or an answer line (a rollout that was stopped there, or a chunk that wrote one)
            text, finished = complete_answer(state["text"] + chunk, sample.finish_reason == "stop")
            pre = perplexity_reward(sample.logprobs)
            child = {"problem": state["problem"], "text": text,
                     "ids": self._ids_of(text, state["ids"] + list(sample.token_ids)), "code": state["code"] + label,
                     "step_pres": [*state["step_pres"], pre], "tokens": state["tokens"] + sample.completion_tokens,
                     "finished": finished, "eos": finished}
            weights.append(math.exp(pre))  # prior: normalised exp(mean token log-prob) under the student
            info = {"chunk": chunk, "proposers": entry["proposers"], "pre": pre,
                    "student_similarity": similarity.get("1")}
            if entry["rollouts"]:
                info["rollouts"] = entry["rollouts"]
            children.append(Child(chunk, child, 0.0, info, tuple(r["reward"] for r in entry["rollouts"])))
        total = sum(weights) or 1.0
        children = [c._replace(prior=w / total) for c, w in zip(children, weights)]
        tokens = sum((rollout or x).completion_tokens for _, _, x, rollout in proposals)
        return Expansion(children, self.rewards(state, terminal=False).total, tokens)

    def _check(self, expansions: list[Expansion], questions: list[str]) -> None:
        """Children the rules left open: the checker decides (one batched call) whether they are complete."""
        open_children = [(q, c) for q, e in zip(questions, expansions) for c in e.children if not c.state["finished"]]
        verdicts = self.checker.check([q for q, _ in open_children], [c.state["text"] for _, c in open_children])
        for (_, child), done in zip(open_children, verdicts):
            child.state["finished"] = done
            child.info["checker"] = done


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


def visit_targets(result: SearchResult, min_visits: int = 2) -> list[dict[str, Any]]:
    """AlphaZero-style policy targets: at every node visited at least `min_visits` times, the
    partial answer and the visit distribution over the chunks that continue it."""
    tree, out = result.tree, []
    for node in tree.nodes:
        children = [tree.nodes[c] for c in node.children]
        total = sum(c.visits for c in children)
        if node.visits >= min_visits and total:
            out.append({"problem": node.state["problem"], "text": node.state["text"],
                        "chunks": [c.action for c in children], "pi": [c.visits / total for c in children]})
    return out


def trajectories(result: SearchResult, env: TextEnv) -> list[dict[str, Any]]:
    """Every root-to-leaf path of a searched tree with its rewards: the raw material for GRPO groups."""
    tree, out = result.tree, []
    for leaf in tree.leaves():
        node = tree.nodes[leaf]
        breakdown = env.rewards(node.state, terminal=node.terminal)
        out.append({"problem": node.state["problem"], "completion": node.state["text"], "code": node.state["code"],
                    "ids": node.state["ids"], "terminal": node.terminal, "finished": node.state["finished"],
                    "eos": node.state["eos"], "visits": node.visits, "q": node.q, **breakdown.as_dict()})
    return out


def tree_answers(result: SearchResult, env: TextEnv) -> list[dict[str, Any]]:
    """Every complete answer the search wrote for its problem, once each: the rollouts ("rollout"
    expansion) and the finished or capped terminal nodes, with their sampled ids, reward, HRE, whether they
    were finished, and whether they ended with the end-of-sequence token."""
    tree, out, seen = result.tree, [], set()
    for node in tree.nodes[1:]:
        answers = list(node.info.get("rollouts", []))
        if node.terminal and node.visits:
            r = env.rewards(node.state, terminal=True)
            answers.append({"text": node.state["text"], "ids": node.state["ids"], "reward": r.total, "hre": r.hre,
                            "finished": node.state["finished"], "eos": node.state["eos"],
                            "tokens": node.state["tokens"]})
        for answer in answers:
            if answer["text"] not in seen:
                seen.add(answer["text"])
                out.append({"problem": node.state["problem"], **answer})
    return out
