"""Training an RLT teacher (Cetin et al. 2025, sec. 3) with azlib's GRPO, then students fine-tuned on its explanations.
Not the student's own RL (azlib.training) nor a new GRPO: the teacher's step is PolicyUpdate.step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from azlib.data.rows import Row
from azlib.statistics import mean_difference
from azlib.prompts import chat_prompt
from azlib.grpo import PolicyUpdate, Rollout
from azlib.models.generation import Backend
from azlib.rlt.rewards import ExplanationScores, score_explanations
from azlib.settings import RLTSettings

TEACHER_INSTRUCTION = ("Above are a math question and its reference solution. Write a short explanation that "
                       "teaches a student how to reach this solution step by step.")
SEPARATOR = "\n"  # between the explanation and the solution in the student's answer


def teacher_prompt(question: str, solution: str) -> list[dict[str, str]]:
    """What the teacher sees: q and s (the paper's teacher input), then the instruction to explain."""
    return [{"role": "user", "content": f"Question: {question}\n\nReference solution:\n{solution}\n\n{TEACHER_INSTRUCTION}"}]


@dataclass
class Explanation:
    """One explanation of one row, as token ids (without EOS) and text; finished: the teacher ended it."""

    row: Row
    ids: list[int]
    text: str
    finished: bool


def _strip_eos(ids: Sequence[int], eos: set[int]) -> list[int]:
    ids = list(ids)
    while ids and ids[-1] in eos:
        ids.pop()
    return ids


def explain(teacher: Backend, rows: Sequence[Row], *, n: int = 1,
            max_new_tokens: int = RLTSettings.max_explanation_tokens, temperature: float = RLTSettings.temperature,
            seed: int | None = None) -> list[list[Explanation]]:
    """n explanations per row, from the teacher given (q, s); by default as long and as hot as RLTSettings'."""
    samples = teacher.generate([teacher_prompt(r["prompt"], r["info"]["solution"]) for r in rows], n=n,
                               max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    return [[Explanation(r, _strip_eos(s.token_ids, teacher.eos_ids), s.text.strip(), s.finish_reason == "stop") for s in group]
            for r, group in zip(rows, samples)]


def solution_ids(backend: Backend, row: Row, *, after_explanation: bool = True) -> list[int]:
    """The reference solution's tokens as the student writes them (after the separator when explained)."""
    return backend.encode_continuation((SEPARATOR if after_explanation else "") + row["info"]["solution"])


def score(teacher: Backend, student: Backend, explanations: Sequence[Explanation], settings: RLTSettings) -> ExplanationScores:
    """rewards.score_explanations on each explanation of its row."""
    return score_explanations(
        teacher, student, [teacher_prompt(e.row["prompt"], e.row["info"]["solution"]) for e in explanations],
        [chat_prompt(e.row["prompt"]) for e in explanations], [e.ids for e in explanations],
        [solution_ids(student, e.row) for e in explanations], alpha=settings.alpha, kl_weight=settings.kl_weight)


class TeacherTrainer:
    """step() -> stats: G explanations for each of `problems_per_step` problems (cycled), written through the
    teacher's backend (its vLLM engine when it generates through one), each scored r = r_SS - lambda r_KL by the
    frozen student and the teacher's own weights, then one GRPO step on the teacher's adapter with the
    question's G explanations as a group. The student is only ever scored (no gradient, no optimiser)."""

    def __init__(self, teacher, student: Backend, problems: Sequence[Row], settings: RLTSettings, grpo: PolicyUpdate, *,
                 seed: int = 0):
        if grpo.student is not teacher:
            raise ValueError("the GRPO optimiser must hold the teacher's parameters")
        if teacher.backend.tokenizer.get_vocab() != student.tokenizer.get_vocab():
            raise ValueError("teacher and student must share a tokenizer (explanations pass as token ids)")
        self.teacher, self.student, self.problems = teacher, student, list(problems)
        self.settings, self.grpo, self.seed = settings, grpo, seed
        self.log: list[dict] = []
        self.rewards: list[list[float]] = []  # per step, every explanation's r
        self.position = 0

    def step(self) -> dict:
        s, start = self.settings, time.perf_counter()
        rows = [self.problems[(self.position + i) % len(self.problems)] for i in range(s.problems_per_step)]
        self.position += s.problems_per_step
        backend = self.teacher.backend
        groups = explain(backend, rows, n=s.group_size, max_new_tokens=s.max_explanation_tokens,
                         temperature=s.temperature, seed=self.seed + len(self.log))
        flat = [e for group in groups for e in group]
        scores = score(self.teacher.scorer, self.student, flat, s)  # r_KL under the log-probs the update uses
        prompts = [backend.encode_prompt(teacher_prompt(r["prompt"], r["info"]["solution"])) for r in rows]
        examples = [Rollout(None, prompts[i // s.group_size], backend.with_eos(e.ids, e.finished), float(r),
                            group=i // s.group_size)
                    for i, (e, r) in enumerate(zip(flat, scores.reward.tolist()))]
        stats = self.grpo.step(examples)
        self.rewards.append(scores.reward.tolist())
        row = {"step": len(self.log) + 1, "r": scores.reward.mean().item(), "r_ss": scores.r_ss.mean().item(),
               "r_kl": scores.r_kl.mean().item(), "r_std": scores.reward.std().item() if len(flat) > 1 else 0.0,
               "explanation_tokens": sum(len(e.ids) for e in flat) / len(flat),
               "finished": sum(e.finished for e in flat) / len(flat),
               "loss": stats["loss"], "kl_to_base": stats["kl"], "grad_norm": stats["grad_norm"],
               "seconds": time.perf_counter() - start}
        self.log.append(row)
        return row

    def run(self, steps: int, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        for _ in range(steps):
            row = self.step()
            if on_step:
                on_step(row)
        return self.log


def reward_rise(rewards_per_step: Sequence[Sequence[float]]) -> dict:
    """The teacher's reward in the last quarter of its steps minus the first quarter (every explanation
    counted; problems differ between the quarters, so difficulty adds noise)."""
    k = max(1, len(rewards_per_step) // 4)
    first = [r for step in rewards_per_step[:k] for r in step]
    last = [r for step in rewards_per_step[-k:] for r in step]
    return mean_difference(first, last) | {"steps_per_quarter": k}


# -- distillation: fine-tuning students on what the teacher wrote ---------------------------------------
def sft_examples(backend: Backend, rows: Sequence[Row], explanations: Sequence[Explanation] | None = None) -> list[Rollout]:
    """(chat(q), "t\\n s" + EOS) per row, or (chat(q), s + EOS) when explanations is None."""
    eos = [backend.tokenizer.eos_token_id]
    out = []
    for i, row in enumerate(rows):
        if explanations is None:
            completion = solution_ids(backend, row, after_explanation=False)
        else:
            if explanations[i].row is not row and explanations[i].row["prompt"] != row["prompt"]:
                raise ValueError(f"explanation {i} belongs to another row")
            completion = explanations[i].ids + solution_ids(backend, row)
        out.append(Rollout(None, backend.encode_prompt(chat_prompt(row["prompt"])), completion + eos, 0.0, i))
    return out


def sft_to_budget(grpo: PolicyUpdate, examples: Sequence[Rollout], token_budget: int, batch_size: int) -> list[dict]:
    """Imitation steps (PolicyUpdate.sft_step) over the examples in order, cycled, until `token_budget`
    completion tokens have been trained on: arms with shorter completions see more of them. The last
    batch is cut so no arm trains on more than the budget."""
    log, spent, at = [], 0, 0
    while spent < token_budget:
        batch = []
        while len(batch) < batch_size and spent + sum(len(e.completion_ids) for e in batch) < token_budget:
            batch.append(examples[at % len(examples)])
            at += 1
        overshoot = spent + sum(len(e.completion_ids) for e in batch) - token_budget
        if overshoot > 0:  # trim the last completion to the budget
            last = batch[-1]
            kept = list(last.completion_ids)[: len(last.completion_ids) - overshoot]
            batch[-1] = Rollout(None, last.prompt_ids, kept, last.reward, last.group)
        stats = grpo.sft_step(batch)
        spent += stats["completion_tokens"]
        log.append({"step": len(log) + 1, "loss": stats["loss"], "tokens": spent, "grad_norm": stats["grad_norm"]})
    return log
