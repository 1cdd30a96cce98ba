"""A fingerprint of both AlphaZero self-play loops' games, to check that a change to the loop, the search or the games
leaves what they play unchanged: tic-tac-toe's self-play and arena (azlib.games.tictactoe_alphazero) and Countdown's
searched games (azlib.games.countdown.play.play_searched, sampled lines widened with the learned value, listed lines
with the oracle), from fixed seeds and untrained nets, one torch thread. Prints the SHA-256 of their JSON (run it
before and after the change); --out writes the JSON, to find where two runs part.

    .venv/bin/python benchmarks/selfplay_fingerprint.py [--out games.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import torch

from azlib.games.countdown.play import play_searched
from azlib.games.countdown.policy import Policy, PolicyValueNet as CountdownNet
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.settings import CountdownSearchSettings
from azlib.games.tictactoe_alphazero import AlphaZeroSettings, PolicyValueNet, arena, self_play
from azlib.settings import GPTShape


def games() -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net, best = PolicyValueNet(), PolicyValueNet()
    settings = AlphaZeroSettings(games_per_iteration=12, simulations=16, arena_games=6)
    out = {"ttt_self_play": self_play(net, settings, random.Random(1)),
           "ttt_arena": arena(net, best, settings, random.Random(2))}
    torch.manual_seed(0)
    policy = Policy(CountdownNet(GPTShape(n_layer=2, n_head=2, n_embd=32)), "cpu", True)
    problems = list(heldout(4, "unseen"))[:6]
    for name, search, value in [("sampled", CountdownSearchSettings(simulations=8, widen_after=4), "learned"),
                                ("listed", CountdownSearchSettings(children="listed", simulations=8), "oracle")]:
        played = play_searched(policy, problems, search, value, random.Random(3), explore=True,
                               generator=torch.Generator().manual_seed(4), keep_trees=True)
        out[name] = [[list(m) for m in g.moves] + [g.found, g.solved, g.end.text, len(g.trees)] for g in played.games]
        out[name] += [played.tokens, played.value_evaluations]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    text = json.dumps(games(), default=str, sort_keys=True)
    if args.out:
        args.out.write_text(text)
    print(hashlib.sha256(text.encode()).hexdigest(), f"({len(text):,} characters of JSON)")


if __name__ == "__main__":
    main()
