"""Countdown, where the rules are exact: notebook 08's world (rules, oracle, problems), a language-model policy
with a value head, self-play MCTS and the arms it is compared with. This module imports nothing, so that the
notebook schema can read the settings without loading a model library."""
