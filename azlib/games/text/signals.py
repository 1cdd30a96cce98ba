"""Training signals: a problem's searched tree, forking tree or independent answers as Rollouts (azlib.grpo) for one
update, with ids as sampled, reward and group from creation. Not the search, not the update."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Sequence

from azlib.sampled_answer import Answer
from azlib.data.rows import Row
from azlib.grpo import Rollout
from azlib.games.text.env import TextEnv, trajectories, tree_answers
from azlib.games.text.forking import ForkTree, tree_advantages
from azlib.mcts.search import SearchResult
from azlib.rewards import RewardFunction, call_reward, reward_name
from azlib.settings import SignalKind

# Signals whose rollouts are whole (or root-to-leaf) answers, each trained on its reward: what a reward
# function of (prompts, completions) can score. Sibling steps are not answers; "treerl" trains on the tree's
# own per-token advantages, which the answers' rewards made before any function added to them.
SCORABLE_SIGNALS = ("answers", "paths", "independent", "forked")


def tree_groups(results: Sequence[SearchResult], env: TextEnv, kind: SignalKind = "answers") -> list[Rollout]:
    """Groups from searched trees (one result per problem): whole answers, paths, or sibling steps.
    Answers and paths: one group per result, keyed by its position; sibling steps: one per expanded node, each
    step's ids after the ids its node's children were sampled after (TextEnv.context), with no Answer, rewarded by
    its Q ("siblings", TreeRPO-style) or its share of the visits ("visits", AlphaZero-style)."""
    out: list[Rollout] = []
    backend, sibling_groups = env.student, 0
    for g, result in enumerate(results):
        problem = result.tree.root.state.answer.problem
        if kind in ("answers", "paths"):
            prompt_ids = list(env.context(problem))
            answers = tree_answers(result) if kind == "answers" else [a for _, a in trajectories(result, env) if a.text]
            out += [answer_rollout(backend, g, prompt_ids, a) for a in answers]
            continue
        tree = result.tree
        for node in tree.nodes:
            children = [tree.nodes[c] for c in node.children if tree.nodes[c].visits]
            if len(children) < 2:
                continue
            total = sum(c.visits for c in children)
            context = list(env.context(problem, node.state.answer.token_ids))
            for child in children:
                reward = child.q if kind == "siblings" else child.visits / total
                step = child.state.answer.token_ids[len(node.state.answer.token_ids):]
                out.append(Rollout(None, context, list(step), reward, sibling_groups))
            sibling_groups += 1
    return out


def answer_rollout(backend, group: int, prompt_ids: list[int], answer: Answer,
                   advantages: Sequence[float] = ()) -> Rollout:
    """A whole answer (a search's or a forking tree's) as training reads it: its sampled ids (no decode and re-encode)
    with an EOS id after a finished one (Answer.eos, Backend.with_eos), under the problem's plain prompt whoever wrote
    it (a hint teacher's answer is trained without the hint: rationalization); per-token `advantages` (TreeRL's)
    extended over that EOS id."""
    ids = backend.with_eos(answer.token_ids, answer.eos)
    eos = len(ids) > len(answer.token_ids)
    per_token = tuple(advantages) + tuple(advantages[-1:]) * eos if advantages else ()
    return Rollout(answer, prompt_ids, ids, answer.reward, group, advantages=per_token)


def forked_groups(trees: Sequence[ForkTree], backend, kind: Literal["answers", "treerl"] = "answers") -> list[Rollout]:
    """One group per problem: every answer of its forking tree. "treerl" also gives each answer token its
    TreeRL advantage (global + local, from the tree's node values: a wrong branch off a good prefix is blamed for
    its own tokens, not for the prefix), which GRPO then uses as it is."""
    out = []
    for g, tree in enumerate(trees):
        per_token = tree_advantages(tree) if kind == "treerl" else {}
        out += [answer_rollout(backend, g, tree.prompt_ids, tree.nodes[leaf].answer, per_token.get(leaf, ()))
                for leaf in tree.answer_ends()]
    return out


def verified(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """The finished, correct answers, each solution once per problem (texts compared in lower case, runs of white
    space as one space): what expert iteration imitates (with a tree's signals, distillation of the search's best
    answers, ReST-MCTS style; with "independent", rejection-sampling fine-tuning)."""
    seen, out = set(), []
    for r in rollouts:
        if r.correct and (key := (r.answer.problem, " ".join(r.answer.text.lower().split()))) not in seen:
            seen.add(key)
            out.append(r)
    return out


def with_rewards(rollouts: Sequence[Rollout], problems: Sequence[Row],
                 functions: Sequence[RewardFunction]) -> list[Rollout]:
    """Each answer's rollout with every function's value added to its reward, and kept in its `added` under the
    function's name (the log's reward/<name>). The functions are called once for the whole batch with TRL's
    signature: prompts (each answer's question, as its row holds it), completions (the answer texts),
    completion_ids, and every other column of the rows (answer, info), one entry per answer
    (azlib.rewards.call_reward checks what comes back). TRL sums its reward functions the same way."""
    if not functions or not rollouts:
        return list(rollouts)
    rows = [problems[r.answer.problem] for r in rollouts]
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    columns["completion_ids"] = [list(r.completion_ids) for r in rollouts]
    prompts, texts = [row["prompt"] for row in rows], [r.answer.text for r in rollouts]
    added = {reward_name(f): call_reward(f, prompts, texts, **columns) for f in functions}
    return [replace(r, reward=r.reward + sum(v[i] for v in added.values()),
                    added={**r.added, **{name: v[i] for name, v in added.items()}})
            for i, r in enumerate(rollouts)]


def best_verified(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Of each problem's verified answers, those with its best reward: what imitation keeps when a reward function
    ranks the correct answers (with correctness alone every verified answer ties, and all are kept)."""
    good = verified(rollouts)
    best: dict[int, float] = {}
    for r in good:
        best[r.answer.problem] = max(best.get(r.answer.problem, r.reward), r.reward)
    return [r for r in good if r.reward == best[r.answer.problem]]
