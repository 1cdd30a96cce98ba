"""Countdown at test time, every method's generated characters counted (greedy, best-of-N, pass@k at the search's
count, the search with the learned value or the oracle), and the learned value as a verifier of partial states."""

from __future__ import annotations

import math
import random
from typing import Sequence

import torch
from scipy import stats

from azlib.games.countdown.play import Episode, play_episodes, play_greedy, play_searched
from azlib.games.countdown.policy import Policy
from azlib.games.countdown.rules import State, legal_lines, legal_moves, problem_text, solvable, step
from azlib.games.countdown.settings import CountdownSearchSettings, EvalSettings
from azlib.statistics import pass_at_k

METHODS = ("greedy", "sample", "best_of", "mcts", "mcts_oracle")


def value_quality(episodes: Sequence[Episode], threshold: float = 0.5) -> dict[str, float]:
    """The value head as a verifier of partial states: every distinct unfinished state the episodes reached after
    their first move (a problem is solvable by construction, so its own state would be a free hit), valued as
    play_episodes read it when it played from the state, called solvable where v > threshold, against the exact
    oracle. precision = P(solvable | called solvable), recall = P(called solvable | solvable), base_rate =
    P(solvable); auc = P(v(solvable) > v(dead)) over pairs, ties half (the ranking, whatever the threshold: the value
    estimates this policy's chance, which can sit below 0.5 at every solvable state of a weak policy)."""
    seen: dict[str, tuple[float, bool]] = {}
    for episode in episodes:  # the problem itself left out: every problem is solvable, by construction
        if len(episode.values) < sum(not state.finished for state in episode.states):
            raise ValueError("value_quality reads the values play_episodes recorded: this episode has none for some "
                             "of its unfinished states")
        for end, state, value in zip(episode.state_ends[1:], episode.states[1:], episode.values[1:]):
            if not state.finished:
                seen.setdefault(episode.text[:end + 1], (value, solvable(state)))
    if not seen:
        return {"value_precision": float("nan"), "value_recall": float("nan"), "value_base_rate": float("nan"),
                "value_auc": float("nan"), "value_states": 0}
    values, truth = (list(column) for column in zip(*seen.values()))
    called = [v > threshold for v in values]
    hits = sum(c and t for c, t in zip(called, truth))
    return {"value_precision": hits / sum(called) if any(called) else float("nan"),
            "value_recall": hits / sum(truth) if any(truth) else float("nan"),
            "value_base_rate": sum(truth) / len(truth), "value_auc": ranking_quality(values, truth)["auc"],
            "value_states": len(seen)}


def ranking_quality(values: Sequence[float], truth: Sequence[bool]) -> dict[str, float]:
    """How well `values` rank the solvable states (truth) above the dead ones: auc = P(v(solvable) > v(dead)) over
    pairs, ties half; precision_at_half_recall = the share of solvable states among those valued at least the
    median solvable state's value (the threshold that calls half the solvable states solvable)."""
    live = sorted((v for v, t in zip(values, truth) if t), reverse=True)
    dead = [v for v, t in zip(values, truth) if not t]
    if not live or not dead:
        return {"auc": float("nan"), "precision_at_half_recall": float("nan")}
    threshold = live[(len(live) - 1) // 2]
    called_live = sum(v >= threshold for v in live)
    return {"auc": float(stats.mannwhitneyu(live, dead).statistic) / (len(live) * len(dead)),
            "precision_at_half_recall": called_live / (called_live + sum(v >= threshold for v in dead))}


def value_gate(policy: Policy, problems: Sequence[State], seed: int, walks: int = 4) -> dict[str, float]:
    """The value head as a judge of partial states, policy-independent: from each problem, `walks` games of
    uniformly random legal moves, and the distinct unfinished states they reach after 1 and after 2 moves,
    labelled by the exact oracle. Per depth d: value_gate_auc_d, value_gate_precision_d (at recall 0.5; see
    `ranking_quality`), value_gate_base_rate_d and value_gate_states_d."""
    rng = random.Random(f"value gate {seed}")
    reached: dict[int, dict[str, bool]] = {1: {}, 2: {}}
    for problem in problems:
        for _ in range(walks):
            episode = Episode.start(problem)
            for depth in (1, 2):
                moves = legal_moves(episode.state)
                if not moves:
                    break
                episode.play_move(rng.choice(moves))
                if not episode.state.finished:
                    reached[depth].setdefault(episode.text, solvable(episode.state))
    out = {}
    for depth, states in reached.items():
        texts, truth = list(states), list(states.values())
        quality = ranking_quality(policy.values(texts), truth) if texts else ranking_quality([], [])
        out |= {f"value_gate_auc_{depth}": quality["auc"],
                f"value_gate_precision_{depth}": quality["precision_at_half_recall"],
                f"value_gate_base_rate_{depth}": sum(truth) / len(truth) if truth else float("nan"),
                f"value_gate_states_{depth}": len(texts)}
    return out


def greedy_moves(policy: Policy, greedy: Sequence[Episode]) -> dict[str, float]:
    """Where the greedy policy loses a game, read off its `greedy` episodes (play_greedy, one per problem): per
    move d, kept_d = the share of its moves that leave a solvable state among those made from one (the last move
    must reach the target itself); beside it, at the problems, the share of the legal first moves that keep them
    solvable (what a uniform move keeps, mean over problems) and the policy's probability mass on them (each legal
    line scored under the legal mask, Policy.score_lines)."""
    problems = [e.problem for e in greedy]
    out: dict[str, float] = {"greedy": sum(e.solved for e in greedy) / len(greedy)}
    for d in range(1, max(len(p.numbers) for p in problems)):
        made = [(e.states[d - 1], e.states[d] if len(e.states) > d else None) for e in greedy
                if len(e.states) >= d and solvable(e.states[d - 1]) and not e.states[d - 1].finished]
        kept = sum(after is not None and (after.solved if after.finished else solvable(after)) for _, after in made)
        out[f"kept_{d}"] = kept / len(made) if made else float("nan")
    lines = [legal_lines(p) for p in problems]
    logps, _ = policy.score_lines([problem_text(p) for p in problems], lines)
    keeps = [[solvable(step(p, line[:-1])) for line in group] for p, group in zip(problems, lines)]
    out["uniform_keeps_1"] = sum(sum(k) / len(k) for k in keeps) / len(problems)
    out["policy_mass_keeps_1"] = sum(sum(math.exp(lp) for lp, k in zip(group, ks) if k)
                                     for group, ks in zip(logps, keeps)) / len(problems)
    return out


def evaluate(policy: Policy, problems: Sequence[State], settings: EvalSettings, search: CountdownSearchSettings,
             seed: int, methods: Sequence[str] = METHODS) -> dict:
    """Per method: `solved` (one bool per problem) and `tokens` (generated characters per problem); `greedy` also its
    `episodes` (its games, where greedy_moves reads where they are lost); `best_of` also at the search's token count
    (`best_of_at_mcts_tokens`, unbiased pass@k from the same samples; `capped` where the search spent more than
    `best_of` samples cost, so k stops short of it), and the value's quality on the sampled episodes' states."""
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown test-time methods {sorted(unknown)}: choose from {METHODS}")
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    out: dict = {}
    n = len(problems)
    if "greedy" in methods:
        greedy = play_greedy(policy, problems)
        out["greedy"] = {"solved": [e.solved for e in greedy], "tokens": sum(e.tokens for e in greedy) / n,
                         "episodes": greedy}
    sampled = None
    if {"sample", "best_of"} & set(methods):
        sampled = play_episodes(policy, problems, settings.best_of, 1.0, generator)
        per_problem = [sum(e.solved for e in g) for g in sampled]
        sample_tokens = sum(e.tokens for g in sampled for e in g) / (n * settings.best_of)
        out["sample"] = {"solved_share": [c / settings.best_of for c in per_problem], "tokens": sample_tokens}
        out["best_of"] = {"solved": [c > 0 for c in per_problem], "tokens": sample_tokens * settings.best_of,
                          "correct_counts": per_problem}
        out |= {"value": value_quality([e for g in sampled for e in g]) | value_gate(policy, problems, seed)}
    for method, value in (("mcts", "learned"), ("mcts_oracle", "oracle")):
        if method in methods:
            games, tokens, evaluations = play_searched(policy, problems, search, value, random.Random(seed),
                                                       simulations=settings.simulations, explore=False,
                                                       generator=generator)
            out[method] = {"solved": [g.found for g in games], "played": [g.solved for g in games],
                           "tokens": tokens / n, "value_evaluations": evaluations / n}
    if sampled is not None and "mcts" in out:
        wanted = max(1, round(out["mcts"]["tokens"] / max(out["sample"]["tokens"], 1e-9)))
        k = min(settings.best_of, wanted)
        out["best_of_at_mcts_tokens"] = {
            "k": k, "capped": k < wanted, "tokens": k * out["sample"]["tokens"],
            "solved_share": [pass_at_k(settings.best_of, c, k) for c in out["best_of"]["correct_counts"]]}
    return out


def rate(result: dict) -> float:
    """A method's solve rate: the share of problems solved (or the mean per-problem share)."""
    values = result.get("solved", result.get("solved_share"))
    return sum(values) / len(values)
