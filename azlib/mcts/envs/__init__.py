"""A game environment: tic-tac-toe, checked against minimax. It implements azlib.mcts.search.Environment, as
azlib.textsearch.env.TextEnv does for partial answers."""
