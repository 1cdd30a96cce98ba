"""Search environments: tic-tac-toe (checked against minimax) and text (partial answers).
Each implements azlib.mcts.search.Environment."""
