"""RLT's teacher rewards (Cetin et al. 2025, sec. 3.2): how well an explanation lets a frozen student reproduce the
solution, and how natural it is to that student. Formulas on score()'s per-token log-probs; no training."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from azlib.models.generation import Backend, Prompt
from azlib.settings import ALPHA, LAMBDA


def padded(rows: Sequence[Sequence[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [B, T], mask [B, T]) from ragged rows, right-padded with zeros."""
    width = max([len(r) for r in rows] + [1])
    values = torch.zeros(len(rows), width)
    mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        values[i, : len(r)] = torch.tensor(list(r), dtype=torch.float32)
        mask[i, : len(r)] = 1.0
    return values, mask


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def solution_reward(logp_solution: torch.Tensor, mask: torch.Tensor, alpha: float = ALPHA) -> torch.Tensor:
    """r_SS [B]: mean + alpha * min of the student's log-probs of the solution tokens (after q and t); the min keeps
    a single badly explained solution token from hiding in the average."""
    lowest = logp_solution.masked_fill(mask == 0, float("inf")).min(-1).values
    return _masked_mean(logp_solution, mask) + alpha * torch.where(mask.sum(-1) > 0, lowest, torch.zeros_like(lowest))


def kl_reward(logp_teacher: torch.Tensor, logp_student: torch.Tensor, mask: torch.Tensor,
              alpha: float = ALPHA) -> torch.Tensor:
    """r_KL [B]: mean + alpha * max over the explanation tokens of kl_j = log pi_T - log pi_S, on the explanation
    the teacher wrote (a one-sample estimate of the KL between the two views, as in the paper); the max keeps a
    single token the student finds absurd from hiding in the average. An empty explanation has r_KL = 0."""
    kl = logp_teacher - logp_student
    highest = kl.masked_fill(mask == 0, float("-inf")).max(-1).values
    return _masked_mean(kl, mask) + alpha * torch.where(mask.sum(-1) > 0, highest, torch.zeros_like(highest))


@dataclass
class ExplanationScores:
    """Per explanation: the reward and its parts, plus the token-level log-probs they came from."""

    r_ss: torch.Tensor  # [B]
    r_kl: torch.Tensor  # [B]
    reward: torch.Tensor  # [B] r_SS - lambda r_KL
    solution_logp: list[list[float]]  # log pi_S(s_i | q, t, s_<i)
    teacher_logp: list[list[float]]  # log pi_T(t_j | q, s, t_<j)
    student_logp: list[list[float]]  # log pi_S(t_j | q, t_<j)


def score_explanations(teacher: Backend, student: Backend, teacher_prompts: Sequence[Prompt],
                       student_prompts: Sequence[Prompt], explanations: Sequence[Sequence[int]],
                       solutions: Sequence[Sequence[int]], *, alpha: float = ALPHA,
                       kl_weight: float = LAMBDA) -> ExplanationScores:
    """Two batched score() calls: the teacher scores t after (q, s); the student scores t followed by
    the solution after q alone, so one forward gives both log pi_S(t_j | q, t_<j) and
    log pi_S(s_i | q, t, s_<i). Token ids: teacher and student must share a tokenizer."""
    if not len(teacher_prompts) == len(student_prompts) == len(explanations) == len(solutions):
        raise ValueError("one teacher prompt, student prompt, explanation and solution per row")
    teacher_logp = teacher.score(teacher_prompts, [list(t) for t in explanations])
    both = student.score(student_prompts, [list(t) + list(s) for t, s in zip(explanations, solutions)])
    student_logp = [row[: len(t)] for row, t in zip(both, explanations)]
    solution_logp = [row[len(t):] for row, t in zip(both, explanations)]
    s_values, s_mask = padded(solution_logp)
    t_values, t_mask = padded(teacher_logp)
    st_values, _ = padded(student_logp)
    r_ss = solution_reward(s_values, s_mask, alpha)
    r_kl = kl_reward(t_values, st_values, t_mask, alpha)
    return ExplanationScores(r_ss, r_kl, r_ss - kl_weight * r_kl, solution_logp, teacher_logp, student_logp)
