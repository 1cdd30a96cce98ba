"""Rewards: answer extraction, HRE, PRE, penalties, the original system's weighted sum, and the reward training
uses (correctness by default). Plain functions; no model calls (scoring text is azlib.models' job)."""

from azlib.rewards.answers import ANSWER_LINE, complete_answer, extract_answer, is_correct, normalize_number
from azlib.rewards.components import (
    REWARD_KINDS,
    RewardBreakdown,
    RewardKind,
    RewardWeights,
    accumulated_pre,
    answer_reward,
    combined_reward,
    direction_bonus,
    hard_reward,
    length_penalty,
    perplexity_reward,
)
from azlib.rewards.trl import (RewardFunction, call_reward, check_reward_function, correctness_reward,
                               perplexity_reward_under, reward_name)

__all__ = [
    "ANSWER_LINE", "REWARD_KINDS", "complete_answer", "RewardBreakdown", "RewardKind", "RewardWeights", "accumulated_pre", "answer_reward", "combined_reward", "direction_bonus",
    "correctness_reward", "extract_answer", "hard_reward", "is_correct", "length_penalty", "normalize_number",
    "perplexity_reward", "perplexity_reward_under", "RewardFunction", "call_reward", "check_reward_function",
    "reward_name",
]
