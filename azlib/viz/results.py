"""Notebook 05's experiment in one figure: accuracy per model on each evaluation set, and the comparisons with their
intervals and Holm's p, as azlib.lab.tree_vs_sampling and azlib.statistics computed them (none computed here)."""

from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from azlib.statistics import wilson_interval

SET_TITLES = {"heldout": "held-out (training wordings)", "transfer": "transfer (wordings never trained on)",
              "gsm8k": "GSM8K (easiest test problems)"}
SIGNIFICANT = "C3"  # colour of a difference significant after Holm's correction


def plot_experiment(experiment, label: str) -> plt.Figure:
    """One figure of an experiment (azlib.lab.tree_vs_sampling.Experiment: a finished run's, or a shipped one read by
    azlib.lab.shipped_results), titled `label`.

    Top row, per evaluation set: each model's accuracy, the base first and then the arms, in percent: the mean over
    training seeds (bar), each seed (dot), and the 95% Wilson interval of the answers pooled over the seeds (the
    evaluation set's noise; the seeds' spread is the dots). The axis ends a little above the highest interval, not
    at 100%.
    Bottom row, per set: `experiment.comparisons()` (the experiment's own family, notebook 05's and the
    benchmark's), b - a in points with its 95% t-interval over seeds and Holm's p over the whole
    family; a difference significant after Holm is drawn in red and its label ends in " *". An interval that one
    seed cannot give is left out."""
    arms = [arm for arm in experiment.params.arms if any(a == arm for a, _ in experiment.runs)]
    models = ["base", *arms] if experiment.base else arms
    rows = experiment.accuracies()
    comparisons = experiment.comparisons()
    sets = list(experiment.eval_sets)
    per_set = max(1, len(comparisons) // max(len(sets), 1))
    fig, axes = plt.subplots(2, len(sets), figsize=(6.8 * len(sets), 3.2 + 0.3 * (len(models) + per_set)),
                             squeeze=False, gridspec_kw={"height_ratios": [len(models) + 1.5, per_set + 1.5]})
    seeds = sorted({seed for _, seed in experiment.runs})
    for column, name in enumerate(sets):
        _accuracy_panel(axes[0, column], [r for r in rows if r["set"] == name], models, name)
        _difference_panel(axes[1, column], [c for c in comparisons if c["set"] == name], name)
    problems = ", ".join(f"{len(rows_)} {name}" for name, rows_ in experiment.eval_sets.items())
    budget = getattr(experiment.params.train, "token_budget", None)
    setting = (f"{len(seeds)} training seed{'s' * (len(seeds) != 1)} ({', '.join(map(str, seeds))}); problems: "
               f"{problems}" + (f"; {budget:,} generated tokens per arm and seed" if budget else ""))
    fig.suptitle("\n".join(textwrap.wrap(label, 110)) + "\n" + setting, fontsize=11)
    fig.legend(handles=[Line2D([], [], color="C0", lw=8, alpha=0.5, label="mean over seeds"),
                        Line2D([], [], color="black", marker="o", ls="", ms=4, label="one seed"),
                        Line2D([], [], color="black", marker="|", ls="-", ms=8,
                               label="95% interval (accuracy: Wilson, pooled answers; difference: t over seeds)"),
                        Line2D([], [], color=SIGNIFICANT, marker="D", ls="", label="significant after Holm (p < 0.05) *")],
               loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.75 / fig.get_figheight(), 1, 1))  # the legend's two rows below the panels
    return fig


def _accuracy_panel(ax, rows: list[dict], models: list[str], name: str) -> None:
    upper = 0.0
    for y, model in enumerate(models):
        runs = [r for r in rows if r["model"] == model]
        if not runs:
            continue
        correct, answers = sum(r["correct"] for r in runs), sum(r["problems"] for r in runs)
        mean = correct / max(answers, 1)
        low, high = wilson_interval(correct, answers)
        upper = max(upper, high, *(r["accuracy"] for r in runs))
        colour = "grey" if model == "base" else "C0"
        ax.barh(y, 100 * mean, color=colour, alpha=0.5, height=0.7)
        ax.errorbar(100 * mean, y, xerr=[[100 * (mean - low)], [100 * (high - mean)]], color="black", capsize=3, lw=1)
        ax.scatter([100 * r["accuracy"] for r in runs], [y] * len(runs), color="black", s=10, zorder=3)
        if model == "base":
            ax.axvline(100 * mean, color="grey", ls="--", lw=0.8)
    ax.set_yticks(range(len(models)), models)
    ax.invert_yaxis()
    ax.set_xlim(0, max(5.0, 5 * math.ceil(100 * upper * 1.1 / 5)))
    ax.set(xlabel="accuracy (% of problems right)", title=f"{SET_TITLES.get(name, name)}: accuracy")
    ax.grid(axis="x", alpha=0.3)


def _difference_panel(ax, comparisons: list[dict], name: str) -> None:
    labels, extent = [], 1.0
    for y, c in enumerate(comparisons):
        colour = SIGNIFICANT if c["significant"] else "C0"
        difference = 100 * c["difference"]
        finite = math.isfinite(c["ci_low"]) and math.isfinite(c["ci_high"])
        if finite:
            ax.errorbar(difference, y, xerr=[[difference - 100 * c["ci_low"]], [100 * c["ci_high"] - difference]],
                        color=colour, capsize=3, lw=1)
        ax.plot(difference, y, marker="D" if c["significant"] else "o", color=colour, ms=5)
        extent = max(extent, abs(difference), *([abs(100 * c["ci_low"]), abs(100 * c["ci_high"])] if finite else []))
        labels.append(f"{c['b']} - {c['a']}" + (" *" if c["significant"] else ""))
        ax.annotate(f"Holm p {c['p_holm']:.2g}", (1.0, y), xycoords=("axes fraction", "data"), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8, color=colour)
    ax.axvline(0, color="black", lw=0.8)
    against_base = [y for y, c in enumerate(comparisons) if c["a"] == "base"]
    if 0 < (first := min(against_base, default=0)):  # the arms against the tree above, against the base below
        ax.axhline(first - 0.5, color="grey", lw=0.6)
    ax.set_yticks(range(len(comparisons)), labels)
    for tick, c in zip(ax.get_yticklabels(), comparisons):
        tick.set_color(SIGNIFICANT if c["significant"] else "black")
    ax.set_ylim(len(comparisons) - 0.5, -0.5)
    ax.set_xlim(-1.1 * extent, 1.1 * extent)
    ax.set(xlabel="difference b - a (percentage points)", title=f"{SET_TITLES.get(name, name)}: differences")
    ax.grid(axis="x", alpha=0.3)
