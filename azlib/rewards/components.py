"""Rewards of whole or partial answers: the kit's default, correctness (HRE of a finished answer),
and the original system's weighted sum of HRE, discounted PRE, length penalty and direction bonus. Pure functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, get_args

from azlib.rewards.answers import extract_answer, is_correct
from azlib.settings import RewardKind


@dataclass(frozen=True)
class RewardWeights:
    """Defaults from the original system (shared/docs/reference.md)."""

    hre: float = 0.4  # weight of the hard correctness reward
    pre: float = 0.6  # weight of the accumulated perplexity reward
    gamma: float = 0.95  # discount of step PREs along the path
    length_penalty: float = 0.01  # per depth step
    right_bonus: float = 0.1  # per right branch (path code 1)
    wrong_penalty: float = 0.05  # per wrong branch (path code 0)


def hard_reward(completion: str, gold: str) -> float:
    """HRE: 1.0 if the extracted final answer equals the gold, else 0.0 (meaningful at terminals)."""
    return float(is_correct(extract_answer(completion), gold))


def perplexity_reward(token_logprobs: Sequence[float]) -> float:
    """PRE = -log(perplexity) = mean token log-prob under the student; 0.0 for no tokens."""
    return math.fsum(token_logprobs) / len(token_logprobs) if token_logprobs else 0.0


def accumulated_pre(step_pres: Sequence[float], gamma: float) -> float:
    """sum_i gamma^i * PRE_i over the steps of a root-to-leaf path (step 0 is the root's child)."""
    return math.fsum(gamma**i * pre for i, pre in enumerate(step_pres))


def length_penalty(depth: int, per_step: float) -> float:
    return -per_step * depth


def direction_bonus(path_code: str, right_bonus: float, wrong_penalty: float) -> float:
    """path_code: one character per step, '1' = right branch, '0' = wrong branch."""
    return right_bonus * path_code.count("1") - wrong_penalty * path_code.count("0")


@dataclass(frozen=True)
class RewardBreakdown:
    hre: float
    accumulated_pre: float
    length_penalty: float
    direction_bonus: float
    total: float


def combined_reward(
    completion: str,
    gold: str,
    step_pres: Sequence[float],
    path_code: str,
    weights: RewardWeights = RewardWeights(),
    terminal: bool = True,
) -> RewardBreakdown:
    """total = w_hre * HRE + w_pre * accumulated PRE + length penalty + direction bonus.
    step_pres: PRE of each step's chunk along the path (its depth is their count); HRE counts only
    at terminals."""
    hre = hard_reward(completion, gold) if terminal else 0.0
    acc = accumulated_pre(step_pres, weights.gamma)
    penalty = length_penalty(len(step_pres), weights.length_penalty)
    bonus = direction_bonus(path_code, weights.right_bonus, weights.wrong_penalty)
    total = weights.hre * hre + weights.pre * acc + penalty + bonus
    return RewardBreakdown(hre, acc, penalty, bonus, total)


REWARD_KINDS = get_args(RewardKind)


def answer_reward(completion: str, gold: str, *, finished: bool, step_pres: Sequence[float] = (), path_code: str = "",
                  kind: RewardKind = "correctness", weights: RewardWeights = RewardWeights()) -> RewardBreakdown:
    """The reward a training signal or a search leaf uses.

    correctness (default): total = HRE if the answer is finished (end of text or its answer line), else 0,
      so every correct finished answer outranks every wrong or unfinished one; an answer cut at the
      token limit scores 0 whatever number it last wrote. PRE and the penalties are reported, not added.
    combined (the original system's): combined_reward with HRE counted at terminals (`finished`). It ranks short,
      likely fragments above correct answers (a correct 3-step answer with step PRE -0.7 scores about
      -0.83, an unfinished 1-step fragment -0.43); notebook 05 shows what training on it does.
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"reward kind must be one of {REWARD_KINDS}, got {kind!r}")
    seed = combined_reward(completion, gold, step_pres, path_code, weights, terminal=finished)
    if kind == "combined":
        return seed
    hre = hard_reward(completion, gold) if finished else 0.0
    return RewardBreakdown(hre, seed.accumulated_pre, seed.length_penalty, seed.direction_bonus, hre)
