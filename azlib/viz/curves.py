"""Curves averaged over seeds: the mean as a line, one standard deviation as a band.
Takes arrays shaped [steps, seeds]; knows nothing of how they were produced."""

from __future__ import annotations

import numpy as np


def plot_seed_curves(ax, x: np.ndarray, curves: dict[str, np.ndarray], *, title: str, xlabel: str, ylabel: str):
    """One line per label: mean over the seed axis with a +-1 std band."""
    for label, values in curves.items():
        mean, std = values.mean(1), values.std(1)
        (line,) = ax.plot(x, mean, label=label)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return ax
