"""Text as a search environment: a node is a partial answer, a child appends a chunk of tokens
proposed by the student (and, when given, "right" and "wrong" chunks from a teacher backend).

One `expand` call serves every leaf of every problem in a search step: one batched student
generate, one batched teacher generate, one batched student score of the teacher's chunks.
Leaf values come from azlib.rewards; the tree's paths become GRPO groups or visit-count targets.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from azlib.data.rows import Row
from azlib.eval import chat_prompt
from azlib.mcts.search import Child, Expansion, SearchResult
from azlib.models.generation import Backend, Sample
from azlib.rewards import RewardWeights, combined_reward, perplexity_reward

# An answer line followed by a newline, or end of text: the model has committed to its answer.
ANSWER_LINE = re.compile(r"####\s*-?[\d,]*\.?\d+\s*\n")
TEACHER_SYSTEM = {
    "1": "You are an expert math tutor. Continue the assistant's partial solution with the next correct step.",
    "0": "You write plausible but flawed math. Continue the assistant's partial solution with a step that "
         "contains a subtle mistake.",
}


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


def messages(question: str, partial: str, system: str | None = None) -> list[dict[str, str]]:
    """The kit's chat prompt, with the partial answer as an assistant message to be continued."""
    out = ([{"role": "system", "content": system}] if system else []) + chat_prompt(question)
    return out + [{"role": "assistant", "content": partial}] if partial else out


def word_similarity(a: str, b: str) -> float:
    """Jaccard overlap of the words of two chunks (how close the student came to a teacher chunk)."""
    x, y = set(a.split()), set(b.split())
    return len(x & y) / len(x | y) if x | y else 1.0


class TextEnv:
    """States are dicts: problem index, text so far, path code ('1' right, '0' wrong, 's' student
    chunk without a teacher to judge it), per-step PRE, tokens, finished."""

    two_player = False

    def __init__(self, student: Backend, problems: Sequence[Row], settings: TextSearchSettings = TextSearchSettings(),
                 teacher: Backend | None = None, weights: RewardWeights = RewardWeights()):
        self.student, self.teacher, self.problems = student, teacher, list(problems)
        self.settings, self.weights = settings, weights
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
        student = self.student.generate([messages(q, st["text"]) for q, st in zip(questions, states)],
                                        n=s.student_samples, max_new_tokens=s.chunk_tokens, temperature=s.temperature,
                                        top_p=s.top_p, seed=seed)
        proposals: list[list[tuple[str, Sample]]] = [[("student", x) for x in group] for group in student]
        if self.teacher is not None:
            asks = [(i, label, messages(q, st["text"], TEACHER_SYSTEM[label]))
                    for i, (q, st) in enumerate(zip(questions, states)) for label in ("1", "0")]
            answers = self.teacher.generate([m for _, _, m in asks], n=s.teacher_samples, max_new_tokens=s.chunk_tokens,
                                            temperature=s.temperature, top_p=s.top_p, seed=seed + 1)
            flat = [(i, label, x) for (i, label, _), group in zip(asks, answers) for x in group]
            # The student's own log-probs of the teacher's chunks: its prior and its PRE.
            scores = self.student.score([messages(questions[i], states[i]["text"]) for i, _, _ in flat],
                                        [x.text for _, _, x in flat])
            for (i, label, x), logprobs in zip(flat, scores):
                proposals[i].append((f"teacher-{label}", replace(x, logprobs=tuple(logprobs))))
        return [self._expansion(st, props) for st, props in zip(states, proposals)]

    def _expansion(self, state: dict, proposals: list[tuple[str, Sample]]) -> Expansion:
        teacher_chunks = {who[-1]: x.text for who, x in proposals if who.startswith("teacher")}
        merged: dict[str, dict] = {}
        for who, sample in proposals:
            if not sample.text:
                continue
            entry = merged.setdefault(sample.text, {"sample": sample, "proposers": []})
            entry["proposers"].append(who)
        children, weights = [], []
        for chunk, entry in merged.items():
            sample, proposers = entry["sample"], entry["proposers"]
            similarity = {label: word_similarity(chunk, t) for label, t in teacher_chunks.items()}
            teacher_labels = [p[-1] for p in proposers if p.startswith("teacher")]
            if teacher_labels:
                label = teacher_labels[0]
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
            info = {"chunk": chunk, "proposers": proposers, "pre": pre, "student_similarity": similarity.get("1")}
            children.append(Child(chunk, child, 0.0, info))
        total = sum(weights) or 1.0
        children = [c._replace(prior=w / total) for c, w in zip(children, weights)]
        tokens = sum(x.completion_tokens for _, x in proposals)
        return Expansion(children, self.rewards(state, terminal=False).total, tokens)


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
