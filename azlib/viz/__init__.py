"""Visualisation: curves, an experiment's comparisons, a run beside the shipped run, Countdown's figures, search trees
(SVG and a JupyterLab widget) and widgets to play with. Draws only; every number it shows is computed elsewhere."""

from azlib.viz.beside import plot_ensemble, plot_rlt, plot_training
from azlib.viz.countdown import (describe_countdown_node, plot_beside, plot_curves, plot_learning, plot_methods,
                                 plot_value_precision, solvable_kind)
from azlib.viz.curves import plot_seed_curves
from azlib.viz.game import PlayTicTacToe
from azlib.viz.results import plot_experiment
from azlib.viz.sliders import BanditSliders
from azlib.viz.tree import (TEXT_KINDS, TreeWidget, branch_of, describe_board_node, describe_node, describe_text_node,
                            node_details, proposer_of, save_tree, shown_nodes, tree_svg)

__all__ = ["BanditSliders", "PlayTicTacToe", "TEXT_KINDS", "TreeWidget", "branch_of", "describe_board_node",
           "describe_countdown_node", "describe_node", "describe_text_node", "node_details", "plot_beside",
           "plot_curves", "plot_ensemble", "plot_experiment", "plot_learning", "plot_methods", "plot_rlt",
           "plot_seed_curves", "plot_training", "plot_value_precision", "proposer_of", "save_tree", "shown_nodes",
           "solvable_kind", "tree_svg"]
