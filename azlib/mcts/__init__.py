"""Monte Carlo tree search: one search (azlib.mcts.search), its tree, AlphaZero (azlib.mcts.alphazero) and a
game to check them on (azlib.mcts.envs: tic-tac-toe). Knows nothing of language models: search over text lives in
azlib.textsearch."""

from azlib.mcts.search import (Child, Environment, Expansion, SearchResult, search, selection_terms, tree_after,
                                visit_weights)
from azlib.mcts.tree import Node, Tree
from azlib.settings import SearchSettings  # the search's settings, whose home is azlib.settings

__all__ = ["Child", "Environment", "Expansion", "Node", "SearchSettings", "SearchResult", "Tree", "search",
           "selection_terms", "tree_after", "visit_weights"]
