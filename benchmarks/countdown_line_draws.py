"""How a search node gets its K candidate lines on Countdown, weighed on a trained start: sampled with replacement
(the sampled rule: K independent samples under the legal mask), drawn without replacement (Gumbel-top-k over the
legal lines, as Gumbel MuZero draws actions, by stochastic beam search over the lines' characters: Kool et al.
2019), or all listed and scored (the listed rule). Per node, at the problem and after one uniformly random legal
move: the distinct lines and distinct positions each gives, and the characters the policy computes for them (each
once, lines sharing a prefix as a trie, the node's own text left out), over the first unseen-target problems.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/countdown_line_draws.py --start outputs/bench-countdown-curves/start.pt
"""

from __future__ import annotations

import argparse
import json
import math
import random
from statistics import mean

import torch

from azlib.games.countdown.compute import trie_characters
from azlib.games.countdown.play import Episode
from azlib.games.countdown.policy import Policy, PolicyValueNet
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.rules import MOVE_END, legal_lines, legal_moves, step


def position(state, line: str):
    return step(state, line.removesuffix(MOVE_END)).position


def gumbel(rng: random.Random) -> float:
    """A standard Gumbel draw, -log(-log u) for u uniform in (0, 1) (random() may return 0)."""
    u = rng.random()
    while u == 0.0:
        u = rng.random()
    return -math.log(-math.log(u))


def stochastic_beam_search(lines: list[str], logprobs: list[float], k: int, rng: random.Random
                           ) -> tuple[list[str], int]:
    """K lines drawn without replacement from the lines' distribution (their Gumbel-top-k), one character at a time
    (Kool et al. 2019, Algorithm 1: each prefix's perturbed log-probability, its children's conditioned on their
    maximum being it), and the characters computed: every prefix that entered the beam, once. A prefix's
    log-probability is its lines' summed, the mask's renormalised character distribution the model samples by."""
    def marginal(prefix: str) -> float:
        return torch.logsumexp(torch.tensor([lp for line, lp in zip(lines, logprobs) if line.startswith(prefix)]),
                               0).item()

    beam, computed = [("", 0.0)], set()
    while any(not prefix.endswith(MOVE_END) for prefix, _ in beam):
        candidates = []
        for prefix, g in beam:
            if prefix.endswith(MOVE_END):
                candidates.append((prefix, g))
                continue
            children = sorted({line[len(prefix)] for line in lines if line.startswith(prefix)})
            phi = [marginal(prefix + c) for c in children]
            perturbed = [p + gumbel(rng) for p in phi]
            top = max(perturbed)
            for c, g_tilde in zip(children, perturbed):  # G_c = -log(exp(-G) - exp(-Z) + exp(-G~_c)), stably
                v = g - g_tilde + math.log1p(-math.exp(g_tilde - top)) if g_tilde < top else float("-inf")
                g_child = g - max(v, 0.0) - math.log1p(math.exp(-abs(v)))
                candidates.append((prefix + c, g_child))
        beam = sorted(candidates, key=lambda x: -x[1])[:k]
        computed |= {prefix for prefix, _ in beam}
    return [prefix for prefix, _ in beam], len(computed)


def weigh(policy: Policy, episodes: list[Episode], k: int, seed: int) -> dict:
    """Per node: legal lines and positions; with replacement, without, and listed: distinct lines and positions and
    the characters computed (and generated, sampling)."""
    generator, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    texts, states = [e.text for e in episodes], [e.state for e in episodes]
    listed = [legal_lines(s) for s in states]
    sampled, _ = policy.lines(texts, k, 1.0, generator, listed)
    scores, _ = policy.score_lines(texts, listed)
    rows = []
    for state, lines, drawn, lps in zip(states, listed, sampled, scores):
        ended = [line.text + MOVE_END for line in drawn if line.ended]
        without, computed = stochastic_beam_search(lines, lps, k, rng)
        rows.append({"legal_lines": len(lines), "legal_positions": len({position(state, l) for l in lines}),
                     "with_lines": len(set(ended)), "with_positions": len({position(state, l) for l in ended}),
                     "with_generated": sum(line.tokens for line in drawn), "with_computed": trie_characters(ended),
                     "without_lines": len(without), "without_positions": len({position(state, l) for l in without}),
                     "without_computed": computed, "listed_computed": trie_characters(lines)})
    return {key: mean(r[key] for r in rows) for key in rows[0]} | {"nodes": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True, help="a policy's state dict (the curves benchmark's start.pt)")
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = Policy(PolicyValueNet())
    policy.net.load_state_dict(torch.load(args.start, weights_only=True))
    problems = list(heldout(4, "unseen"))[:args.problems]
    roots = [Episode.start(p) for p in problems]
    rng = random.Random(f"one move {args.seed}")
    after = []
    for root in roots:
        episode = root.copy()
        episode.play_move(rng.choice(legal_moves(episode.state)))
        after.append(episode)
    out = {"setting": vars(args), "problem": weigh(policy, roots, args.k, args.seed),
           "after_one_move": weigh(policy, after, args.k, args.seed)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
