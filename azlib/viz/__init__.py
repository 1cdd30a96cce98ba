"""Visualisation: training and evaluation curves, search trees (static SVG and a JupyterLab widget).
Draws only; every number it shows was computed elsewhere in azlib."""

from azlib.viz.curves import plot_seed_curves
from azlib.viz.tree import (TreeWidget, describe_board_node, describe_node, describe_text_node, node_details, save_tree,
                            shown_nodes, tree_svg)

__all__ = ["TreeWidget", "describe_board_node", "describe_node", "describe_text_node", "node_details", "plot_seed_curves",
           "save_tree", "shown_nodes", "tree_svg"]
