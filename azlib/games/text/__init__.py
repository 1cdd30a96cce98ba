"""Search over text, the language model's game: partial answers searched (env: the text environment the MCTS of
azlib.mcts runs over; forking: TreeRL's forking tree over whole answers), both continuing token ids and making their
whole answers as azlib.sampled_answer.Answer; what the searched trees become for one update (signals: Rollouts with
their token ids, reward and group); explorers: the one a training run uses, problems and a seed in, Rollouts out."""
