"""AlphaZero on tic-tac-toe: a small policy-value net, self-play with the kit's search, training on
visit counts and outcomes, and matches against perfect play. The compact version of the loop."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from azlib.mcts.envs import tictactoe as ttt
from azlib.mcts.search import Child, Expansion, SearchConfig, search, visit_weights


class PolicyValueNet(nn.Module):
    """Board (from the mover's view: mine, theirs, empty) -> move logits and a value in [-1, 1]."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(27, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.policy, self.value = nn.Linear(hidden, 9), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.policy(h), torch.tanh(self.value(h)).squeeze(-1)


def encode(boards: Sequence[str]) -> torch.Tensor:
    rows = []
    for b in boards:
        me = ttt.to_move(b)
        rows.append([float(c == me) for c in b] + [float(c not in (me, ".")) for c in b] + [float(c == ".") for c in b])
    return torch.tensor(rows)


class NetTicTacToe(ttt.TicTacToe):
    """Leaves valued by the net, priors from its policy over legal moves: one forward per search step."""

    def __init__(self, net: PolicyValueNet):
        super().__init__()
        self.net = net

    @torch.no_grad()
    def expand(self, boards, rng):
        logits, values = self.net(encode(boards))
        out = []
        for board, lg, v in zip(boards, logits, values):
            moves = ttt.legal_moves(board)
            priors = torch.softmax(lg[moves], -1).tolist()
            out.append(Expansion([Child(m, ttt.play(board, m), p) for m, p in zip(moves, priors)], float(v)))
        return out


@dataclass(frozen=True)
class AlphaZeroSettings:
    iterations: int = 10
    games_per_iteration: int = 32
    simulations: int = 32
    exploratory_moves: int = 2  # moves sampled from the visit distribution, then argmax
    epochs: int = 4
    batch_size: int = 64
    learning_rate: float = 3e-3
    eval_games: int = 20
    replay_iterations: int = 4  # train on the positions of this many latest iterations


def self_play(net: PolicyValueNet, settings: AlphaZeroSettings, rng: random.Random) -> list[tuple[str, list[float], float]]:
    """Games in lock-step (one batched net call per search step across all games). Returns
    (board, visit distribution pi, outcome z for the player to move) for every position played."""
    env = NetTicTacToe(net)
    boards = [ttt.EMPTY] * settings.games_per_iteration
    history: list[list[tuple[str, list[float]]]] = [[] for _ in boards]
    move = 0
    while live := [g for g, b in enumerate(boards) if ttt.legal_moves(b)]:
        config = SearchConfig(num_simulations=settings.simulations, max_depth=9, dirichlet_fraction=0.25,
                              temperature=1.0 if move < settings.exploratory_moves else 0.0)
        for g, result in zip(live, search(env, [boards[g] for g in live], config, rng)):
            pi = [0.0] * 9  # the policy target: visit shares, whatever temperature chose the move
            visits = [result.tree.nodes[i].visits for i in result.tree.root.children]
            for action, w in zip(result.actions, visit_weights(visits, 1.0)):
                pi[action] = w
            history[g].append((boards[g], pi))
            boards[g] = ttt.play(boards[g], result.action)
        move += 1
    data = []
    for g, end in enumerate(boards):
        final = ttt.outcome(end)  # for the player to move at the end: -1 if the last mover won
        for board, pi in history[g]:
            moves_to_end = board.count(".") - end.count(".")  # even: the same player is to move at the end
            data.append((board, pi, final if moves_to_end % 2 == 0 else -final))
    return data


def train(net: PolicyValueNet, data, settings: AlphaZeroSettings, optimizer, rng: random.Random) -> dict[str, float]:
    """loss = (z - v)^2 - pi . log p, averaged over the batch (AlphaZero, without the L2 term)."""
    boards, pis, zs = zip(*data)
    x, pi, z = encode(boards), torch.tensor(pis), torch.tensor(zs)
    losses = {"value_loss": [], "policy_loss": []}
    for _ in range(settings.epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for start in range(0, len(order), settings.batch_size):
            idx = order[start : start + settings.batch_size]
            logits, v = net(x[idx])
            value_loss = ((z[idx] - v) ** 2).mean()
            policy_loss = -(pi[idx] * torch.log_softmax(logits, -1)).sum(-1).mean()
            optimizer.zero_grad()
            (value_loss + policy_loss).backward()
            optimizer.step()
            losses["value_loss"].append(value_loss.item())
            losses["policy_loss"].append(policy_loss.item())
    return {k: float(np.mean(v)) for k, v in losses.items()}


def perfect_move(board: str, rng: random.Random) -> int:
    moves = ttt.legal_moves(board)
    best = max(-ttt.minimax(ttt.play(board, m)) for m in moves)
    return rng.choice([m for m in moves if -ttt.minimax(ttt.play(board, m)) == best])


def match_vs_perfect(net: PolicyValueNet, games: int, simulations: int, rng: random.Random) -> dict[str, float]:
    """Net-guided search against minimax (random among its best moves), alternating who starts.
    Perfect play never loses, so the best result is all draws."""
    env = NetTicTacToe(net)
    config = SearchConfig(num_simulations=simulations, max_depth=9, temperature=0.0)
    results = []
    for g in range(games):
        board, net_side = ttt.EMPTY, "X" if g % 2 == 0 else "O"
        while ttt.legal_moves(board):
            if ttt.to_move(board) == net_side:
                board = ttt.play(board, search(env, [board], config, rng)[0].action)
            else:
                board = ttt.play(board, perfect_move(board, rng))
        results.append(0 if ttt.winner(board) is None else (1 if ttt.winner(board) == net_side else -1))
    return {"win": results.count(1) / games, "draw": results.count(0) / games, "loss": results.count(-1) / games}


def alphazero(settings: AlphaZeroSettings, seed: int = 0, progress=None) -> tuple[PolicyValueNet, list[dict]]:
    """The loop: self-play -> train -> match against perfect play, `iterations` times."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    net = PolicyValueNet()
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.learning_rate)
    history = [{"iteration": 0, **match_vs_perfect(net, settings.eval_games, settings.simulations, rng)}]
    replay: deque[list] = deque(maxlen=settings.replay_iterations)
    for it in range(1, settings.iterations + 1):
        data = self_play(net, settings, rng)
        replay.append(data)
        losses = train(net, [x for d in replay for x in d], settings, optimizer, rng)
        history.append({"iteration": it, "positions": len(data), **losses,
                        **match_vs_perfect(net, settings.eval_games, settings.simulations, rng)})
        if progress is not None:
            progress.update(1)
    return net, history
