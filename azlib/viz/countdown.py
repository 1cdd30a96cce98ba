"""Notebook 08's pictures: learning curves against generated characters, test-time methods, the value as a verifier,
solve rate against compute, searches coloured by the exact oracle. Draws only: numbers from azlib.games.countdown."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from azlib.games.countdown.evaluate import rate
from azlib.mcts.tree import Node
from azlib.viz.curves import plot_seed_curves

METHOD_LABELS = {"greedy": "greedy", "best_of": "best-of-N", "best_of_at_mcts_tokens": "best-of-k at MCTS tokens",
                 "mcts": "MCTS, learned value", "mcts_oracle": "MCTS, oracle value"}


def solvable_kind(node: Node) -> str | None:
    """A Countdown node by the exact oracle: the line was refused, the target is still reachable, or it is not."""
    if node.parent < 0:
        return None
    if node.info.get("refused"):
        return "refused line"
    return "solvable" if node.info.get("solvable") else "dead"


def describe_countdown_node(node: Node) -> tuple[str, str]:
    """The line the model wrote as the label; the whole text so far and the node's search numbers on click."""
    if node.parent < 0:
        return "problem", "root: the problem\n\n" + node.state.text
    info = node.info
    lines = [f"line {info['line']!r}: {info['samples']} of the samples   prior {node.prior:.2f}",
             f"N {node.visits}   Q {node.q:.3f}   {solvable_kind(node)}"]
    if node.terminal:
        lines.append(f"terminal, value {info.get('terminal_value', 0.0):.0f}")
    return (info["line"] or "(empty)")[:12], "\n".join([*lines, "", node.state.text])


def _by_iteration(histories: dict, arm: str, seeds, key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [histories[arm, s] for s in seeds]
    x = np.array([r["tokens"] for r in rows[0]], dtype=float)
    return x, np.array([[r[key] for r in run] for run in rows], dtype=float).T


def plot_learning(result, key: str = "greedy_unseen", ylabel: str = "greedy solve rate, unseen targets"):
    """Each arm's curve (mean over seeds, +-1 std band) against the characters it generated (left) and against the
    optimiser steps it took (right, mean over seeds; dotted, the fewest steps any arm took: the arms at matched
    steps, azlib.games.countdown.experiment.matched_steps)."""
    fig, (by_characters, by_steps) = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    fewest = []
    for k, arm in enumerate(result.setup.arms):
        x, values = _by_iteration(result.histories, arm, result.setup.seeds, key)
        _, steps = _by_iteration(result.histories, arm, result.setup.seeds, "optimizer_steps")
        steps = steps.cumsum(0).mean(1)
        fewest.append(steps[-1])
        plot_seed_curves(by_characters, x / 1000, {arm: values}, title="at equal generated characters",
                         xlabel="generated characters (thousands, per arm and seed)", ylabel=ylabel, style=k)
        plot_seed_curves(by_steps, steps, {arm: values}, title="", xlabel="optimiser steps (per arm and seed)",
                         ylabel=ylabel, style=k)
    by_steps.axvline(min(fewest), color="grey", linestyle=":", linewidth=1)
    by_steps.set_title(f"at equal optimiser steps (dotted: {min(fewest):.0f}, the fewest any arm took)")
    by_characters.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_methods(result, split: str = "unseen"):
    """Solve rate of every test-time method for the start and each arm (mean over seeds, one dot per seed), with
    the generated characters per problem each method spent."""
    arms = ["start", *result.setup.arms]
    methods = [m for m in METHOD_LABELS if m in result.start[split]]
    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        rates = np.array([[rate(result.source(a, s)[split][method]) for s in result.setup.seeds] for a in arms])
        tokens = np.mean([[result.source(a, s)[split][method]["tokens"] for s in result.setup.seeds] for a in arms])
        x = np.arange(len(arms)) + (k - (len(methods) - 1) / 2) * width
        capped = method == "best_of_at_mcts_tokens" and any(
            result.source(a, s)[split][method]["capped"] for a in arms for s in result.setup.seeds)
        label = f"{METHOD_LABELS[method]} (~{tokens:.0f} chars/problem" + (
            ", capped at N: fewer than the search's)" if capped else ")")
        ax.bar(x, rates.mean(1), width, label=label)
        for j, seed_rates in enumerate(rates):
            ax.plot([x[j]] * len(seed_rates), seed_rates, "k.", markersize=3)
    ax.set_xticks(np.arange(len(arms)), arms)
    ax.set_ylabel(f"solve rate, {split} targets")
    ax.set_ylim(0, 1)
    ax.set_title(f"Test time: each trained policy, each method ({split} targets; dots: seeds)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_value_precision(result):
    """The value head as a verifier of partial states over training: its precision against the oracle (the 90% bar)
    and its ranking (AUC); and, per arm and seed, the search's gain over best-of-k at the same characters against
    the value gate's AUC after the first move (azlib.games.countdown.evaluate.value_gate)."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4))
    for key, ax, title, ylabel in (
            ("value_precision", left, "Precision of the value, against the oracle", "P(solvable | v > 0.5)"),
            ("value_auc", middle, "AUC of the value, against the oracle", "P(v(solvable) > v(dead))")):
        for k, arm in enumerate(result.setup.arms):
            x, values = _by_iteration(result.histories, arm, result.setup.seeds, key)
            # a precision is undefined where the value called no state solvable: said, not drawn as a blank line
            label = f"{arm}: no v above 0.5" if np.isnan(values).all() else arm
            plot_seed_curves(ax, x / 1000, {label: values}, title=title, xlabel="generated characters (thousands)",
                             ylabel=ylabel, style=k)
        ax.set_ylim(0, 1)
    left.axhline(0.9, color="k", linestyle="--", linewidth=1, label="the 90% bar (Chen et al. 2024)")
    middle.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="chance")
    for ax in (left, middle):
        ax.legend(fontsize=7)
    for arm in result.setup.arms:
        points = []
        for s in result.setup.seeds:
            unseen = result.results[arm, s]["unseen"]
            if "mcts" in unseen and "best_of_at_mcts_tokens" in unseen and "value_gate_auc_1" in unseen["value"]:
                points.append((unseen["value"]["value_gate_auc_1"],
                               rate(unseen["mcts"]) - rate(unseen["best_of_at_mcts_tokens"])))
        if points:
            right.plot(*zip(*points), "o", label=arm)
    right.axvline(0.9, color="k", linestyle="--", linewidth=1)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_xlabel("the value gate's AUC after one move, end of training")
    right.set_ylabel("MCTS minus best-of-k at the search's characters\n(fewer where best-of-k's samples ran out)",
                     fontsize=8)
    right.set_title("Does a better value make search pay? (unseen)")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_beside(runs: dict[str, dict], split: str = "unseen"):
    """Runs side by side (label -> azlib.games.countdown.experiment.summary(...), e.g. yours and the shipped cpu run): each
    arm's mean greedy solve rate, and its search's rate minus best-of-k's at the search's characters (a run's legend
    entry says where best-of-k's samples ran out first, so that the two are not at equal characters)."""
    fig, (greedy, search) = plt.subplots(1, 2, figsize=(11, 4.4))
    width = 0.8 / len(runs)
    for k, (label, run) in enumerate(runs.items()):
        arms = ["start", *run["setup"]["arms"]]
        x = np.arange(len(arms)) + (k - (len(runs) - 1) / 2) * width
        means = run["means"][split]
        if "mcts" in means and "best_of_at_mcts_tokens" in means:
            rates = [run["start"][split], *(by_seed[split] for seeds in run["arms"].values()
                                            for by_seed in seeds.values())]
            if any(r["best_of_at_mcts_tokens"]["tokens"] < 0.95 * r["mcts"]["tokens"] for r in rates):
                label += "\n(best-of-k capped below the search's characters)"
            search.bar(x, [means["mcts"][a] - means["best_of_at_mcts_tokens"][a] for a in arms], width)
        greedy.bar(x, [means["greedy"][a] for a in arms], width, label=label)
        for ax in (greedy, search):
            ax.set_xticks(np.arange(len(arms)), arms, fontsize=8, rotation=20)
    greedy.set_ylabel(f"greedy solve rate, {split} targets")
    greedy.set_ylim(0, 1)
    greedy.set_title("Each arm's policy alone (mean over seeds)", fontsize=10)
    search.axhline(0, color="grey", linewidth=0.8)
    search.set_ylabel("MCTS minus best-of-k (solve rate)")
    search.set_title("What the search adds at test time:\nMCTS minus best-of-k at the search's characters", fontsize=10)
    for ax in (greedy, search):
        ax.grid(axis="y", alpha=0.3)
    handles, labels = greedy.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(runs), fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


CURVE_COLOURS = {"none": "0.55", "learned": "tab:blue", "reference": "tab:green", "oracle": "tab:red"}
CURVE_VALUES = {"none": "no value", "learned": "self-play value", "reference": "reference value",
                "oracle": "the oracle"}
CURVE_CHILDREN = {"sampled": "sampled lines", "sampled-widened": "sampled lines widened", "listed": "listed lines"}
CURVE_STYLES = {("sampled", "puct"): "-", ("sampled-widened", "puct"): "-", ("listed", "puct"): "--",
                ("sampled", "gumbel"): ":", ("listed", "gumbel"): "-."}
CURVE_MARKERS = {"sampled-widened": "o"}  # widened sampled lines: solid, dotted with markers


def plot_curves(result: dict, title: str = "Test time at equal compute", methods: list[str] | None = None):
    """Solve rate against the characters a model computed per problem (azlib.games.countdown.curves): best-of-k (black)
    and each search (or those named in `methods`), its colour the value it read, its line style (and markers) how
    its children were made and chosen (sampled, widened or listed; PUCT or Gumbel; crosses: a child per line, not
    per position), the budgets marked; a line that
    stays along the axis has its final rate in its legend entry."""
    budgets = result["budgets"]
    grid = np.linspace(0, max(budgets), 121)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, method in result["methods"].items():
        if methods is not None and name not in methods:
            continue
        first = np.array([np.inf if f is None else f for f in method["first_answer"]])
        if name == "best_of":
            colour, style, marker, width, label = "k", "-", "", 2.5, "best-of-k"
        else:
            _, children, rule, value, *by_line = name.split()
            colour, style, width = CURVE_COLOURS[value], CURVE_STYLES[children, rule], 1.4
            marker = "x" if by_line else CURVE_MARKERS.get(children, "")
            label = f"MCTS, {CURVE_CHILDREN[children]}, {rule}, {CURVE_VALUES[value]}" + \
                (", a child per line" if by_line else "")
        rates = [(first <= g).mean() for g in grid]
        if rates[-1] < 0.05:  # a line along the axis: its legend entry says where it ends
            label += f" ({rates[-1]:.1%} at {grid[-1]:,.0f})"
        ax.plot(grid, rates, style, color=colour, lw=width, label=label, marker=marker, markersize=3.5, markevery=10)
    for b in budgets:
        ax.axvline(b, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("characters the model computed per problem (each once)")
    ax.set_ylabel("solve rate (first answer within the budget)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
