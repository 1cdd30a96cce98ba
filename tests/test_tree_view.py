"""The tree pictures (azlib.viz.tree): the saved SVG has its legend and a label per node, pruning draws fewer nodes,
and the widget's replay shows the statistics of the search stopped after that many simulations."""

import random
import re
from dataclasses import replace
import xml.etree.ElementTree as ET

from azlib.mcts import SearchSettings, search
from azlib.mcts.envs import tictactoe
from azlib.viz import TreeWidget, describe_board_node, save_tree, shown_nodes, tree_svg

SVG = "{http://www.w3.org/2000/svg}"
CONFIG = SearchSettings(num_simulations=120, max_depth=9, temperature=0)


def ttt_search(simulations: int):
    (result,) = search(tictactoe.TicTacToe(), ["X...O...."], replace(CONFIG, num_simulations=simulations), random.Random(0))
    return result.tree


def test_saved_svg_has_a_legend_and_labels_every_node_with_move_n_and_q(tmp_path):
    tree = ttt_search(120)
    svg = ET.parse(save_tree(tree, tmp_path, "t", "tic-tac-toe", describe_board_node, top_k=2)).getroot()
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    legend = " ".join(t.text or "" for t in svg.find(f"{SVG}g[@class='azlib-legend']").iter(f"{SVG}text"))
    assert "Q for the player who moved into the node" in legend and "visits N" in legend
    circles = svg.findall(f"{SVG}circle[@class='azlib-node']")
    assert len(circles) == len(shown_nodes(tree, 2)) > 5
    for circle in circles:
        node = tree.nodes[int(circle.get("data-id"))]
        mover = "start" if node.parent < 0 else f"{'XO'[(node.depth - 1) % 2]} {node.action}"  # X moves first from X...O....
        assert mover in texts and f"N {node.visits} Q {node.q:+.2f}" in texts


def test_top_k_keeps_the_most_visited_children():
    tree = ttt_search(120)
    visited, top1 = shown_nodes(tree), shown_nodes(tree, top_k=1)
    assert len(top1) < len(visited) < len(shown_nodes(tree, unvisited=True)) == len(tree.nodes)
    best = max(tree.root.children, key=lambda c: tree.nodes[c].visits)
    assert top1[:2] == [0, best] and all(tree.nodes[i].visits for i in visited)


def test_widget_replay_shows_the_search_stopped_at_that_step():
    tree = ttt_search(120)
    widget = TreeWidget(tree, "t", describe_board_node, top_k=None)
    for step in (3, 17):
        short = ttt_search(step)
        widget.step = step
        drawn = {int(i): int(n) for i, n in re.findall(r'data-id="(\d+)" data-n="(\d+)"', widget.svg)}
        assert drawn == {i: n.visits for i, n in enumerate(short.nodes) if n.visits}
        assert f"after {step} of 120 simulations" in widget.svg
        child = short.root.children[0]
        widget.selected = child
        assert widget.details.startswith(f"node {child}: ") and f"N {short.nodes[child].visits} " in widget.details
        assert "Q + U" in widget.details
    widget.selected = len(tree.nodes) - 1
    assert "does not exist yet" in widget.details
    assert tree_svg(tree, "final") != widget.svg
