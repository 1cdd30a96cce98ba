"""Countdown's test-time curves: the solve rate against the characters computed per problem (compute.py), best-of-k
against the search with each value, each method against best-of-k by exact McNemar per budget, Holm over all."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable, Literal, Sequence

import torch

from azlib.games.countdown.compute import Compute
from azlib.games.countdown.play import Episode, LineSearch, play_episodes, search_settings
from azlib.games.countdown.policy import Policy
from azlib.games.countdown.rules import State, problem_text
from azlib.games.countdown.settings import CountdownSearchSettings
from azlib.statistics import compare_outcomes, holm
from azlib.mcts.search import search

BUDGETS = (300, 600, 1200)  # characters per problem
BEST_OF_ROWS = 4096  # episodes played in lock-step at most
BY_LINE = " by-line"  # a method's name ends so when its search makes a child per line, not per position


@dataclass(frozen=True)
class CurveMethod:
    """One test-time method: best-of-k (children None), or the search over `children` lines by `rule` with `value`
    ("learned": the policy's head; "reference": the separate reference net; "oracle"; "none"), sampled lines
    widened as visits grow where `widen_after` (CountdownSearchSettings.widen_after; named "sampled-widened"), a
    child per position or per line (CountdownSearchSettings.children_by; the latter named "... by-line")."""

    children: Literal["sampled", "listed"] | None = None
    value: Literal["learned", "reference", "oracle", "none"] = "none"
    rule: Literal["puct", "gumbel"] = "puct"
    widen_after: int = 0
    children_by: Literal["position", "line"] = "position"

    def __post_init__(self):
        if self.widen_after and self.children != "sampled":
            raise ValueError(f"only sampled lines are widened, not {self.children or 'best-of-k'}'s")

    @property
    def name(self) -> str:
        if self.children is None:
            return "best_of"
        children = f"{self.children}-widened" if self.widen_after else self.children
        return f"mcts {children} {self.rule} {self.value}" + (BY_LINE if self.children_by == "line" else "")


def best_of_compute(policy: Policy, problems: Sequence[State], samples: int, seed: int) -> Compute:
    """`samples` independent episodes per problem, each charged in the order drawn up to the last character the
    model wrote (the rules' check of the end needs no model), an answer marked where one is solved."""
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    compute = Compute()
    per_call = max(1, BEST_OF_ROWS // samples)  # problems sampled at once: the key-value cache grows with the rows
    for start in range(0, len(problems), per_call):
        for group in play_episodes(policy, problems[start:start + per_call], samples, 1.0, generator):
            for episode in group:
                compute.charge(episode.text[:_last_written(episode) + 1])
                compute.generate(episode.text, episode.tokens)
                if episode.solved:
                    compute.answered(episode.text)
    return compute


def _last_written(episode: Episode) -> int:
    return max(i for i, wrote in enumerate(episode.written) if wrote)


def search_compute(policy: Policy, problems: Sequence[State], settings: CountdownSearchSettings, method: CurveMethod,
                   simulations: int, seed: int, reference: Policy | None = None) -> Compute:
    """One search from each problem (no move played: the tree is the solver), stopped at its first answer or after
    `simulations`, exhausted subtrees never re-entered (below Gumbel's root, which keeps its own count); every
    character the nets computed charged."""
    if method.value == "reference" and reference is None:
        raise ValueError("the reference value's search needs the reference net (reference=...)")
    settings = replace(settings, children=method.children, rule=method.rule, widen_after=method.widen_after,
                       children_by=method.children_by)
    compute = Compute()
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    env = LineSearch(policy, settings, "learned" if method.value == "reference" else method.value, generator,
                     reference if method.value == "reference" else None, compute)
    search(env, [Episode.start(p) for p in problems],
           search_settings(settings, simulations, 0.0, stop_at_win=True), random.Random(seed))
    return compute


def curves(policy: Policy, problems: Sequence[State], methods: Sequence[CurveMethod], settings: CountdownSearchSettings,
           *, samples: int, simulations: int, seed: int, budgets: Sequence[int] = BUDGETS,
           reference: Policy | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Per method: `solved` {budget: one bool per problem}, `first_answer` (characters per problem, None where none
    was found), `spent` (characters per problem in all), `generated` beside it (characters the policy sampled per
    problem in all) and `short` {budget: unsolved problems it stopped below the budget on}; and
    `tests`: each search against best-of-k at each budget (exact McNemar, Holm over every row)."""
    out: dict = {"budgets": list(budgets), "methods": {}}
    for method in methods:
        if method.children is None:
            compute = best_of_compute(policy, problems, samples, seed)
        else:
            compute = search_compute(policy, problems, settings, method, simulations, seed, reference)
        keys = [problem_text(p) for p in problems]
        out["methods"][method.name] = {
            "solved": {str(b): [compute.solved_within(k, b) for k in keys] for b in budgets},
            "first_answer": [compute.first_answer.get(k) for k in keys],
            "spent": [compute.spent[k] for k in keys],
            "generated": [compute.generated[k] for k in keys],
            # unsolved problems on which the method stopped below the budget (its samples or simulations used up,
            # or every line searched): at that budget it was not at equal compute
            "short": {str(b): sum(k not in compute.first_answer and compute.spent[k] < b for k in keys)
                      for b in budgets}}
        if progress:
            progress(method.name)
    out["tests"] = against_best_of(out)
    return out


def paired_tests(result: dict, pairs: Sequence[tuple[str, str]], row: Callable[..., dict]) -> list[dict]:
    """For each pair (a, b) of method names, per budget: row(a, b, budget, a's solved, b's solved, exact McNemar)
    with its p, then Holm's p over every row."""
    rows = []
    for a, b in pairs:
        for budget in map(str, result["budgets"]):
            solved_a, solved_b = result["methods"][a]["solved"][budget], result["methods"][b]["solved"][budget]
            rows.append(row(a, b, budget, solved_a, solved_b, compare_outcomes(solved_a, solved_b)))
    for r, adjusted in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = adjusted
    return rows


def against_best_of(result: dict) -> list[dict]:
    """Each search against best-of-k, per budget: the two rates, b - a, the problems only each solved, exact
    McNemar's p and Holm's over every row."""
    if "best_of" not in result["methods"]:
        return []
    methods = result["methods"]

    def row(_, name, budget, a, b, test):
        return {"method": name, "budget": int(budget), "best_of": sum(a) / len(a), "rate": sum(b) / len(b),
                "difference": (sum(b) - sum(a)) / len(a), "only_best_of": test.only_a, "only_method": test.only_b,
                "p": test.p_value, "short": methods[name]["short"][budget],
                "best_of_short": methods["best_of"]["short"][budget]}

    return paired_tests(result, [("best_of", name) for name in methods if name != "best_of"], row)


def by_position(result: dict) -> list[dict]:
    """Each search with a child per line against its twin with a child per position, per budget: the two rates,
    the problems only each solved, exact McNemar's p and Holm's over these rows."""
    twins = [(name, name.removesuffix(BY_LINE)) for name in result["methods"] if name.endswith(BY_LINE)]

    def row(by_line, twin, budget, a, b, test):
        return {"method": twin, "budget": int(budget), "by_line": sum(a) / len(a), "by_position": sum(b) / len(b),
                "only_by_line": test.only_a, "only_by_position": test.only_b, "p": test.p_value}

    return paired_tests(result, twins, row)


def rates(result: dict) -> dict[str, dict[int, float]]:
    """{method: {budget: solve rate}}."""
    return {name: {int(b): sum(s) / len(s) for b, s in method["solved"].items()}
            for name, method in result["methods"].items()}
