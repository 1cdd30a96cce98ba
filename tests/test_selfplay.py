"""AlphaZero's one self-play loop (azlib.mcts.selfplay): lock-step batching, grouping, the recorded target."""

from __future__ import annotations

import random

from azlib.games import tictactoe as ttt
from azlib.mcts import SearchSettings, selfplay


class CountingTicTacToe(ttt.TicTacToe):
    """Random-playout tic-tac-toe that records the states of each expand call."""

    def __init__(self):
        super().__init__()
        self.calls: list[list[str]] = []

    def expand(self, boards, rng):
        self.calls.append(list(boards))
        return super().expand(boards, rng)


def test_games_of_one_group_are_searched_in_one_call_and_played_to_their_ends():
    env = CountingTicTacToe()
    starts = [ttt.EMPTY, "X........", "XO.......", "XOX......"]
    settings = SearchSettings(num_simulations=6, max_depth=9, temperature=1.0)
    games = selfplay.play(starts, lambda g, board, made: (env, settings), random.Random(0))
    assert env.calls[0] == starts, "every game's root expanded in the first call"
    for start, game in zip(starts, games):
        assert game.moves[0].state == start and env.is_terminal(game.end)
        for (state, result), after in zip(game.moves, [m.state for m in game.moves[1:]] + [game.end]):
            assert abs(sum(result.action_weights) - 1.0) < 1e-9
            assert after == ttt.play(state, result.action), "each move plays the search's chosen action"
    assert len(games[0].moves) >= 5 and max(len(c) for c in env.calls) <= len(starts)


def test_games_split_by_environment_and_settings_and_the_target_ignores_the_temperature():
    x_env, o_env = CountingTicTacToe(), CountingTicTacToe()
    greedy = SearchSettings(num_simulations=12, max_depth=9, temperature=0.0)
    sampled = SearchSettings(num_simulations=12, max_depth=9, temperature=1.0)

    def searcher(g, board, made):  # X searches with x_env, O with o_env; game 1 samples its moves
        return (x_env if board.count(".") % 2 else o_env), (sampled if g == 1 else greedy)

    games = selfplay.play([ttt.EMPTY, ttt.EMPTY], searcher, random.Random(1))
    assert all(len(call) == 1 for call in x_env.calls + o_env.calls), "two settings: each game searched alone"
    for state, result in games[0].moves:  # greedy: the most visited action, the target its visit shares
        visits = [result.tree.nodes[i].visits for i in result.tree.root.children]
        assert result.action == result.actions[visits.index(max(visits))]
    for state, result in games[1].moves:  # sampled or not, the target is the visit shares
        visits = [result.tree.nodes[i].visits for i in result.tree.root.children]
        assert result.action_weights == [v / sum(visits) for v in visits]
