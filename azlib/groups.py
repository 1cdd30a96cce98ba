"""GRPO groups: what a problem's searched tree (or plain sampling) turns into for one update.
A Completion is a prompt, the text the student should (or should not) write after it, and a reward.

- "mcts" (default): the root-to-leaf paths of a problem's tree form its group, each scored with
  the combined reward (HRE at terminals, discounted PRE, length penalty, direction bonus). It is
  the original system's choice, and it uses everything the tree found, right and wrong branches.
- "siblings" (TreeRPO-style): the children of each expanded node form a group, scored by their
  backed-up value Q; the prompt is the question plus the node's partial answer.
- "visits" (AlphaZero-style): the same sibling groups, scored by their share of the visits.
- "sampling": G plain samples per problem, no tree: the GRPO baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Sequence

from azlib.data.rows import Row
from azlib.eval import chat_prompt, continuation_prompt
from azlib.grpo import Example
from azlib.mcts.envs.text import TextEnv, trajectories
from azlib.mcts.search import SearchResult
from azlib.models.generation import Backend, Prompt
from azlib.rewards import RewardWeights, combined_reward, perplexity_reward

GROUP_KINDS = ("mcts", "siblings", "visits", "sampling")
GroupKind = Literal["mcts", "siblings", "visits", "sampling"]


@dataclass(frozen=True)
class Completion:
    problem: int
    group: int  # completions sharing this key are normalised together
    prompt: Prompt
    text: str
    reward: float
    correct: bool  # HRE of the text (only meaningful for whole answers)
    parts: dict[str, float] = field(default_factory=dict)  # reward components, when the reward has them


def tree_groups(results: Sequence[SearchResult], env: TextEnv, kind: GroupKind = "mcts") -> list[Completion]:
    """Groups from searched trees (one result per problem): root-to-leaf paths, or sibling chunks."""
    out: list[Completion] = []
    groups = 0
    for result in results:
        if kind == "mcts":
            problem = result.tree.root.state["problem"]
            question = env.problems[problem]["prompt"]
            for path in trajectories(result, env):
                if path["completion"]:
                    parts = {k: path[k] for k in ("hre", "accumulated_pre", "length_penalty", "direction_bonus")}
                    out.append(Completion(problem, -1 - problem, chat_prompt(question), path["completion"],
                                          path["total"], path["hre"] == 1.0, parts))
            continue
        tree = result.tree
        for node in tree.nodes:
            children = [tree.nodes[c] for c in node.children if tree.nodes[c].visits]
            if len(children) < 2:
                continue
            question = env.problems[node.state["problem"]]["prompt"]
            prompt = continuation_prompt(question, node.state["text"])
            total = sum(c.visits for c in children)
            groups += 1
            for child in children:
                reward = child.q if kind == "siblings" else child.visits / total
                out.append(Completion(node.state["problem"], groups, prompt, child.action, reward, False))
    return _renumber(out)


def sampled_groups(backend: Backend, problems: Sequence[Row], indices: Sequence[int], group_size: int, *,
                   max_new_tokens: int, temperature: float, seed: int,
                   weights: RewardWeights = RewardWeights()) -> tuple[list[Completion], int]:
    """G samples per problem, scored like a one-step path (HRE + PRE of the whole answer + penalties);
    returns the completions and the tokens generated."""
    samples = backend.generate([chat_prompt(problems[i]["prompt"]) for i in indices], n=group_size,
                               max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0, seed=seed)
    out, tokens = [], 0
    for i, group in zip(indices, samples):
        for s in group:
            tokens += s.completion_tokens
            r = combined_reward(s.text, problems[i]["answer"], [perplexity_reward(s.logprobs)], "", weights)
            parts = {k: v for k, v in r.as_dict().items() if k != "total"}
            out.append(Completion(i, i, chat_prompt(problems[i]["prompt"]), s.text, r.total, r.hre == 1.0, parts))
    return _renumber(out), tokens


def _renumber(completions: list[Completion]) -> list[Completion]:
    """Group keys 0..k-1 in order of appearance."""
    keys: dict[int, int] = {}
    return [replace(c, group=keys.setdefault(c.group, len(keys))) for c in completions]


def to_examples(completions: Sequence[Completion], backend) -> list[Example]:
    """Token ids through the student's chat template (backend: an hf backend of the student)."""
    return [Example(backend.encode_prompt(c.prompt), backend.encode_continuation(c.text), c.reward, c.group)
            for c in completions if c.text]
