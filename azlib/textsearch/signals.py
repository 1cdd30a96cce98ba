"""Training signals: what a problem's searched tree (or plain sampling) turns into for one update.
A Completion is a prompt, the text the student should (or should not) write after it, and a reward;
it carries its token ids and its group from creation, so GRPO trains on it as it is.

- "answers" (default): every complete answer the search wrote for a problem (its rollouts and
  finished terminals) forms the problem's group, scored by the reward (correctness by default). The
  tree decides where answers are sampled from; each answer is a whole, checkable, EOS-ended text.
- "paths" (the original system): the root-to-leaf paths of the tree, finished or not, each scored with the
  reward of its text (the original system's weighted sum: HRE at terminals, discounted PRE, penalties).
- "siblings" (TreeRPO-style): the children of each expanded node form a group, scored by their
  backed-up value Q; the prompt is the question's ids plus the node's partial answer's ids, as the search sampled
  the children after them (TextEnv.context).
- "visits" (AlphaZero-style): the same sibling groups, scored by their share of the visits.
- "sampling": G plain samples per problem, no tree: the GRPO baseline.
- "forked": the G samples, then continuations forked from them (azlib.textsearch.forking, TreeRL's EPTree):
  every answer of a problem's forking tree in one group, scored by the reward.
- "treerl": the same answers, each token with TreeRL's advantage from the tree's node values (the mean
  reward of the answers under a node): global (V(s) - V(root)) plus local (V(s) - V(parent)), so a
  wrong branch off a good prefix is blamed for its own tokens, not for the prefix.
With update "sft" (expert iteration) only the verified completions (finished and correct) are kept
and imitated: with tree groups that is distillation of the search's best answers (ReST-MCTS style),
with "sampling" it is rejection-sampling fine-tuning.
A reward function with TRL's signature (a learner's own) adds its value to each whole answer's reward
(`with_rewards`); imitation then keeps each problem's verified answers with the best total (`best_verified`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal, Sequence

from azlib.answer import Answer
from azlib.data.rows import Row
from azlib.prompts import chat_prompt
from azlib.grpo import Example
from azlib.textsearch.env import TextEnv, trajectories, tree_answers
from azlib.textsearch.forking import ForkTree, tree_advantages
from azlib.mcts.search import SearchResult
from azlib.models.generation import Prompt
from azlib.rewards import RewardFunction, call_reward, reward_name
from azlib.settings import GroupKind

# Signals whose completions are whole (or root-to-leaf) answers, each trained on its reward: what a reward
# function of (prompts, completions) can score. Sibling steps are not answers; "treerl" trains on the tree's
# own per-token advantages, which the answers' rewards made before any function added to them.
SCORABLE_GROUPS = ("answers", "paths", "sampling", "forked")


@dataclass(frozen=True)
class Completion(Example):
    """An Example (token ids, reward, group: what GRPO reads) with what it was made from."""

    problem: int
    prompt: Prompt
    text: str
    correct: bool  # finished with the right answer (only meaningful for whole answers)
    finished: bool = False  # ended by EOS or by its answer line (not cut at the token limit)
    eos: bool = False  # an end-of-sequence token follows the text in training (finished answers)
    parts: dict[str, float] = field(default_factory=dict)  # reward components, when the reward has them
    writer: str = "student"  # who wrote it (a forking tree's answer: azlib.textsearch.forking.Answer.writer)


def completion(backend, group: int, problem: int, prompt: Prompt, prompt_ids: list[int], text: str, reward: float,
               *, ids: Sequence[int], correct: bool = False, finished: bool = False, eos: bool = False,
               parts: dict[str, float] | None = None) -> Completion:
    """A searched text as training reads it: its ids as sampled (no decode and re-encode; the caller encodes a
    prompt once for all its completions), with an EOS id after it when `eos` (Backend.with_eos)."""
    return Completion(prompt_ids, backend.with_eos(ids, eos), reward, group, problem, prompt, text, correct, finished,
                      eos, parts or {})


def tree_groups(results: Sequence[SearchResult], env: TextEnv, kind: GroupKind = "answers") -> list[Completion]:
    """Groups from searched trees (one result per problem): whole answers, paths, or sibling steps.
    Answers and paths: one group per result, keyed by its position; sibling steps: one per expanded node."""
    out: list[Completion] = []
    backend, sibling_groups = env.student, 0
    for g, result in enumerate(results):
        problem = result.tree.root.state.answer.problem
        if kind in ("answers", "paths"):  # paths log their reward's parts (the original system's sum)
            prompt, prompt_ids = chat_prompt(env.problems[problem]["prompt"]), list(env.context(problem))
            answers = tree_answers(result) if kind == "answers" else [a for _, a in trajectories(result, env) if a.text]
            out += [answer_completion(backend, g, problem, prompt, prompt_ids, a, with_parts=kind == "paths")
                    for a in answers]
            continue
        tree = result.tree
        for node in tree.nodes:
            children = [tree.nodes[c] for c in node.children if tree.nodes[c].visits]
            if len(children) < 2:
                continue
            total = sum(c.visits for c in children)
            context = env.context(problem, node.state.answer.token_ids)  # the ids the children were sampled after
            for child in children:
                reward = child.q if kind == "siblings" else child.visits / total
                out.append(completion(backend, sibling_groups, problem, context, list(context), child.action, reward,
                                      ids=child.state.answer.token_ids[len(node.state.answer.token_ids):]))
            sibling_groups += 1
    return out


def answer_completion(backend, group: int, problem: int, prompt: Prompt, prompt_ids: list[int], answer: Answer,
                      advantages: Sequence[float] = (), with_parts: bool = True) -> Completion:
    """A whole answer (a search's or a forking tree's) as training reads it: its sampled ids (no decode and re-encode)
    with an EOS id after a finished one (Answer.eos, Backend.with_eos), under the problem's plain prompt whoever wrote
    it (a hint teacher's answer is trained without the hint: rationalization); per-token `advantages` (TreeRL's)
    extended over that EOS id."""
    ids = backend.with_eos(answer.token_ids, answer.eos)
    eos = len(ids) > len(answer.token_ids)
    per_token = tuple(advantages) + tuple(advantages[-1:]) * eos if advantages else ()
    # the step log's reward/<part> keys
    parts = {k: v for k, v in asdict(answer.breakdown).items() if k != "total"} if with_parts else {}
    return Completion(prompt_ids, ids, answer.reward, group, problem, prompt, answer.text, answer.correct,
                      answer.finished, answer.eos, parts, answer.writer,
                      advantages=per_token)


def forked_groups(trees: Sequence[ForkTree], backend, kind: Literal["answers", "treerl"] = "answers") -> list[Completion]:
    """One group per problem: every answer of its forking tree. "treerl" also gives each answer token its
    TreeRL advantage (global + local, from the tree's node values), which GRPO then uses as it is."""
    out = []
    for g, tree in enumerate(trees):
        per_token = tree_advantages(tree) if kind == "treerl" else {}
        out += [answer_completion(backend, g, tree.problem, tree.prompt, tree.prompt_ids, tree.nodes[leaf].answer,
                                  per_token.get(leaf, ())) for leaf in tree.leaves()]
    return out


def verified(completions: Sequence[Completion]) -> list[Completion]:
    """The finished, correct completions, each solution once per problem (texts compared in lower case, runs of
    white space as one space): what expert iteration imitates."""
    seen, out = set(), []
    for c in completions:
        key = (c.problem, " ".join(c.text.lower().split()))
        if c.correct and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def with_rewards(completions: Sequence[Completion], problems: Sequence[Row],
                 functions: Sequence[RewardFunction]) -> list[Completion]:
    """Each completion with every function's value added to its reward, and kept in its `parts` under the
    function's name (the log's reward/<name>). The functions are called once for the whole batch with TRL's
    signature: prompts (each completion's question, as its row holds it), completions (the answer texts),
    completion_ids, and every other column of the rows (answer, info), one entry per completion
    (azlib.rewards.call_reward checks what comes back). TRL sums its reward functions the same way."""
    if not functions or not completions:
        return list(completions)
    rows = [problems[c.problem] for c in completions]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    columns["completion_ids"] = [list(c.completion_ids) for c in completions]
    prompts, texts = [row["prompt"] for row in rows], [c.text for c in completions]
    added = {reward_name(f): call_reward(f, prompts, texts, **columns) for f in functions}
    return [replace(c, reward=c.reward + sum(v[i] for v in added.values()),
                    parts={**c.parts, **{name: v[i] for name, v in added.items()}})
            for i, c in enumerate(completions)]


def best_verified(completions: Sequence[Completion]) -> list[Completion]:
    """Of each problem's verified completions, those with its best reward: what imitation keeps when a reward
    function ranks the correct answers (with correctness alone every verified answer ties, and all are kept)."""
    good = verified(completions)
    best: dict[int, float] = {}
    for c in good:
        best[c.problem] = max(best.get(c.problem, c.reward), c.reward)
    return [c for c in good if c.reward == best[c.problem]]
