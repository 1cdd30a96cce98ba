"""Text as a search environment: a node is a partial answer, a child appends a chunk of tokens
proposed by the student (and, when given, "right" and "wrong" chunks from a teacher ensemble).

One `expand` call serves every leaf of every problem in a search step: one batched student
generate, one batched call per asked teacher, one batched student score of the teachers' chunks.
Leaf values come from azlib.rewards; the tree's paths become GRPO groups or visit-count targets.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from azlib.data.rows import Row
from azlib.eval import continuation_prompt
from azlib.mcts.search import Child, Expansion, SearchResult
from azlib.models.generation import Backend, Sample
from azlib.rewards import RewardWeights, combined_reward, perplexity_reward

if TYPE_CHECKING:
    from azlib.teachers import TeacherEnsemble, TerminalChecker

# An answer line followed by a newline, or end of text: the model has committed to its answer.
ANSWER_LINE = re.compile(r"####\s*-?[\d,]*\.?\d+\s*\n")


@dataclass(frozen=True)
class TextSearchSettings:
    """How a leaf is expanded. Defaults: 3 student chunks of 16 tokens; a teacher, when present,
    adds `teacher_samples` right and as many wrong chunks (the original: 5 each, 10 tokens)."""

    student_samples: int = 3
    teacher_samples: int = 1
    chunk_tokens: int = 16
    temperature: float = 0.8
    top_p: float = 0.95
    max_answer_tokens: int = 256  # a partial answer this long is terminal


def word_similarity(a: str, b: str) -> float:
    """Jaccard overlap of the words of two chunks (how close the student came to a teacher chunk)."""
    x, y = set(a.split()), set(b.split())
    return len(x & y) / len(x | y) if x | y else 1.0


class TextEnv:
    """States are dicts: problem index, text so far, path code ('1' right, '0' wrong, 's' student
    chunk without a teacher to judge it), per-step PRE, tokens, finished."""

    two_player = False

    def __init__(self, student: Backend, problems: Sequence[Row], settings: TextSearchSettings = TextSearchSettings(),
                 teachers: TeacherEnsemble | None = None, weights: RewardWeights = RewardWeights(),
                 checker: TerminalChecker | None = None):
        self.student, self.teachers, self.checker = student, teachers, checker
        self.problems, self.settings, self.weights = list(problems), settings, weights
        self.calls = 0

    def root(self, problem: int) -> dict[str, Any]:
        return {"problem": problem, "text": "", "code": "", "step_pres": [], "tokens": 0, "finished": False}

    def is_terminal(self, state: dict) -> bool:
        return state["finished"] or state["tokens"] >= self.settings.max_answer_tokens

    def rewards(self, state: dict, terminal: bool):
        row = self.problems[state["problem"]]
        return combined_reward(state["text"], row["answer"], state["step_pres"], state["code"], self.weights, terminal)

    def terminal_value(self, state: dict) -> float:
        return self.rewards(state, terminal=True).total

    def expand(self, states: Sequence[dict], rng: random.Random) -> list[Expansion]:
        s = self.settings
        self.calls += 1
        questions = [self.problems[st["problem"]]["prompt"] for st in states]
        seed = rng.randrange(2**31)
        student = self.student.generate([continuation_prompt(q, st["text"]) for q, st in zip(questions, states)],
                                        n=s.student_samples, max_new_tokens=s.chunk_tokens, temperature=s.temperature,
                                        top_p=s.top_p, seed=seed)
        proposals: list[list[tuple[str, str | None, Sample]]] = [[("student", None, x) for x in g] for g in student]
        if self.teachers is not None:
            asked = self.teachers.propose([(q, st["text"]) for q, st in zip(questions, states)],
                                          n=s.teacher_samples, max_new_tokens=s.chunk_tokens, seed=seed + 1)
            flat = [(i, p) for i, group in enumerate(asked) for p in group]
            # The student's own log-probs of the teachers' chunks: their prior and their PRE.
            scores = self.student.score([continuation_prompt(questions[i], states[i]["text"]) for i, _ in flat],
                                        [p.sample.text for _, p in flat]) if flat else []
            for (i, p), logprobs in zip(flat, scores):
                proposals[i].append((p.teacher, p.label, replace(p.sample, logprobs=tuple(logprobs))))
        expansions = [self._expansion(st, props) for st, props in zip(states, proposals)]
        if self.checker is not None:
            self._check(expansions, questions)
        return expansions

    def _expansion(self, state: dict, proposals: list[tuple[str, str | None, Sample]]) -> Expansion:
        teacher_chunks = {label: x.text for _, label, x in proposals if label is not None}
        merged: dict[str, dict] = {}
        for who, label, sample in proposals:
            if not sample.text:
                continue
            entry = merged.setdefault(sample.text, {"sample": sample, "proposers": [], "labels": []})
            entry["proposers"].append(who if label is None else f"{who}:{label}")
            entry["labels"] += [label] if label is not None else []
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
            text = state["text"] + chunk
            pre = perplexity_reward(sample.logprobs)
            child = {"problem": state["problem"], "text": text, "code": state["code"] + label,
                     "step_pres": [*state["step_pres"], pre], "tokens": state["tokens"] + sample.completion_tokens,
                     # no stop strings are used, so "stop" means the model ended its answer (EOS)
                     "finished": sample.finish_reason == "stop" or bool(ANSWER_LINE.search(text))}
            weights.append(math.exp(pre))  # prior: normalised exp(mean token log-prob) under the student
            info = {"chunk": chunk, "proposers": entry["proposers"], "pre": pre,
                    "student_similarity": similarity.get("1")}
            children.append(Child(chunk, child, 0.0, info))
        total = sum(weights) or 1.0
        children = [c._replace(prior=w / total) for c, w in zip(children, weights)]
        tokens = sum(x.completion_tokens for _, _, x in proposals)
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
                    "terminal": node.terminal, "visits": node.visits, "q": node.q, **breakdown.as_dict()})
    return out
