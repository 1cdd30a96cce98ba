"""Training signals: what a problem's searched tree (or plain sampling) turns into for one update.
A Completion is a prompt, the text the student should (or should not) write after it, and a reward;
it carries its token ids and its group from creation, so GRPO trains on it as it is.

- "answers" (default): every complete answer the search wrote for a problem (its rollouts and
  finished terminals) forms the problem's group, scored by the reward (correctness by default). The
  tree decides where answers are sampled from; each answer is a whole, checkable, EOS-ended text.
- "paths" (the seed): the root-to-leaf paths of the tree, finished or not, each scored with the
  reward of its text (the seed's weighted sum: HRE at terminals, discounted PRE, penalties).
- "siblings" (TreeRPO-style): the children of each expanded node form a group, scored by their
  backed-up value Q; the prompt is the question plus the node's partial answer.
- "visits" (AlphaZero-style): the same sibling groups, scored by their share of the visits.
- "sampling": G plain samples per problem, no tree: the GRPO baseline.
With update "sft" (expert iteration) only the verified completions (finished and correct) are kept
and imitated: with tree groups that is distillation of the search's best answers (ReST-MCTS style),
with "sampling" it is rejection-sampling fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

from azlib.data.rows import Row
from azlib.prompts import chat_prompt, continuation_prompt
from azlib.grpo import Example
from azlib.mcts.envs.text import TextEnv, trajectories, tree_answers
from azlib.mcts.search import SearchResult
from azlib.models.generation import Backend, Prompt
from azlib.rewards import RewardKind, RewardWeights, answer_reward, complete_answer, perplexity_reward

GROUP_KINDS = ("answers", "paths", "siblings", "visits", "sampling")
GroupKind = Literal["answers", "paths", "siblings", "visits", "sampling"]


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


def completion(backend, group: int, problem: int, prompt: Prompt, prompt_ids: list[int], text: str, reward: float,
               *, correct: bool = False, finished: bool = False, eos: bool = False,
               parts: dict[str, float] | None = None) -> Completion:
    """The text's ids through the student's template (backend: an hf backend of the student; the caller
    encodes a prompt once for all its completions); an answer that ended with EOS keeps it, so the
    student also learns where to stop."""
    ids = backend.encode_continuation(text) + ([backend.tokenizer.eos_token_id] if eos else [])
    return Completion(prompt_ids, ids, reward, group, problem, prompt, text, correct, finished, eos, parts or {})


def tree_groups(results: Sequence[SearchResult], env: TextEnv, kind: GroupKind = "answers") -> list[Completion]:
    """Groups from searched trees (one result per problem): whole answers, paths, or sibling steps.
    Answers and paths: one group per result, keyed by its position; sibling steps: one per expanded node."""
    out: list[Completion] = []
    backend, sibling_groups = env.student, 0
    for g, result in enumerate(results):
        problem = result.tree.root.state["problem"]
        if kind in ("answers", "paths"):
            prompt = chat_prompt(env.problems[problem]["prompt"])
            prompt_ids = backend.encode_prompt(prompt)
        if kind == "answers":
            for a in tree_answers(result, env):
                out.append(completion(backend, g, problem, prompt, prompt_ids, a["text"], a["reward"],
                                      correct=a["finished"] and a["hre"] == 1.0, finished=a["finished"], eos=a["eos"]))
            continue
        if kind == "paths":
            for path in trajectories(result, env):
                if path["completion"]:
                    parts = {k: path[k] for k in ("hre", "accumulated_pre", "length_penalty", "direction_bonus")}
                    out.append(completion(backend, g, problem, prompt, prompt_ids, path["completion"], path["total"],
                                          correct=path["finished"] and path["hre"] == 1.0, finished=path["finished"],
                                          eos=path["eos"], parts=parts))
            continue
        tree = result.tree
        for node in tree.nodes:
            children = [tree.nodes[c] for c in node.children if tree.nodes[c].visits]
            if len(children) < 2:
                continue
            question = env.problems[node.state["problem"]]["prompt"]
            total = sum(c.visits for c in children)
            prompt = continuation_prompt(question, node.state["text"])
            prompt_ids = backend.encode_prompt(prompt)
            for child in children:
                reward = child.q if kind == "siblings" else child.visits / total
                out.append(completion(backend, sibling_groups, problem, prompt, prompt_ids, child.action, reward))
            sibling_groups += 1
    return out


def sampled_groups(backend: Backend, problems: Sequence[Row], indices: Sequence[int], group_size: int, *,
                   max_new_tokens: int, temperature: float, seed: int, reward: RewardKind = "correctness",
                   weights: RewardWeights = RewardWeights()) -> tuple[list[Completion], int]:
    """G samples per problem, each scored as a whole answer; returns the completions and the tokens generated."""
    samples = backend.generate([chat_prompt(problems[i]["prompt"]) for i in indices], n=group_size,
                               max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0, seed=seed,
                               stop_at_answer=True)
    out, tokens = [], 0
    for g, (i, answers) in enumerate(zip(indices, samples)):
        prompt = chat_prompt(problems[i]["prompt"])
        prompt_ids = backend.encode_prompt(prompt)
        for s in answers:
            tokens += s.completion_tokens
            text, finished = complete_answer(s.text, s.finish_reason == "stop")
            r = answer_reward(text, problems[i]["answer"], finished=finished, kind=reward, weights=weights,
                              step_pres=[perplexity_reward(s.logprobs)])
            parts = {k: v for k, v in r.as_dict().items() if k != "total"}
            out.append(completion(backend, g, i, prompt, prompt_ids, text, r.total,
                                  correct=finished and r.hre == 1.0, finished=finished, eos=finished, parts=parts))
    return out, tokens


def verified(completions: Sequence[Completion]) -> list[Completion]:
    """The finished, correct completions, each text once per problem: what expert iteration imitates."""
    seen, out = set(), []
    for c in completions:
        if c.correct and (c.problem, c.text) not in seen:
            seen.add((c.problem, c.text))
            out.append(c)
    return out
