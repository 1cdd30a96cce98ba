"""Search over text: a language model's partial answers searched (env: the text environment the MCTS of
azlib.mcts runs over; forking: TreeRL's forking tree over whole answers), both continuing token ids and making
their whole answers as answer.Answer, and what the searched trees become for one update (signals: Completions with
their token ids, reward and group); explorers: the one a training run uses, problems and a seed in, its Completions
out."""
