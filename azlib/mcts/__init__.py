"""Monte Carlo tree search: one search (azlib.mcts.search) over small environments
(azlib.mcts.envs: tic-tac-toe, text). Knows nothing of training."""

from azlib.mcts.search import Child, Environment, Expansion, SearchConfig, SearchResult, search, visit_weights
from azlib.mcts.tree import Node, Tree

__all__ = ["Child", "Environment", "Expansion", "Node", "SearchConfig", "SearchResult", "Tree", "search",
           "visit_weights"]
