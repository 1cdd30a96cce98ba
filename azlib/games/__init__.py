"""The games the one search (azlib.mcts.search) plays through its Environment protocol: tictactoe, countdown, and text,
the language model's own game (a node is a partial answer), each with its own training. Not the search."""
