"""A notebook run's headline numbers (its metrics.json) beside the shipped run's (azlib.lab.shipped_results), for
notebooks 03, 04 and 06. Draws the numbers each notebook records; computes no statistic itself."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

Metrics = dict[str, Any]  # one notebook's section of a run's metrics.json
Point = tuple[float | None, float | None, float | None]  # value, interval low, interval high (None: not drawn)

RLT_STUDENTS = {"base": "base\n(no SFT)", "rlt": "RLT teacher's\nexplanations",
                "untrained": "untrained teacher's\nexplanations", "solutions": "solutions\nonly"}


def plot_rlt(runs: dict[str, Metrics]) -> plt.Figure:
    """Notebook 06, one colour per run (label -> its metrics): each student's held-out accuracy in percent with its 95%
    Wilson interval; and the teacher's gain in r from training, last minus first quarter of its steps (different
    problems; the interval treats explanations as independent) and trained minus untrained on the same problems
    (paired), with their 95% intervals. Each legend entry names its run's task (metrics' `task`); runs of different
    tasks are titled so: their numbers are not comparable."""
    fig, (students, teacher) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [3, 2]})
    _points(students, list(RLT_STUDENTS.values()),
            {label: [tuple(_percent(m.get(f"{name}{key}")) for key in ("_accuracy", "_ci_low", "_ci_high"))
                     for name in RLT_STUDENTS] for label, m in runs.items()})
    students.set(ylim=(0, 100), ylabel="held-out accuracy (% of problems)",
                 title="students without a teacher (95% Wilson interval)")
    _points(teacher, ["last - first quarter\nof the steps", "trained - untrained,\nsame problems (paired)"],
            {label: [(m.get("reward_rise"), m.get("reward_rise_ci_low"), m.get("reward_rise_ci_high")),
                     (m.get("paired_r_gain"), m.get("paired_r_ci_low"), m.get("paired_r_ci_high"))]
             for label, m in runs.items()})
    teacher.axhline(0, color="black", lw=0.8)
    teacher.set(ylabel="gain in r (nats per token)", title="the teacher's reward r from training (95% CI)")
    tasks = {label: m.get("task") for label, m in runs.items()}
    title = None
    if len({task for task in tasks.values() if task}) > 1:
        title = ("different tasks, not comparable: " +
                 "; ".join(f"{label.split(':')[0]} {task or 'unknown'}" for label, task in tasks.items()))
    return _finish(fig, {label: f"{label} ({f'{tasks[label]} task, ' if tasks[label] else ''}{m.get('base_n')} "
                                f"held-out problems, {m.get('teacher_steps')} teacher steps, "
                                f"{m.get('sft_budget_tokens', 0):,} SFT tokens per student)"
                         for label, m in runs.items()}, title)


def plot_ensemble(runs: dict[str, Metrics]) -> plt.Figure:
    """Notebook 03, one colour per run (label -> its metrics): each teacher's draw weight after the searches (the
    teachers of every run, by name), and the mean Q of the visited right (1) and wrong (0) children with their count
    (n) beside each point, on an axis that ends a little above the highest mean (a Q near 0 stays readable)."""
    fig, (weights, children) = plt.subplots(1, 2, figsize=(13, 4.6))
    teachers = sorted({name for m in runs.values() for name in _teachers(m)})
    _points(weights, teachers, {label: [(m.get(f"{name}_weight"), None, None) for name in teachers]
                                for label, m in runs.items()})
    weights.set(ylim=(0, 1), ylabel="draw weight", title="teacher weights after the searches")
    branches = {"right": "right (1)", "wrong": "wrong (0)"}
    _points(children, list(branches.values()), {label: [(m.get(f"{b}_children_mean_q"), None, None) for b in branches]
                                                for label, m in runs.items()},
            notes={label: [f"n {m.get(f'{b}_children', 0)}" for b in branches] for label, m in runs.items()})
    highest = max([0.04, *(m.get(f"{b}_children_mean_q") for m in runs.values() for b in branches
                            if _finite(m.get(f"{b}_children_mean_q")))])
    children.set(ylim=(-0.05 * highest, 1.25 * highest), ylabel="mean Q (reward of the rollouts through it)",
                 title="visited children, by the branch a teacher was asked for")
    return _finish(fig, {label: f"{label} ({m.get('searches_credited')} of {m.get('searches')} searches credited a "
                                "teacher)" for label, m in runs.items()})


def plot_training(runs: dict[str, Metrics]) -> plt.Figure:
    """Notebook 04, one colour per run (label -> its metrics): the mean reward and the accuracy its log keeps
    (`accuracy_column`: the search's answers, or the student's own samples without a search) over the first and
    the last quarter of its steps. Runs whose accuracies measure different things, or of different tasks, are
    titled so: those numbers are not comparable."""
    fig, (reward, accuracy) = plt.subplots(1, 2, figsize=(13, 4.6))
    quarters = ["first quarter\nof the steps", "last quarter\nof the steps"]
    _points(reward, quarters, {label: [(m.get(f"reward_{q}_quarter"), None, None) for q in ("first", "last")]
                               for label, m in runs.items()})
    reward.set(ylabel="mean reward per answer", title="reward (train.reward, plus any reward you added)")
    _points(accuracy, quarters, {label: [(_percent(m.get(f"accuracy_{q}_quarter")), None, None)
                                         for q in ("first", "last")] for label, m in runs.items()})
    accuracy.set(ylim=(0, 100), ylabel="% correct", title="accuracy over training (accuracy_column)")
    differs = [key for key in ("accuracy_column", "task") if len({m.get(key) for m in runs.values()}) > 1]
    title = (f"different {' and '.join(differs)}, not comparable: " +
             "; ".join(f"{label.split(':')[0]} {', '.join(str(runs[label].get(k)) for k in differs)}"
                       for label in runs)) if differs else None
    return _finish(fig, {label: f"{label} ({m.get('task', 'task unknown')}, {m.get('steps')} steps, "
                                f"{m.get('tokens_total', 0):,} tokens, signal {m.get('signal')}, update {m.get('update')}, "
                                f"accuracy: {m.get('accuracy_column')})" for label, m in runs.items()}, title)


def _teachers(m: Metrics) -> list[str]:
    """The teachers a notebook 03 run reports: each has a weight and a count of calls."""
    return [key.removesuffix("_weight") for key in m if key.endswith("_weight") and
            f"{key.removesuffix('_weight')}_calls" in m]


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _points(ax, categories: list[str], runs: dict[str, list[Point]], notes: dict[str, list[str]] | None = None) -> None:
    """Per category, one point per run in the run's colour, side by side, with its interval where it has one and a
    note beside it where given; a value that is None or not finite (too few steps for an interval) is left out."""
    step = 0.6 / max(len(runs), 1)
    for k, (label, points) in enumerate(runs.items()):
        for i, (value, low, high) in enumerate(points):
            if not _finite(value):
                continue
            x = i - 0.3 + step * (k + 0.5)
            if _finite(low) and _finite(high):
                ax.errorbar(x, value, yerr=[[value - low], [high - value]], fmt="o", color=f"C{k}", capsize=5)
            else:
                ax.plot(x, value, "o", color=f"C{k}", ms=7)
            if notes:
                ax.annotate(notes[label][i], (x, value), xytext=(6, 0), textcoords="offset points", va="center",
                            fontsize=8, color=f"C{k}")
    ax.set_xticks(range(len(categories)), categories)
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.grid(axis="y", alpha=0.3)


def _finish(fig: plt.Figure, legend: dict[str, str], title: str | None = None) -> plt.Figure:
    """One legend entry per run, under the panels, each label wrapped; the figure's title above them, if any."""
    if title:
        fig.suptitle(title, color="C3", fontsize=11)
    handles = [Line2D([], [], color=f"C{k}", marker="o", ls="", label="\n".join(textwrap.wrap(text, 120)))
               for k, text in enumerate(legend.values())]
    fig.legend(handles=handles, loc="lower center", ncol=1, fontsize=9, frameon=False)
    lines = sum(h.get_label().count("\n") + 1 for h in handles)
    fig.tight_layout(rect=(0, (0.25 + 0.17 * lines) / fig.get_figheight(), 1, 0.95 if title else 1))
    return fig
