"""Search over text, the language model's game: env (the MCTS environment), forking (TreeRL's forking tree), signals
(trees to Rollouts for one update), explorers (the one a run uses). Not the search engine, nor the update."""
