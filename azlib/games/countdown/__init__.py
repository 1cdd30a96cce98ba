"""Countdown, where the rules are exact (notebook 08): rules, oracle, problems, a policy-value GPT, self-play MCTS, the
arms. This module imports nothing, so the notebook schema reads the settings without loading a model library."""
