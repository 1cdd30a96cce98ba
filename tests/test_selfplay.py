"""AlphaZero's one loop: self-play (azlib.mcts.selfplay: lock-step batching, grouping, the recorded target), the
update (azlib.mcts.learn: minibatches that keep a unit together, epochs, clipping) and the rounds (azlib.mcts.rounds:
the replay window, the row, the untimed measure)."""

from __future__ import annotations

import random
import time

import pytest
import torch

from azlib.games import tictactoe as ttt
from azlib.mcts import SearchSettings, selfplay
from azlib.mcts.learn import minibatches, update
from azlib.mcts.rounds import run_rounds


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


def test_minibatches_keep_a_units_examples_together():
    units = [m for m in range(30) for _ in range(m % 4 + 1)]  # 30 moves of 1 to 4 candidate lines
    batches = minibatches(units, 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(len(units)))
    owner = {i: b for b, rows in enumerate(batches) for i in rows}
    assert all(len({owner[i] for i, u in enumerate(units) if u == m}) == 1 for m in range(30))
    assert all(len(b) >= 8 for b in batches[:-1]) and all(len(b) < 8 + 4 for b in batches)
    assert minibatches(range(10), 4, random.Random(1)) != minibatches(range(10), 4, random.Random(2))


def test_update_steps_once_a_minibatch_an_epoch_and_clips_the_gradient():
    """Minibatches of 4, 4 and 2 over two epochs; the loss reads one parameter on even steps and the other on odd
    ones, with a gradient far above the clip: each step moves the parameter it read by exactly the clipped norm, and
    the other not at all (the gradient is zeroed between steps, and the clip covers every parameter)."""
    first, second = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([first, second], lr=1.0)
    seen: list[list[int]] = []

    def loss(batch):
        read = first if len(seen) % 2 == 0 else second
        seen.append(batch)
        value = 100.0 * read.sum() * len(batch)
        return value, {"loss": float(len(batch))}

    logs, steps = update(loss, optimizer, range(10), 4, 2, random.Random(0), max_grad_norm=0.5)
    assert steps == len(seen) == 6 and sorted(len(b) for b in seen) == [2, 2, 4, 4, 4, 4]
    assert sorted(i for b in seen[:3] for i in b) == list(range(10))  # an epoch sees every example once
    assert float(first.detach().norm()) == pytest.approx(3 * 0.5) and float(second.detach().norm()) == pytest.approx(
        3 * 0.5)
    assert logs == {"loss": pytest.approx(20 / 6)}


def test_rounds_learn_on_the_latest_window_and_time_only_play_and_learning():
    """Round i plays examples [i, i]: with a window of 2 the learner sees rounds i-1 and i, oldest first; a slow
    measure is in its round's row but not in the loop's seconds, which count play and learning so far."""
    played, windows, measured = iter(range(1, 5)), [], []

    def play():
        i = next(played)
        time.sleep(0.02)
        return [i, i], {"played": i}

    def learn(window):
        windows.append(window)
        return {"seen": len(window)}

    def measure(iteration):
        measured.append(iteration)
        time.sleep(0.2)
        return {"grade": 10 * iteration} if iteration % 2 == 0 else {}

    history = run_rounds(4, play, learn, window=2, measure=measure)
    assert windows == [[1, 1], [1, 1, 2, 2], [2, 2, 3, 3], [3, 3, 4, 4]] and measured == [1, 2, 3, 4]
    assert [{k: v for k, v in row.items() if k != "seconds"} for row in history] == [
        {"iteration": 1, "played": 1, "seen": 2}, {"iteration": 2, "played": 2, "seen": 4, "grade": 20},
        {"iteration": 3, "played": 3, "seen": 4}, {"iteration": 4, "played": 4, "seen": 4, "grade": 40}]
    seconds = [row["seconds"] for row in history]
    assert seconds == sorted(seconds) and 0.08 <= seconds[-1] < 0.5, "four plays of 0.02 s, no measure of 0.2 s"
