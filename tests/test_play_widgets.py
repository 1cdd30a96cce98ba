"""The widgets to play with, without a browser: notebook 01's bandit sliders retrain and redraw on a change;
tic-tac-toe against the net, played through the board's click handler: every reply of the net is a legal move,
a taken square or a finished game changes nothing, and the result is reported. Each widget, the search tree's
too, carries a still picture of what it shows, for a stored notebook."""

import base64
import random

import pytest
import torch

from azlib.mcts import search
from azlib.games.tictactoe_alphazero import NetPlayer, PolicyValueNet, optimal_moves
from azlib.games import tictactoe as ttt
from azlib.settings import SearchSettings
from azlib.viz import BanditSliders, PlayTicTacToe, TreeWidget, describe_board_node


def test_bandit_sliders_retrain_and_redraw_on_a_change():
    w = BanditSliders([2, 0, 3], num_tokens=4, group_size=8, learning_rate=0.1, clip_epsilon=0.2, beta=0.01,
                      ppo_epochs=4, num_updates=20, num_seeds=2, seed=0)
    assert w.history.samples[-1] == 8 * 20 and w.history.metrics["reward"].shape == (21, 2)
    assert "GRPO: final expected reward" in w.status.value
    assert w.controls["ppo_epochs"].disabled and not w.controls["beta"].disabled, "GRPO: one pass, the KL acts"
    w.controls["group_size"].value = 4  # what a slider's release does
    assert w.history.samples[-1] == 4 * 20
    w.controls["algorithm"].value = "REINFORCE"
    assert w.controls["beta"].disabled and w.controls["clip_epsilon"].disabled
    fig = w.draw()
    assert [ax.get_xlabel() for ax in fig.axes] == ["sampled answers per run"] * 3
    assert all(ax.get_title() and ax.get_ylabel() for ax in fig.axes)
    assert any(line.get_linestyle() == "--" for line in fig.axes[0].lines), "the starting settings, dashed"
    same = BanditSliders([2, 0, 3], num_tokens=4, group_size=4, learning_rate=0.1, clip_epsilon=0.2, beta=0.01,
                         ppo_epochs=4, num_updates=20, num_seeds=2, seed=0, algorithm="REINFORCE")
    assert (same.history.metrics["reward"] == w.history.metrics["reward"]).all(), "the sliders train as bandit.train"


def net():
    torch.manual_seed(0)
    return PolicyValueNet(hidden=16)  # untrained: its replies are still searched, so must still be legal


def play_out(game: PlayTicTacToe) -> list[str]:
    """Click the lowest free square until the game ends; check each reply of the net; return the boards."""
    boards = [game.match.board]
    while not game.match.over:
        before = game.match.board
        square = before.index(".")
        game.click(square)
        after = game.match.board
        assert after[square] == game.match.human
        changed = [i for i in range(9) if before[i] != after[i] and i != square]
        if not ttt.legal_moves(ttt.play(before, square)):
            assert changed == [], "the net does not move after the game ended"
        else:
            (reply,) = changed
            assert reply in ttt.legal_moves(ttt.play(before, square)) and reply == game.player.last.action
            assert after[reply] == ("O" if game.match.human == "X" else "X")
        boards.append(after)
    return boards


@pytest.mark.parametrize("side", ["X", "O"])
def test_a_scripted_game_through_the_click_handler(side):
    game = PlayTicTacToe(net(), simulations=16, human=side)
    assert game.match.board.count(".") == (9 if side == "X" else 8), "as O, the net opens"
    assert "your move" in game.status.value
    play_out(game)
    result = game.match.result
    assert result in ("win", "draw", "loss")
    assert {"win": "You win", "draw": "Draw", "loss": "The net wins"}[result] in game.status.value
    assert all(b.disabled for b in game.squares), "a finished game takes no more clicks"
    board = game.match.board
    game.click(board.index(".") if "." in board else 0)
    assert game.match.board == board and "game is over" in game.status.value
    game.new_game()
    assert game.match.board.count(".") == (9 if side == "X" else 8) and game.match.result is None


def test_a_taken_square_is_refused_and_the_squares_show_the_board():
    game = PlayTicTacToe(net(), simulations=8)
    game.click(4)
    board = game.match.board
    game.click(4)
    assert game.match.board == board and "Square 4 is taken" in game.status.value
    assert [b.description or "." for b in game.squares] == list(board)
    shares = game.player.visit_shares()
    assert set(shares) == set(ttt.legal_moves("....X....")) and sum(shares.values()) == pytest.approx(1.0)
    assert "The net's last move: square" in game.search_view.value


def test_a_match_reports_the_persons_result_against_perfect_play():
    perfect = lambda board: optimal_moves(board)[0]  # noqa: E731
    match = ttt.Match(perfect)
    for square in (1, 3, 5, 7, 8, 6, 2):  # weak play: the agent's reply wins
        if match.over:
            break
        if match.board[square] == ".":
            match.play(square)
    assert match.result == "loss"
    with pytest.raises(ValueError, match="over"):
        match.play(match.board.index(".") if "." in match.board else 0)
    match.new_game("O")
    assert match.board.count("X") == 1 and match.human == "O"
    with pytest.raises(ValueError, match="not free"):
        match.play(match.board.index("X"))
    with pytest.raises(RuntimeError, match="not a legal move"):
        ttt.Match(lambda board: 0, human="O").play(1)
    assert NetPlayer(net(), simulations=4).visit_shares() == {}


def test_each_widget_carries_a_still_picture_of_what_it_shows_now():
    """What a stored notebook (azlib.lab.stored_notebooks) keeps of a widget, beside the live view a kernel draws."""
    (result,) = search(ttt.TicTacToe(), ["X...O...."], SearchSettings(num_simulations=20, temperature=0),
                       random.Random(0), replay=True)
    tree = result.tree
    widget = TreeWidget(tree, "t", describe_board_node)
    widget.step = 5
    data, _ = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data and data["image/svg+xml"] == widget.svg
    assert "after 5 of 20 simulations" in data["image/svg+xml"]

    sliders = BanditSliders([2, 0, 3], num_tokens=4, group_size=8, learning_rate=0.1, clip_epsilon=0.2, beta=0.01,
                            ppo_epochs=4, num_updates=20, num_seeds=2, seed=0)
    first = sliders._repr_mimebundle_()[0]["image/png"]
    sliders.controls["group_size"].value = 4
    assert base64.b64decode(first).startswith(b"\x89PNG") and sliders._repr_mimebundle_()[0]["image/png"] != first

    game = PlayTicTacToe(net(), simulations=8)
    game.click(4)
    still = game._repr_mimebundle_()[0]
    text = still["text/plain"]
    assert text.splitlines()[2].split(" | ")[1] == "X" and text.count("O") == 1
    assert still["text/html"].startswith("<pre>") and "X" in still["text/html"], "a still the committed notebook keeps"
