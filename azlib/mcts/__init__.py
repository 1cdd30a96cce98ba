"""Monte Carlo tree search: one search (search), its tree, and AlphaZero's loop (selfplay, learn, rounds). Knows
nothing of language models; the games it plays live in azlib.games."""

from azlib.mcts.search import (Child, Environment, Expansion, SearchResult, search, selection_terms, tree_after,
                                visit_weights)
from azlib.mcts.tree import Node, Tree
from azlib.settings import SearchSettings  # the search's settings, whose home is azlib.settings

__all__ = ["Child", "Environment", "Expansion", "Node", "SearchSettings", "SearchResult", "Tree", "search",
           "selection_terms", "tree_after", "visit_weights"]
