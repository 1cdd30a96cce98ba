"""Visualisation: training and evaluation curves (and, later, search trees).
Draws only; every number it shows was computed elsewhere in azlib."""

from azlib.viz.curves import plot_seed_curves

__all__ = ["plot_seed_curves"]
