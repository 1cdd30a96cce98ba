"""Curves averaged over seeds: the mean as a line, one standard deviation as a band.
Takes arrays shaped [steps, seeds]; knows nothing of how they were produced."""

from __future__ import annotations

import numpy as np

STYLES = ("-", "--", "-.", ":")  # one per curve in turn, so that a curve lying on another shows through it


def plot_seed_curves(ax, x: np.ndarray, curves: dict[str, np.ndarray], *, title: str, xlabel: str, ylabel: str,
                     style: int = 0):
    """One line per label: mean over the seed axis with a +-1 std band, each in its own colour and line style (from
    the `style`-th, for curves drawn on one axes a call at a time); a curve whose mean equals an earlier one's says so
    in its label."""
    means: dict[str, np.ndarray] = {}
    for k, (label, values) in enumerate(curves.items(), start=style):
        mean, std = values.mean(1), values.std(1)
        same = next((other for other, m in means.items() if m.shape == mean.shape and np.allclose(m, mean)), None)
        shown = f"{label} (identical to {same})" if same else label
        (line,) = ax.plot(x, mean, STYLES[k % len(STYLES)], label=shown, lw=2.4 if k == 0 else 1.6)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
        means[label] = mean
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return ax
