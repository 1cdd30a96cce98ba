"""Reinforcement-Learned Teachers (Cetin et al. 2025): rewards for explanations and teacher training
with azlib's GRPO, then distillation of students on the explanations. Not the student's own RL loop."""

from azlib.rlt.rewards import ExplanationScores, kl_reward, score_explanations, solution_reward
from azlib.rlt.teacher import (Explanation, TeacherTrainer, explain, reward_rise, score, sft_examples, sft_to_budget,
                               teacher_prompt)
from azlib.settings import ALPHA, LAMBDA, RLTSettings

__all__ = ["ALPHA", "LAMBDA", "Explanation", "ExplanationScores", "RLTSettings", "TeacherTrainer", "explain",
           "kl_reward", "reward_rise", "score", "score_explanations", "sft_examples", "sft_to_budget", "solution_reward",
           "teacher_prompt"]
