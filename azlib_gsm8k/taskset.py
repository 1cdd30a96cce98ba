"""The taskset: rows from azlib.data (GSM8K by hub or local folder, or the arithmetic generator),
scored by azlib.rewards: correctness (HRE, weight 0.4) and perplexity (PRE, weight 0.6).

The original environment ran its tree search inside a multi-turn rollout. verifiers 0.4's rollouts
belong to a harness (an agent program talking to the model), so the search cannot be the rollout
here; the closest faithful form is this single-turn task with the original rubric, with azlib's
search and training kept on azlib's side (notebooks 02-05).
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from azlib.data import arithmetic_problems, load_gsm8k
from azlib.optional_packages import require
from azlib.prompts import chat_prompt
from azlib.rewards import RewardWeights, extract_answer, hard_reward, perplexity_reward

vf = require("verifiers.v1", "the azlib-gsm8k taskset")
WEIGHTS = RewardWeights()


class AzlibMathData(vf.TaskData):
    """One problem: the question (prompt = question + the kit's answer instruction) and its gold answer."""

    question: str = ""
    answer: str = ""
    source: str = ""


class AzlibMathTaskConfig(vf.TaskConfig):
    perplexity_model: str | None = "embedded:smollm2-135m-instruct"
    """Model the reply's perplexity is measured under (azlib's hf backend; the student of the
    original system). None: use the sampling log-probs the trace carries, if any."""


class AzlibMathTask(vf.Task[AzlibMathData, vf.State, AzlibMathTaskConfig]):
    @vf.reward(weight=WEIGHTS.hre)
    async def correctness(self, trace: vf.Trace) -> float:
        """HRE: 1 if the reply's final answer equals the gold (azlib.rewards.hard_reward)."""
        return hard_reward(trace.last_reply, self.data.answer)

    @vf.reward(weight=WEIGHTS.pre)
    async def perplexity(self, trace: vf.Trace) -> float:
        """PRE: mean token log-prob of the reply, = -log perplexity (azlib.rewards.perplexity_reward)."""
        return reply_pre(self.data.question, trace.last_reply, self.config.perplexity_model, trace)

    @vf.metric
    async def answer_found(self, trace: vf.Trace) -> float:
        return float(extract_answer(trace.last_reply) is not None)


def reply_pre(question: str, reply: str, model: str | None, trace: vf.Trace | None = None) -> float:
    if model is None:
        branches = trace.branches if trace is not None else []
        return perplexity_reward(branches[-1].logprobs if branches else [])
    (logprobs,) = _scorer(model).score([chat_prompt(question)], [reply])
    return perplexity_reward(logprobs)


@cache
def _scorer(model: str):
    from azlib.models import make_backend

    return make_backend("hf", model)


class AzlibMathConfig(vf.TasksetConfig):
    task_name: Literal["gsm8k", "arithmetic"] = "gsm8k"
    source: str = "auto"
    """GSM8K source: "auto" (the kit's copy beside the repo), a folder of JSONL, or "hub" (downloads)."""
    split: Literal["train", "test"] = "test"
    num_tasks: int | None = None
    seed: int = 0
    """Seed of the arithmetic generator."""
    task: AzlibMathTaskConfig = AzlibMathTaskConfig()


class AzlibMathTaskset(vf.Taskset[AzlibMathTask, AzlibMathConfig]):
    def load(self) -> list[AzlibMathTask]:
        c = self.config
        if c.task_name == "gsm8k":
            rows = load_gsm8k(c.source, c.split, limit=c.num_tasks)
        else:
            rows = arithmetic_problems(c.num_tasks or 100, seed=c.seed)
        return [AzlibMathTask(AzlibMathData(id=r["info"]["id"], prompt=chat_prompt(r["prompt"])[0]["content"],
                                            question=r["prompt"], answer=r["answer"], source=r["info"]["source"]),
                              c.task) for r in rows]
