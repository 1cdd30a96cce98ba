"""Rewards: answer extraction and correctness, HRE, PRE, length penalty, direction bonus, their sum.
Plain functions of text, log-probs and path; no model calls (scoring text is azlib.models' job)."""

from azlib.rewards.answers import extract_answer, is_correct, normalize_number
from azlib.rewards.components import (
    RewardBreakdown,
    RewardWeights,
    accumulated_pre,
    combined_reward,
    direction_bonus,
    hard_reward,
    length_penalty,
    perplexity_reward,
)
from azlib.rewards.trl import correctness_reward, perplexity_reward_under

__all__ = [
    "RewardBreakdown", "RewardWeights", "accumulated_pre", "combined_reward", "direction_bonus",
    "correctness_reward", "extract_answer", "hard_reward", "is_correct", "length_penalty", "normalize_number",
    "perplexity_reward", "perplexity_reward_under",
]
