"""The games the one search (azlib.mcts.search) plays, each behind its Environment protocol: tic-tac-toe
(tictactoe: the rules and exact minimax), Countdown (countdown: rules and exact oracle, the language model's
policy and value, self-play, the arms of notebook 08) and text, the language model's own game (text: a node is a
partial answer; the trees it grows become training signals)."""
