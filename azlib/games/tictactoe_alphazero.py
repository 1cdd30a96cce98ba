"""AlphaZero on tic-tac-toe: a small policy-value net through the kit's one AlphaZero loop (azlib.mcts.selfplay,
learn, rounds), an arena against the best net, and an exact grade against minimax. Not the game (tictactoe.py)."""

from __future__ import annotations

import copy
import random
from typing import Sequence

import numpy as np
import torch
from torch import nn

from azlib.games import tictactoe as ttt
from azlib.mcts import selfplay
from azlib.mcts.learn import update
from azlib.mcts.rounds import run_rounds
from azlib.mcts.search import Child, Expansion, SearchResult, search
from azlib.settings import AlphaZeroSettings, SearchSettings


class PolicyValueNet(nn.Module):
    """Board (from the mover's view: mine, theirs, empty) -> move logits and a value in [-1, 1]."""

    def __init__(self, hidden: int = 128):
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


def _symmetries() -> list[tuple[int, ...]]:
    """The 8 rotations and reflections of the board, as `new[i] = old[perm[i]]`."""
    quarter_turn, mirror = (6, 3, 0, 7, 4, 1, 8, 5, 2), (2, 1, 0, 5, 4, 3, 8, 7, 6)
    rotations = [tuple(range(9))]
    for _ in range(3):
        rotations.append(tuple(rotations[-1][k] for k in quarter_turn))
    return rotations + [tuple(r[k] for k in mirror) for r in rotations]


SYMMETRIES = _symmetries()


def augment(data: list[tuple[str, list[float], float]]) -> list[tuple[str, list[float], float]]:
    """Every position in its 8 symmetric forms, with the visit shares moved along (AlphaGo Zero, Methods)."""
    return [("".join(board[k] for k in perm), [pi[k] for k in perm], z) for board, pi, z in data for perm in SYMMETRIES]


class NetTicTacToe(ttt.TicTacToe):
    """Leaves valued by the net, priors from its policy over legal moves: one forward per search step
    for the positions not seen before (the net does not change while this env lives, so answers keep)."""

    def __init__(self, net: PolicyValueNet):
        super().__init__()
        self.net = net
        self.cache: dict[str, Expansion] = {}

    @torch.no_grad()
    def expand(self, boards, rng):
        new = list(dict.fromkeys(b for b in boards if b not in self.cache))
        if new:
            logits, values = self.net(encode(new))
            for board, lg, v in zip(new, logits, values):
                moves = ttt.legal_moves(board)
                priors = torch.softmax(lg[moves], -1).tolist()
                self.cache[board] = Expansion([Child(m, ttt.play(board, m), p) for m, p in zip(moves, priors)], float(v))
        return [self.cache[b] for b in boards]


def _search_settings(settings: AlphaZeroSettings, temperature: float, noise: bool) -> SearchSettings:
    return SearchSettings(num_simulations=settings.simulations, max_depth=9, c=settings.c, temperature=temperature,
                          dirichlet_alpha=settings.dirichlet_alpha,
                          dirichlet_fraction=settings.dirichlet_fraction if noise else 0.0)


def random_opening(settings: AlphaZeroSettings, rng: random.Random) -> str:
    """A board after k uniformly random moves, k drawn from 0..settings.random_opening; an opening that
    ends the game is drawn again (with the same k)."""
    k = rng.randint(0, settings.random_opening) if settings.random_opening else 0  # 0: the rng untouched
    while True:
        board = ttt.EMPTY
        for _ in range(k):
            if not ttt.legal_moves(board):  # won within the opening: draw it again
                break
            board = ttt.play(board, rng.choice(ttt.legal_moves(board)))
        if ttt.legal_moves(board):
            return board


def play_games(players: list[tuple[NetTicTacToe, NetTicTacToe]], settings: AlphaZeroSettings, rng: random.Random,
               noise: bool, starts: Sequence[str] | None = None) -> list[tuple[list[tuple[str, list[float]]], str]]:
    """Game g played by players[g] (X's env, O's env) from starts[g] (default: the empty board), all games
    in lock-step (azlib.mcts.selfplay.play). Returns each game's (board, the search's target over the 9
    squares) per move and its final board."""

    by_exploring = {exploring: _search_settings(settings, 1.0 if exploring else 0.0, noise)
                    for exploring in (True, False)}

    def searcher(g: int, board: str, _: int) -> tuple[NetTicTacToe, SearchSettings]:
        made = 9 - board.count(".")  # games of different openings are at different moves
        return players[g][made % 2], by_exploring[made < settings.exploratory_moves]

    games = selfplay.play(list(starts) if starts is not None else [ttt.EMPTY] * len(players), searcher, rng)
    return [([(board, _squares(result)) for board, result in game.moves], game.end) for game in games]


def _squares(result: SearchResult) -> list[float]:
    """The search's target (visit shares, whatever temperature chose the move) over the 9 squares."""
    pi = [0.0] * 9
    for action, w in zip(result.actions, result.action_weights):
        pi[action] = w
    return pi


def self_play(net: PolicyValueNet, settings: AlphaZeroSettings, rng: random.Random) -> list[tuple[str, list[float], float]]:
    """(board, visit distribution pi, outcome z for the player to move) for every position searched:
    each game from its random opening (the opening's own positions not)."""
    env = NetTicTacToe(net)
    data = []
    starts = [random_opening(settings, rng) for _ in range(settings.games_per_iteration)]
    for moves, end in play_games([(env, env)] * settings.games_per_iteration, settings, rng, noise=True, starts=starts):
        final = ttt.outcome(end)  # for the player to move at the end: -1 if the last mover won
        for board, pi in moves:
            moves_to_end = board.count(".") - end.count(".")  # even: the same player is to move at the end
            data.append((board, pi, final if moves_to_end % 2 == 0 else -final))
    return data


def arena(new: PolicyValueNet, best: PolicyValueNet, settings: AlphaZeroSettings, rng: random.Random) -> dict[str, int]:
    """`arena_games` games, each net X in half of them, openings sampled as in self-play, no noise."""
    a, b = NetTicTacToe(new), NetTicTacToe(best)
    players = [(a, b) if g % 2 == 0 else (b, a) for g in range(settings.arena_games)]
    results = {"new_wins": 0, "best_wins": 0}
    for (x_env, _), (_, end) in zip(players, play_games(players, settings, rng, noise=False)):
        if ttt.winner(end):
            results["new_wins" if (ttt.winner(end) == "X") == (x_env is a) else "best_wins"] += 1
    return results


def train(net: PolicyValueNet, data, settings: AlphaZeroSettings, optimizer, rng: random.Random) -> dict[str, float]:
    """loss = (z - v)^2 - pi . log p, averaged over the batch (AlphaZero; its L2 term is the optimizer's), over
    `epochs` passes in shuffled minibatches (azlib.mcts.learn.update)."""
    boards, pis, zs = zip(*data)
    x, pi, z = encode(boards), torch.tensor(pis), torch.tensor(zs)

    def loss(idx: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        logits, v = net(x[idx])
        value_loss = ((z[idx] - v) ** 2).mean()
        policy_loss = -(pi[idx] * torch.log_softmax(logits, -1)).sum(-1).mean()
        return value_loss + policy_loss, {"value_loss": value_loss.item(), "policy_loss": policy_loss.item()}

    losses, _ = update(loss, optimizer, range(len(data)), settings.batch_size, settings.epochs, rng)
    return losses


POSITIONS = [b for b in ttt.reachable_positions() if ttt.legal_moves(b)]  # 4,520, either side to move


def greedy_settings(simulations: int, c: float = AlphaZeroSettings.c) -> SearchSettings:
    """The search that is graded and that plays people: the most visited move, no noise (deterministic)."""
    return SearchSettings(num_simulations=simulations, max_depth=9, c=c, temperature=0.0)


def search_moves(net: PolicyValueNet, simulations: int, c: float = AlphaZeroSettings.c) -> dict[str, int]:
    """The net-guided search's move in every position (argmax of visits, no noise: deterministic)."""
    results = search(NetTicTacToe(net), POSITIONS, greedy_settings(simulations, c), random.Random(0))
    return {r.tree.root.state: r.action for r in results}


class NetPlayer:
    """The net as an opponent, board -> move: its search's move, as the grade plays it; `last` keeps the
    search of its latest move (the root's visit shares say what it weighed)."""

    def __init__(self, net: PolicyValueNet, simulations: int = AlphaZeroSettings.simulations,
                 c: float = AlphaZeroSettings.c):
        self.env, self.settings = NetTicTacToe(net), greedy_settings(simulations, c)
        self.last: SearchResult | None = None

    def __call__(self, board: str) -> int:
        (self.last,) = search(self.env, [board], self.settings, random.Random(0))
        return self.last.action

    def visit_shares(self) -> dict[int, float]:
        """Square -> share of the root's visits in the latest search, its target ({} before the first move)."""
        return {} if self.last is None else dict(zip(self.last.actions, self.last.action_weights))


@torch.no_grad()
def policy_moves(net: PolicyValueNet) -> dict[str, int]:
    """The raw policy's move in every position: its most likely legal move, no search."""
    logits = net(encode(POSITIONS))[0]
    return {b: max(ttt.legal_moves(b), key=lambda m: logits[i, m].item()) for i, b in enumerate(POSITIONS)}


def optimal_moves(board: str) -> list[int]:
    """Minimax's moves: those that keep the value for the mover."""
    return [m for m in ttt.legal_moves(board) if -ttt.minimax(ttt.play(board, m)) == ttt.minimax(board)]


def _vs_perfect(board: str, side: str, moves: dict[str, int], memo: dict) -> np.ndarray:
    """(win, draw, loss) probabilities for `side` playing `moves` against minimax that picks uniformly
    among its best moves: every line perfect play can choose, weighted as it would choose it."""
    if board not in memo:
        if not ttt.legal_moves(board):
            w = ttt.winner(board)
            memo[board] = np.array([w == side, w is None, w not in (None, side)], dtype=float)
        elif ttt.to_move(board) == side:
            memo[board] = _vs_perfect(ttt.play(board, moves[board]), side, moves, memo)
        else:
            best = optimal_moves(board)
            memo[board] = sum(_vs_perfect(ttt.play(board, m), side, moves, memo) for m in best) / len(best)
    return memo[board]


def grade(moves: dict[str, int]) -> dict[str, float]:
    """Exact, not sampled: a move per position against minimax. A losing move turns a drawn or won
    position into a lost one; the games are every game against perfect play, as X and as O."""
    optimal = sum(moves[b] in optimal_moves(b) for b in POSITIONS)
    losing = sum(ttt.minimax(b) >= 0 and -ttt.minimax(ttt.play(b, moves[b])) < 0 for b in POSITIONS)
    as_x, as_o = _vs_perfect(ttt.EMPTY, "X", moves, {}), _vs_perfect(ttt.EMPTY, "O", moves, {})
    return {"optimal_share": optimal / len(POSITIONS), "losing_moves": int(losing),
            "draw_as_x": float(as_x[1]), "loss_as_x": float(as_x[2]),
            "draw_as_o": float(as_o[1]), "loss_as_o": float(as_o[2])}


def evaluate(net: PolicyValueNet, settings: AlphaZeroSettings) -> dict[str, float]:
    """The grade of the net-guided search, and with prefix raw_ of the policy net alone."""
    searched = grade(search_moves(net, settings.simulations, settings.c))
    return searched | {f"raw_{k}": v for k, v in grade(policy_moves(net)).items()}


def alphazero(settings: AlphaZeroSettings, seed: int = 0, progress=None,
              grade_every: int = 1) -> tuple[PolicyValueNet, list[dict]]:
    """The loop (azlib.mcts.rounds): self-play by the best net -> train on the latest `replay_iterations` rounds ->
    arena, `iterations` times. The best net's exact grade (4,520 searches: a measurement, not part of the loop's
    seconds) is in the history at round 0, every `grade_every`-th round and the last; a grade is computed once per
    best net (a kept net keeps its grade)."""
    if grade_every < 1:
        raise ValueError(f"grade_every must be at least 1, got {grade_every}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    net = PolicyValueNet()
    best = copy.deepcopy(net)
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    best_grade = evaluate(best, settings)  # None once the best net has changed and not been graded since

    def play() -> tuple[list, dict]:
        data = self_play(best, settings, rng)
        return augment(data) if settings.symmetries else data, {"positions": len(data)}

    def learn(window: list) -> dict:
        nonlocal best, best_grade
        losses = train(net, window, settings, optimizer, rng)
        games = arena(net, best, settings, rng) if settings.arena_games else {"new_wins": 0, "best_wins": 0}
        accepted = games["new_wins"] >= games["best_wins"]
        if accepted:
            best, best_grade = copy.deepcopy(net), None
        return losses | games | {"accepted": accepted}

    def measure(iteration: int) -> dict:
        nonlocal best_grade
        if iteration % grade_every and iteration != settings.iterations:
            return {}
        if best_grade is None:
            best_grade = evaluate(best, settings)
        return best_grade

    history = [{"iteration": 0, **best_grade}]
    history += run_rounds(settings.iterations, play, learn, settings.replay_iterations, measure, progress)
    return best, history
