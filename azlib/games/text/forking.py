"""A forking tree over whole answers (TreeRL's EPTree, Hou et al. 2025, sec. 3): G answers, then continuations forked
where the student was least sure, each sharing its prefix. Not MCTS: no value-guided descent."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from azlib.sampled_answer import Answer, ids_writing, scored_answer
from azlib.data.rows import Row
from azlib.mcts.tree import Backup, Tree
from azlib.models.generation import Backend, Sample, TokenIds
from azlib.prompts import ANSWER_MARK, chat_prompt, hint_prompt
from azlib.rewards import RewardWeights
from azlib.rewards.step_checks import check_steps, first_failure
from azlib.settings import AnswerSampling, ForkSettings, RewardKind

if TYPE_CHECKING:
    from azlib.teachers import TeacherEnsemble

BUCKET = 16  # forks whose answers have about as many tokens left share one generate call (to the nearest 16 below)


@dataclass
class Segment:
    """A node of the forking tree: a segment of tokens shared by every answer below it; a leaf ends an answer."""

    parent: int  # -1: the root (the question; no tokens)
    start: int  # position of the first token within the answer
    token_ids: list[int]
    logprobs: list[float]
    children: list[int] = field(default_factory=list)
    answer: Answer | None = None  # set on leaves
    round: int = 0  # the forking round that generated it (0: the independent answers)


@dataclass
class ForkTree:
    """One problem's tree. `tokens` counts every token generated for it (each lies in exactly one node);
    `prefill` the prompt tokens its generate calls read (the question once for its G answers, then the
    fork prompt and prefix once per fork point). Every answer is trained under `prompt_ids`; its forks are
    written after `fork_prompt_ids` (the same ids, or the hint teacher's prompt)."""

    problem: int
    prompt_ids: list[int]
    nodes: list[Segment] = field(default_factory=lambda: [Segment(-1, 0, [], [])])
    tokens: int = 0
    prefill: int = 0
    fork_prompt_ids: list[int] | None = None  # None: prompt_ids

    def __post_init__(self):
        if self.fork_prompt_ids is None:
            self.fork_prompt_ids = self.prompt_ids

    def answer_ends(self) -> list[int]:
        """The ids of the segments that end an answer, one per answer."""
        return [i for i, n in enumerate(self.nodes) if n.answer is not None]

    def answers(self) -> list[Answer]:
        return [self.nodes[i].answer for i in self.answer_ends()]

    def independent_answers(self) -> list[Answer]:
        """Round 0's answers: the G the student drew from the question alone (what signal "independent" draws)."""
        return [self.nodes[i].answer for i in self.answer_ends() if self.nodes[i].round == 0]

    def path(self, i: int) -> list[int]:
        """Node ids from the root's first child down to node i."""
        out = []
        while i > 0:
            out.append(i)
            i = self.nodes[i].parent
        return out[::-1]

    def values(self) -> list[float]:
        """V(s): the mean reward of the answers under each node (TreeRL)."""
        total, count = self._under()
        return [t / c if c else 0.0 for t, c in zip(total, count)]

    def leaf_counts(self) -> list[int]:
        """L(s): the number of answers under each node."""
        return self._under()[1]

    def _under(self) -> tuple[list[float], list[int]]:
        """Per node, the sum of the rewards of the answers under it and their number."""
        total, count = [0.0] * len(self.nodes), [0] * len(self.nodes)
        for leaf in self.answer_ends():
            for i in [0, *self.path(leaf)]:
                total[i] += self.nodes[leaf].answer.reward
                count[i] += 1
        return total, count

    def _split(self, i: int, offset: int) -> int:
        """Cut node i before its token `offset`: a new node takes the head and node i keeps the tail (so a
        leaf stays a leaf under its id). Returns the head's id."""
        node = self.nodes[i]
        head = Segment(node.parent, node.start, node.token_ids[:offset], node.logprobs[:offset], [i], None, node.round)
        self.nodes.append(head)
        siblings = self.nodes[node.parent].children
        siblings[siblings.index(i)] = len(self.nodes) - 1
        node.parent, node.start = len(self.nodes) - 1, node.start + offset
        node.token_ids, node.logprobs = node.token_ids[offset:], node.logprobs[offset:]
        return len(self.nodes) - 1

    def branch_point(self, leaf: int, position: int) -> int:
        """The node a continuation forked before answer token `position` of `leaf` hangs from (splitting
        the node that holds that token when the position falls inside it)."""
        for i in self.path(leaf):
            node = self.nodes[i]
            if node.start == position:
                return node.parent
            if node.start < position < node.start + len(node.token_ids):
                return self._split(i, position - node.start)
        raise ValueError(f"position {position} is not inside answer {leaf}")

    def prefix(self, i: int) -> list[int]:
        """The answer tokens from the root down to node i, inclusive."""
        return [token for j in self.path(i) for token in self.nodes[j].token_ids]

    def to_tree(self, decode) -> Tree:
        """The same tree as an azlib.mcts Tree (what the SVG and the widget draw): a node's action is its
        segment's text (`decode(ids)`), its visits the answers under it, its value sum their rewards. Its history
        has one simulation per answer, round by round, so the widget replays the tree answer by answer."""
        values, counts = self.values(), self.leaf_counts()
        tree = Tree.with_root({"problem": self.problem, "text": ""})
        tree.root.visits, tree.root.value_sum = counts[0], values[0] * counts[0]
        order, ids = [0], {0: 0}
        while order:
            i = order.pop(0)
            for c in self.nodes[i].children:
                node, answer = self.nodes[c], self.nodes[c].answer
                ids[c] = tree.add_child(ids[i], {"text": decode(self.prefix(c))}, decode(node.token_ids), 1.0,
                                        visits=counts[c], value_sum=values[c] * counts[c], terminal=answer is not None,
                                        info={"round": node.round, "tokens": len(node.token_ids),
                                              **({"reward": answer.reward, "correct": answer.correct,
                                                  "finished": answer.finished, "writer": answer.writer}
                                                 if answer else {})})
                order.append(c)
        tree.history = [[Backup([0, *(ids[j] for j in self.path(leaf))], 1, self.nodes[leaf].answer.reward)]
                        for leaf in sorted(self.answer_ends(), key=lambda i: self.nodes[i].round)]
        return tree


class ForkingSearch:
    """grow(indices, group_size, seed) -> one ForkTree per problem: G answers, then `rounds` of forks."""

    def __init__(self, backend: Backend, problems: Sequence[Row], settings: ForkSettings = ForkSettings(), *,
                 sampling: AnswerSampling, reward: RewardKind = "correctness",
                 weights: RewardWeights = RewardWeights(), teachers: TeacherEnsemble | None = None):
        if settings.writer == "teachers" and settings.rounds and teachers is None:
            raise ValueError("fork.writer 'teachers' needs a teacher ensemble (teachers, or a teacher_tier)")
        self.backend, self.problems, self.settings, self.teachers = backend, list(problems), settings, teachers
        self.sampling, self.reward, self.weights = sampling, reward, weights

    def grow(self, indices: Sequence[int], group_size: int, seed: int) -> list[ForkTree]:
        prompts = [chat_prompt(self.problems[i]["prompt"]) for i in indices]
        trees = [ForkTree(i, self.backend.encode_prompt(p)) for i, p in zip(indices, prompts)]
        for tree in trees:
            tree.fork_prompt_ids = self._fork_prompt_ids(tree)
        samples = self.backend.generate(prompts, n=group_size, max_new_tokens=self.sampling.max_new_tokens,
                                        temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=seed,
                                        stop_at_answer=True)
        for tree, group in zip(trees, samples):
            tree.prefill += len(tree.prompt_ids)
            for sample in group:
                self._attach(tree, 0, sample, 0, "student")
        for r in range(1, self.settings.rounds + 1):
            forks = [(tree, 0 if leaf is None else tree.branch_point(leaf, position))
                     for tree in trees for leaf, position in self.fork_points(tree)]
            if not forks:
                break
            buckets: dict[int, list[tuple[ForkTree, int]]] = {}
            for tree, node in forks:
                left = self.sampling.max_new_tokens - len(tree.prefix(node))
                buckets.setdefault(max(left // BUCKET * BUCKET, min(left, BUCKET)), []).append((tree, node))
            for b, (left, members) in enumerate(sorted(buckets.items())):
                fork_seed = (seed + 7_919 * r + b) % 2**31
                if self.settings.writer == "teachers":
                    self._teacher_forks(members, left, r, fork_seed)
                    continue
                out = self.backend.generate([TokenIds(t.fork_prompt_ids + t.prefix(node)) for t, node in members],
                                            n=self.settings.branches, max_new_tokens=left,
                                            temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                                            seed=fork_seed, stop_at_answer=True)
                for (tree, node), group in zip(members, out):
                    tree.prefill += len(tree.fork_prompt_ids) + len(tree.prefix(node))
                    for sample in group:
                        self._attach(tree, node, sample, r, self.settings.writer)
        return trees

    def _teacher_forks(self, members: list[tuple[ForkTree, int]], left: int, round_: int, seed: int) -> None:
        """The teacher ensemble continues each fork's prefix (`branches` samples per chosen teacher and label);
        each continuation, as the student's tokens with the student's log-probs of them (one batched score), is
        a leaf. The tokens counted are those the teachers generated; the prefill, what they and the scoring read."""
        tokenizer = self.backend.tokenizer
        contexts = [(self.problems[t.problem]["prompt"], tokenizer.decode(t.prefix(node), skip_special_tokens=True))
                    for t, node in members]
        proposals = self.teachers.propose(contexts, n=self.settings.branches, max_new_tokens=left, seed=seed)
        kept = []
        for (tree, node), props in zip(members, proposals):
            prefix = tree.prefix(node)
            tree.prefill += sum(p.sample.prompt_tokens for i, p in enumerate(props) if i % self.settings.branches == 0)
            for p in props:
                tree.tokens += p.sample.completion_tokens
                encoded = self.backend.encode_continuation(p.sample.text)
                if encoded:  # an empty proposal adds its tokens to the count and nothing to the tree
                    kept.append((tree, node, prefix, p, encoded[:left], len(encoded) <= left))
                    tree.prefill += len(tree.prompt_ids) + len(prefix)
        if not kept:
            return
        scores = self.backend.score([TokenIds(tree.prompt_ids + prefix) for tree, _, prefix, *_ in kept],
                                    [ids for *_, ids, _ in kept])
        for (tree, node, _, p, ids, whole), logprobs in zip(kept, scores):
            # the leaf's text is decoded from its ids when it is scored (_attach), so the chunk's text is not cut here
            sample = Sample(p.sample.text, tuple(ids), tuple(logprobs), p.sample.finish_reason if whole else "length",
                            p.sample.prompt_tokens, 0)
            self._attach(tree, node, sample, round_, f"{p.teacher}:{p.label}")

    def _fork_prompt_ids(self, tree: ForkTree) -> list[int]:
        """What a fork's writer reads before the answer prefix: the student's own prompt, or the hint's (teachers
        read their own prompts, built by the ensemble)."""
        if self.settings.writer != "hint":
            return tree.prompt_ids
        row = self.problems[tree.problem]
        return self.backend.encode_prompt(hint_prompt(row["prompt"], row["info"]["solution"]))

    def _attach(self, tree: ForkTree, parent: int, sample: Sample, round_: int, writer: str) -> None:
        """A generated continuation becomes a leaf under `parent`, its whole answer scored once. The sample's
        completion tokens are counted (a teacher's fork counts its own before attaching: completion_tokens 0)."""
        prefix_ids = tree.prefix(parent)
        ids = prefix_ids + list(sample.token_ids)
        logprobs = [lp for j in tree.path(parent) for lp in tree.nodes[j].logprobs] + list(sample.logprobs)
        tree.nodes.append(Segment(parent, len(prefix_ids), list(sample.token_ids), list(sample.logprobs), round=round_))
        tree.nodes[parent].children.append(len(tree.nodes) - 1)
        tree.tokens += sample.completion_tokens
        tree.nodes[-1].answer = scored_answer(self.backend, tree.problem, self.problems[tree.problem]["answer"], ids,
                                              logprobs, sample.finish_reason == "stop", kind=self.reward,
                                              weights=self.weights, writer=writer)

    def fork_points(self, tree: ForkTree) -> list[tuple[int | None, int]]:
        """(leaf, position) pairs: fork before answer token `position` of leaf's answer (None, 0: the question).
        A problem whose answers are all correct gets none; positions (where = step: each answer's first failing
        step) are ranked by the sampled token's surprisal, each prefix forked at most once; a line that repeats an
        earlier one (a loop) is skipped."""
        s, answers = self.settings, tree.answers()
        if all(a.correct for a in answers):
            return []
        if s.where == "root":
            return [(None, 0)] * s.points
        forked = {tuple(tree.prefix(i)) for i, node in enumerate(tree.nodes) if len(node.children) > 1}
        candidates = []
        for leaf in tree.answer_ends():
            answer = tree.nodes[leaf].answer
            if (s.fork_from == "wrong" and answer.correct) or (s.fork_from == "finished" and not answer.finished):
                continue
            ids, logprobs = answer.token_ids, answer.logprobs
            positions = self._positions(ids) if s.where != "step" else self._failing_step(tree, answer)
            for p in positions:
                candidates.append((-logprobs[p], leaf, p))
        chosen, seen = [], forked
        for surprisal, leaf, p in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
            key = tuple(tree.nodes[leaf].answer.token_ids[:p])
            if key not in seen:
                seen.add(key)
                chosen.append((leaf, p))
            if len(chosen) == s.points:
                break
        return chosen

    def _positions(self, ids: Sequence[int]) -> list[int]:
        """Where a fork may go within an answer: after its first token and before its answer line (a fork
        there would only redraw the final number, not the work that leads to it), never inside a line that
        repeats an earlier one (a loop), and (where = line) only at the first token of a line."""
        out, line_start, seen_lines = [], 0, set()
        for p in range(1, len(ids) + 1):
            if p < len(ids) and not self.backend.writes_newline(ids[p - 1]):
                continue
            begin, line_start = line_start, p
            line = tuple(ids[begin:p])
            if ANSWER_MARK.search(self.backend.tokenizer.decode(ids[:p])):  # the whole text: a mark may span tokens
                break
            if line in seen_lines:
                continue
            seen_lines.add(line)
            out += [q for q in range(max(begin, 1), p) if self.settings.where == "surprise" or q == begin]
        return out

    def _failing_step(self, tree: ForkTree, answer: Answer) -> list[int]:
        """The answer token where its first step failing the check fails (the token holding that character of
        its text, found from the sampled ids' decoded prefixes), or none when every step passes."""
        row = self.problems[tree.problem]
        steps = check_steps(answer.text, row["prompt"], row["info"].get("solution"))
        failed = first_failure(steps, self.settings.check)
        if failed is None:
            return []
        return [ids_writing(self.backend, answer.token_ids, failed[0] + 1) - 1]  # the id writing that character


def tree_advantages(tree: ForkTree) -> dict[int, list[float]]:
    """Per leaf, one advantage per answer token (TreeRL, Hou et al. 2025, eq. 4-6): a token in segment s
    gets R(s) = (V(s) - V(root) + V(s) - V(parent(s))) / sqrt(L(s)), the global plus the local advantage,
    L(s) the answers under s (so a prefix shared by many answers is not counted many times over)."""
    values, counts = tree.values(), tree.leaf_counts()
    out = {}
    for leaf in tree.answer_ends():
        per_token = []
        for i in tree.path(leaf):
            node = tree.nodes[i]
            parent = max(node.parent, 0)
            r = (2 * values[i] - values[0] - values[parent]) / math.sqrt(counts[i])
            per_token += [r] * len(node.token_ids)
        out[leaf] = per_token[: len(tree.nodes[leaf].answer.token_ids)]
    return out
