"""Notebook 08's comparison: one start by imitation, every arm from it over training seeds in worker processes, each
trained policy evaluated on held-out seen and unseen targets, the arms compared across seeds (azlib.statistics)."""

from __future__ import annotations

import dataclasses
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import field
from statistics import fmean
from typing import Annotated, Callable, Literal, Sequence

import torch
from annotated_types import MinLen
from pydantic.dataclasses import dataclass

from azlib.games.countdown.arms import ProblemStream, start_policy, train_arm
from azlib.games.countdown.evaluate import METHODS, evaluate, rate, value_quality
from azlib.games.countdown.play import play_episodes, play_greedy
from azlib.games.countdown.policy import Policy, PolicyValueNet
from azlib.games.countdown.problems import heldout
from azlib.games.countdown.rules import State
from azlib.games.countdown.settings import ARMS, ArmSettings, CountdownSearchSettings, EvalSettings, ImitationSettings
from azlib.statistics import compare_outcomes, comparison_table
from azlib.settings import GPTShape

SPLITS = ("seen", "unseen")
VALUE_GATE = 0.9  # AUC and precision at recall 0.5 a value must reach after the first move (Chen et al. 2024's bar)


@dataclass(frozen=True)
class CountdownSetup:
    """Everything one run of the comparison reads (notebook 08's parameters of the same names, through
    azlib.lab.from_params.countdown_setup)."""

    size: int = 4  # numbers per problem
    seed: int = 0  # the start's (imitation's) seed; every arm and training seed starts from that one policy
    seeds: Annotated[tuple[int, ...], MinLen(1)] = (0, 1, 2)  # training seeds of the arms
    arms: tuple[Literal[ARMS], ...] = ARMS
    policy: GPTShape = GPTShape()  # the character-level GPT with a value head (about 0.8M parameters)
    imitation: ImitationSettings = ImitationSettings()
    training: ArmSettings = ArmSettings()
    search: CountdownSearchSettings = CountdownSearchSettings()
    evaluation: EvalSettings = EvalSettings()
    methods: tuple[Literal[METHODS], ...] = METHODS  # test-time methods on the start and each trained policy
    curve_problems: int = 100  # unseen problems solved greedily after every iteration (the learning curves)
    workers: int = 2  # processes for the arms, one torch thread each; 0: in this process
    device: str = "cpu"
    legal_only: bool = True  # the engine offers only legal lines (False: the model may write anything, and lose)


def heldout_problems(setup: CountdownSetup, split: str) -> list[State]:
    return list(heldout(setup.size, split))[:setup.evaluation.problems]


def curve_point(policy: Policy, problems: Sequence[State]) -> dict:
    """What the learning curves show after an iteration: the greedy solve rate, and the value's quality on the states
    of two samples per problem (at most 50 problems)."""
    greedy = play_greedy(policy, problems)
    sampled = [e for g in play_episodes(policy, problems[:50], 2, 1.0,
                                                   torch.Generator(device=policy.device).manual_seed(0)) for e in g]
    return {"greedy_unseen": sum(e.solved for e in greedy) / len(problems)} | value_quality(sampled)


def evaluate_policy(policy: Policy, setup: CountdownSetup, seed: int, splits: Sequence[str] = SPLITS) -> dict:
    """Every test-time method on the held-out sets: {split: azlib.games.countdown.evaluate.evaluate(...)}, each
    split's randomness its own (so the splits may be tested apart)."""
    return {split: evaluate(policy, heldout_problems(setup, split), setup.evaluation, setup.search, seed,
                            setup.methods) for split in splits}


def train_start(setup: CountdownSetup, progress: Callable[[int], None] | None = None) -> tuple[Policy, list[dict]]:
    """The one start every arm and seed trains from: imitation of solver-written solutions."""
    return start_policy(setup.policy, setup.imitation, setup.size, setup.seed, progress, setup.device, setup.legal_only)


def _job(setup: CountdownSetup, arm: str, seed: int, start_state: dict, splits: Sequence[str] = SPLITS):
    """One worker's job, on one torch thread: the start's test on `splits` (arm "start"), or an arm trained from
    the start under a training seed and tested (its history, test results, generated characters and value
    evaluations)."""
    torch.set_num_threads(1)
    start = Policy(PolicyValueNet(setup.policy), setup.device, setup.legal_only)
    start.net.load_state_dict(start_state)
    if arm == "start":
        return evaluate_policy(start, setup, seed, splits)
    stream = ProblemStream(setup.size, seed)
    curve = heldout_problems(setup, "unseen")[:setup.curve_problems]
    run = train_arm(arm, start, setup.training, setup.search, stream, seed, evaluate=lambda p: curve_point(p, curve))
    return run.history, evaluate_policy(run.policy, setup, seed), run.tokens, run.value_evaluations


@dataclasses.dataclass
class CountdownResult:
    setup: CountdownSetup
    start_history: list[dict] = field(default_factory=list)  # the imitation's steps
    start: dict = field(default_factory=dict)  # the start's test-time results, by split
    histories: dict[tuple[str, int], list[dict]] = field(default_factory=dict)  # (arm, seed) -> a row per iteration
    results: dict[tuple[str, int], dict] = field(default_factory=dict)  # (arm, seed) -> test-time results by split
    tokens: dict[tuple[str, int], int] = field(default_factory=dict)  # (arm, seed) -> generated characters
    value_evaluations: dict[tuple[str, int], int] = field(default_factory=dict)  # states the value head judged

    def source(self, arm: str, seed: int) -> dict:
        return self.start if arm == "start" else self.results[arm, seed]

    def rate(self, arm: str, seed: int, split: str, method: str) -> float:
        return rate(self.source(arm, seed)[split][method])

    def per_seed(self, split: str, method: str) -> dict[str, list[float]]:
        return {a: [self.rate(a, s, split, method) for s in self.setup.seeds] for a in ["start", *self.setup.arms]}

    def comparisons(self, split: str = "unseen", method: str = "greedy") -> list[dict]:
        """b - a across seeds for each pair of a baseline arm (rft, grpo) and an AlphaZero arm (alphazero,
        alphazero_oracle) that ran (paired t, Holm over the pairs), with each seed's exact McNemar p."""
        arms = self.setup.arms
        pairs = [(a, b) for b in ("alphazero", "alphazero_oracle") for a in ("rft", "grpo") if a in arms and b in arms]
        mcnemar = {(a, b): [compare_outcomes(self.source(a, s)[split][method]["solved"],
                                             self.source(b, s)[split][method]["solved"]).p_value
                            for s in self.setup.seeds] for a, b in pairs}
        return comparison_table(self.per_seed(split, method), pairs, mcnemar)

    def value_gate(self, split: str = "unseen") -> dict[str, dict[str, float]]:
        """Per policy (the start; each arm, mean over its seeds): the value gate's AUC and precision at recall 0.5
        after 1 and 2 random legal moves (azlib.games.countdown.evaluate.value_gate), and whether it passes: AUC and
        precision at least VALUE_GATE after the first move."""
        rows = {}
        for who in ["start", *self.setup.arms]:
            found = [self.source(who, s)[split].get("value", {}) for s in self.setup.seeds]
            row = {f"{kind} after {d}": fmean(f.get(f"value_gate_{kind}_{d}", float("nan")) for f in found)
                   for d in (1, 2) for kind in ("auc", "precision")}
            rows[who] = row | {"passes": row["auc after 1"] >= VALUE_GATE and row["precision after 1"] >= VALUE_GATE}
        return rows


def run_arms(setup: CountdownSetup, start: Policy, start_history: list[dict],
             progress: Callable[[str], None] | None = None) -> CountdownResult:
    """Every (arm, seed) trained from the start and tested, and the start's test, as jobs in `setup.workers`
    processes. The start's test comes last, a job per held-out set: the shortest jobs, they fill the workers as
    the last arms end, where one job for both sets would run alone after them."""
    result = CountdownResult(setup, start_history=start_history)
    arms = [(arm, seed) for seed in setup.seeds for arm in setup.arms]
    state = {k: v.cpu() for k, v in start.net.state_dict().items()}
    run = _in_process if setup.workers == 0 else _in_pool(setup.workers)
    outs = run(_job, [(setup, a, s, state) for a, s in arms] + [(setup, "start", setup.seed, state, (split,))
                                                               for split in SPLITS],
               progress, arms + [("start", split) for split in SPLITS])
    for tested in outs[len(arms):]:
        result.start |= tested
    for (arm, seed), out in zip(arms, outs):
        history, results, tokens, evaluations = out
        result.histories[arm, seed], result.results[arm, seed] = history, results
        result.tokens[arm, seed], result.value_evaluations[arm, seed] = tokens, evaluations
    return result


def matched_steps(histories: dict[str, Sequence[list[dict]]], key: str = "greedy_unseen") -> dict:
    """The arms at matched optimiser steps: `histories` maps each arm to its seeds' rows per iteration (seed k of
    every arm the same training seed). Per seed, the budget is the fewest steps any arm took in all; each arm is read
    at its last iteration within that budget (the arm that took the fewest, at its end). Returns the budget per seed,
    the steps each arm had taken there and its `key` (by default the greedy solve rate on the curve problems)."""
    totals = {arm: [sum(row["optimizer_steps"] for row in rows) for rows in runs] for arm, runs in histories.items()}
    budget = [min(by_seed) for by_seed in zip(*totals.values())]
    steps, values = {}, {}
    for arm, runs in histories.items():
        steps[arm], values[arm] = [], []
        for rows, most in zip(runs, budget):
            taken, at = 0, None
            for row in rows:
                if taken + row["optimizer_steps"] > most:
                    break
                taken, at = taken + row["optimizer_steps"], row[key]
            if at is None:
                raise ValueError(f"{arm}'s first iteration took more than {most} optimiser steps: no row to match")
            steps[arm].append(taken)
            values[arm].append(at)
    return {"budget": budget, "steps": steps, key: values}


def _in_process(job, args_list, progress, names):
    out = []
    for args, name in zip(args_list, names):
        out.append(job(*args))
        if progress:
            progress(" ".join(map(str, name)))
    return out


def _in_pool(workers: int):
    def run(job, args_list, progress, names):
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(job, *args) for args in args_list]
            for future, name in zip(futures, names):
                future.result()
                if progress:
                    progress(" ".join(map(str, name)))
            return [f.result() for f in futures]
    return run


def _rates(results: dict) -> dict:
    """{split: {method: {"rate", "tokens"}}} and the value's quality, from a policy's test-time results."""
    out = {split: {m: {"rate": rate(r), "tokens": r["tokens"]} for m, r in by_method.items() if m != "value"}
           for split, by_method in results.items()}
    return out | {"value": {split: by_method["value"] for split, by_method in results.items()
                            if "value" in by_method}}


def summary(result: CountdownResult) -> dict:
    """The run's numbers as plain JSON: the setup, the start's and every (arm, seed)'s rates and characters, the
    means over seeds, the comparisons (paired t with Holm) for greedy and the search, and the learning curves."""
    setup = result.setup
    methods = [m for m in result.start["unseen"] if m != "value"]
    arms = {arm: {str(s): _rates(result.results[arm, s]) | {"training_characters": result.tokens[arm, s],
                                                           "value_evaluations": result.value_evaluations[arm, s]}
                  for s in setup.seeds} for arm in setup.arms}
    means = {split: {m: {a: sum(result.per_seed(split, m)[a]) / len(setup.seeds) for a in ["start", *setup.arms]}
                     for m in methods} for split in SPLITS}
    comparisons = {f"{split} {m}": result.comparisons(split, m) for split in SPLITS for m in ("greedy", "mcts")
                   if m in methods}
    return {"setup": dataclasses.asdict(setup), "start": _rates(result.start), "arms": arms, "means": means,
            "comparisons": comparisons, "value_gate": {split: result.value_gate(split) for split in SPLITS},
            "start_history": result.start_history[::max(1, len(result.start_history) // 100)],
            "histories": {arm: {str(s): result.histories[arm, s] for s in setup.seeds} for arm in setup.arms}}
