"""Tic-tac-toe as a search environment, with exact minimax as ground truth, and a match against a person.
The teaching bridge: the same search as for text, on a game whose optimum is known."""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Callable, Sequence

from azlib.mcts.search import Child, Expansion

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
EMPTY = "." * 9


def to_move(board: str) -> str:
    return "X" if board.count("X") == board.count("O") else "O"


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def legal_moves(board: str) -> list[int]:
    return [] if winner(board) else [i for i, s in enumerate(board) if s == "."]


def play(board: str, move: int) -> str:
    return board[:move] + to_move(board) + board[move + 1 :]


def outcome(board: str) -> float:
    """For the player to move at a finished board: -1 (the opponent just won) or 0 (draw)."""
    return -1.0 if winner(board) else 0.0


@lru_cache(maxsize=None)
def minimax(board: str) -> int:
    """Exact game value for the player to move: +1 win, 0 draw, -1 loss."""
    moves = legal_moves(board)
    if not moves:
        return int(outcome(board))
    return max(-minimax(play(board, m)) for m in moves)


def reachable_positions() -> list[str]:
    seen, frontier = {EMPTY}, [EMPTY]
    while frontier:
        board = frontier.pop()
        for m in legal_moves(board):
            if (child := play(board, m)) not in seen:
                seen.add(child)
                frontier.append(child)
    return sorted(seen)


class Match:
    """A game between a person and an agent (board -> move): the person's moves checked, the agent answering
    each at once; `result` is the person's (win, draw or loss), None while the game goes on."""

    def __init__(self, agent: Callable[[str], int], human: str = "X"):
        self.agent = agent
        self.new_game(human)

    def new_game(self, human: str | None = None) -> None:
        """An empty board; the person plays `human` (X moves first: as O, the agent opens)."""
        if human is not None:
            if human not in ("X", "O"):
                raise ValueError(f"the person plays 'X' or 'O', got {human!r}")
            self.human = human
        self.board = EMPTY
        if to_move(self.board) != self.human:
            self._agent_moves()

    @property
    def over(self) -> bool:
        return not legal_moves(self.board)

    @property
    def result(self) -> str | None:
        if not self.over:
            return None
        w = winner(self.board)
        return "draw" if w is None else "win" if w == self.human else "loss"

    def play(self, move: int) -> int | None:
        """The person's move, then the agent's reply (returned; None once the game is over)."""
        if self.over:
            raise ValueError("the game is over; start a new one")
        if move not in legal_moves(self.board):
            raise ValueError(f"square {move} is not free")
        self.board = play(self.board, move)
        return None if self.over else self._agent_moves()

    def _agent_moves(self) -> int:
        move = self.agent(self.board)
        if move not in legal_moves(self.board):
            raise RuntimeError(f"the agent chose square {move}, which is not a legal move on {self.board}")
        self.board = play(self.board, move)
        return move


class TicTacToe:
    """Classic MCTS's tic-tac-toe: uniform priors, a leaf valued by one random playout (AlphaZero's net-valued one is
    azlib.games.tictactoe_alphazero.NetTicTacToe)."""

    two_player = True

    def is_terminal(self, board: str) -> bool:
        return not legal_moves(board)

    def terminal_value(self, board: str) -> float:
        return outcome(board)

    def expand(self, boards: Sequence[str], rng: random.Random) -> list[Expansion]:
        return [self._expand(b, rng) for b in boards]

    def _expand(self, board: str, rng: random.Random) -> Expansion:
        moves = legal_moves(board)
        return Expansion([Child(m, play(board, m), 1 / len(moves)) for m in moves], self._playout(board, rng))

    @staticmethod
    def _playout(board: str, rng: random.Random) -> float:
        """Random moves to the end; the result for the player to move at `board`."""
        sign = 1.0
        while moves := legal_moves(board):
            board = play(board, rng.choice(moves))
            sign = -sign
        return sign * outcome(board)
