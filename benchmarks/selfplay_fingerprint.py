"""A fingerprint of both AlphaZero loops (self-play and the update), to check that a change to the loop, the search,
the update or the games leaves what they play and learn unchanged: tic-tac-toe's self-play, arena and one training pass
(azlib.games.tictactoe_alphazero), and Countdown's searched games (azlib.games.countdown.play.play_searched, sampled
lines widened with the learned value, listed lines with the oracle) and an alphazero, an rft and a grpo update on
what they played (azlib.games.countdown.arms.Learner), from fixed seeds and untrained nets, one torch thread; then
two rounds of each game's whole loop (tic-tac-toe's `alphazero`, each Countdown arm's `train_arm`), their histories
less their seconds. The updates are recorded by their weights' sums (and Countdown's by its logged losses). Prints
the SHA-256 of the JSON (run it before and after the change); --out writes the JSON, to find where two runs part.

    .venv/bin/python benchmarks/selfplay_fingerprint.py [--out loops.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import torch

from azlib.games.countdown.arms import Learner, ProblemStream, train_arm
from azlib.games.countdown.play import play_episodes, play_searched
from azlib.games.countdown.policy import Policy, PolicyValueNet as CountdownNet
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.settings import ARMS, ArmSettings, CountdownSearchSettings
from azlib.games.tictactoe_alphazero import PolicyValueNet, alphazero, arena, augment, self_play, train
from azlib.settings import AlphaZeroSettings, GPTShape


def weights(net: torch.nn.Module) -> list[float]:
    return [float(p.detach().double().sum()) for p in net.parameters()]


def untimed(history: list[dict]) -> list[dict]:
    """A loop's rows without their seconds (the one field that differs from run to run)."""
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


def loops() -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net, best = PolicyValueNet(), PolicyValueNet()
    settings = AlphaZeroSettings(games_per_iteration=12, simulations=16, arena_games=6)
    data = self_play(net, settings, random.Random(1))
    out = {"ttt_self_play": data, "ttt_arena": arena(net, best, settings, random.Random(2))}
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    train(net, augment(data), settings, optimizer, random.Random(5))
    out["ttt_trained"] = weights(net)
    torch.manual_seed(0)
    policy = Policy(CountdownNet(GPTShape(n_layer=2, n_head=2, n_embd=32)), "cpu", True)
    problems = list(heldout(4, "unseen"))[:6]
    for name, search, value in [("sampled", CountdownSearchSettings(simulations=8, widen_after=4), "learned"),
                                ("listed", CountdownSearchSettings(children="listed", simulations=8), "oracle")]:
        played = play_searched(policy, problems, search, value, random.Random(3), explore=True,
                               generator=torch.Generator().manual_seed(4), keep_trees=True)
        out[name] = [[list(m) for m in g.moves] + [g.found, g.solved, g.end.text, len(g.trees)] for g in played.games]
        out[name] += [played.tokens, played.value_evaluations]
    learner, rng = Learner(policy, ArmSettings(batch_size=8)), random.Random(6)
    moves = [m for g in played.games for m in g.moves]
    out["countdown_alphazero"] = learner.alphazero(moves, [float(g.solved) for g in played.games for _ in g.moves], rng)
    groups = play_episodes(policy, problems, 4, 1.0, torch.Generator().manual_seed(7))
    out["countdown_rft"] = learner.rft([e for g in groups for e in g], rng)
    out["countdown_grpo"] = learner.grpo(groups, rng)
    out["countdown_trained"] = weights(policy.net)
    best, history = alphazero(AlphaZeroSettings(iterations=2, games_per_iteration=4, simulations=8, arena_games=2,
                                                batch_size=32, replay_iterations=2), seed=8, grade_every=2)
    out["ttt_loop"] = untimed(history) + [weights(best)]
    for arm in ARMS:
        run = train_arm(arm, policy, ArmSettings(iterations=2, tokens_per_iteration=400, problems_per_batch=8,
                                                 group_size=2, batch_size=8), CountdownSearchSettings(simulations=4),
                        ProblemStream(4, 9), 9, evaluate=lambda p: {"weights": weights(p.net)[:2]})
        out[f"countdown_loop_{arm}"] = untimed(run.history) + [run.tokens, run.value_evaluations, weights(run.policy.net)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = json.dumps(loops(), default=str, sort_keys=True)
    if args.out:
        args.out.write_text(text)
    print(hashlib.sha256(text.encode()).hexdigest(), f"({len(text):,} characters of JSON)")


if __name__ == "__main__":
    main()
