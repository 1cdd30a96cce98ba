"""Tic-tac-toe against a trained AlphaZero net in the notebook: a 3x3 board of buttons, the net answering each move by
its search. Draws and wires buttons only: the game is azlib.games.tictactoe.Match, the player is NetPlayer."""

from __future__ import annotations

import html

import ipywidgets as widgets

from azlib.games.tictactoe_alphazero import NetPlayer, PolicyValueNet
from azlib.games.tictactoe import LINES, Match
from azlib.viz.static import StillPicture

OUTCOME = {"win": "You win: the net missed something.", "draw": "Draw: the best either side can force.",
           "loss": "The net wins."}


class PlayTicTacToe(StillPicture, widgets.VBox):
    """Click a square to move; the net replies with its search's move (`simulations` per move, no noise, as
    graded). "New game" starts again, as X (you open) or O (the net opens). Under the board: the share of the
    net's search visits per square for its last move."""

    def __init__(self, net: PolicyValueNet, simulations: int = 64, human: str = "X"):
        self.player = NetPlayer(net, simulations)
        self.match = Match(self.player, human)
        self.squares = [widgets.Button(description="", layout=widgets.Layout(width="64px", height="64px"),
                                       style={"font_size": "24px", "font_weight": "bold"})
                        for _ in range(9)]
        for square, button in enumerate(self.squares):
            button.on_click(lambda _button, square=square: self.click(square))
            button.add_class("azlib-square")  # for a browser test to find
        self.side = widgets.ToggleButtons(options=[("play X (you open)", "X"), ("play O", "O")], value=human)
        self.new_game_button = widgets.Button(description="New game", button_style="info")
        self.new_game_button.on_click(lambda _button: self.new_game())
        self.status, self.search_view = widgets.HTML(), widgets.HTML()
        board = widgets.GridBox(self.squares, layout=widgets.Layout(grid_template_columns="repeat(3, 66px)"))
        super().__init__([widgets.HBox([self.side, self.new_game_button]), board, self.status, self.search_view])
        self.add_class("azlib-tictactoe")
        self._show()

    def still(self) -> dict[str, str]:
        rows = [" | ".join(self.match.board[r * 3:r * 3 + 3]) for r in range(3)]
        state = OUTCOME[self.match.result] if self.match.over else f"You play {self.match.human}."
        text = "\n".join(["Tic-tac-toe against the net (run the cell to play):", *rows, state])
        return {"text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>"}

    def click(self, square: int) -> None:
        """A person's click on a square (0..8, row by row): their move and the net's reply, or a note why not."""
        if self.match.over:
            self._show("The game is over: press New game.")
        elif self.match.board[square] != ".":
            self._show(f"Square {square} is taken: choose a free one.")
        else:
            self.match.play(square)
            self._show()

    def new_game(self) -> None:
        self.player.last = None  # as O, the net's opening search sets it again
        self.match.new_game(self.side.value)
        self._show()

    def _show(self, note: str = "") -> None:
        board, match = self.match.board, self.match
        line = next((l for l in LINES if board[l[0]] != "." and board[l[0]] == board[l[1]] == board[l[2]]), ())
        for square, button in enumerate(self.squares):
            button.description = "" if board[square] == "." else board[square]
            button.disabled = board[square] != "." or match.over
            button.button_style = "success" if square in line else ""
        text = f"<b>{OUTCOME[match.result]}</b>" if match.over else f"You play {match.human}: your move."
        self.status.value = text + (f" {note}" if note else "")
        shares = self.player.visit_shares()
        if shares:
            cells = "".join(("<tr>" if i % 3 == 0 else "") + f"<td style='width:48px;text-align:center'>"
                            f"{'' if i not in shares else f'{shares[i]:.0%}'}</td>" + ("</tr>" if i % 3 == 2 else "")
                            for i in range(9))
            self.search_view.value = (f"The net's last move: square {self.player.last.action}, chosen by its "
                                      f"visits (share per square):<table>{cells}</table>")
        else:
            self.search_view.value = ""
