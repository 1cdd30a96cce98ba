"""Monte Carlo tree search: one search (azlib.mcts.search) over small environments
(azlib.mcts.envs: tic-tac-toe, text). Knows nothing of training."""

from azlib.mcts.search import (Child, Environment, Expansion, SearchSettings, SearchResult, search, selection_terms,
                                tree_after, visit_weights)
from azlib.mcts.tree import Node, Tree

__all__ = ["Child", "Environment", "Expansion", "Node", "SearchSettings", "SearchResult", "Tree", "search",
           "selection_terms", "tree_after", "visit_weights"]
