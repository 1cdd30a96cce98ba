"""The tree pictures (azlib.viz.tree): the saved SVG has its legend and a label per node, pruning draws fewer nodes,
the widget's replay shows the statistics of the search stopped after that many simulations, and notebook 03's text
trees are coloured by who proposed each chunk and by its branch (right or wrong)."""

import random
import re
from dataclasses import replace
import xml.etree.ElementTree as ET

import pytest

from azlib.mcts import Tree, search
from azlib.games import tictactoe
from azlib.settings import SearchSettings
from azlib.viz import (TEXT_KINDS, TreeWidget, describe_board_node, describe_text_node, save_tree, shown_nodes,
                       tree_svg)

SVG = "{http://www.w3.org/2000/svg}"
CONFIG = SearchSettings(num_simulations=120, max_depth=9, temperature=0)


def ttt_search(simulations: int):
    (result,) = search(tictactoe.TicTacToe(), ["X...O...."], replace(CONFIG, num_simulations=simulations), random.Random(0),
                       replay=True)
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


def test_a_tree_searched_without_replay_is_shown_as_it_ends():
    (result,) = search(tictactoe.TicTacToe(), ["X...O...."], replace(CONFIG, num_simulations=40), random.Random(0))
    widget = TreeWidget(result.tree, "t", describe_board_node, top_k=None)
    assert widget.max_step == 0 and "simulations; " not in widget.svg
    drawn = {int(i): int(n) for i, n in re.findall(r'data-id="(\d+)" data-n="(\d+)"', widget.svg)}
    assert drawn == {i: n.visits for i, n in enumerate(result.tree.nodes) if n.visits}


def teacher_tree() -> Tree:
    """A tree as notebook 03's searches grow them (azlib.games.text.env with teachers): each node's proposers
    ("student", or "teacher:label") and its path code, whose last letter is the branch."""
    tree = Tree.with_root({"problem": 0, "code": "", "answer": {"text": ""}})

    def child(parent: int, code: str, proposers: list[str], chunk: str) -> int:
        i = tree.add_child(parent, {"problem": 0, "code": code, "answer": {"text": chunk}}, chunk, 0.25,
                           info={"chunk": chunk, "proposers": proposers, "pre": -1.0})
        tree.nodes[i].visits = 1
        return i

    right = child(0, "1", ["tutor:1"], "3 + 4 = 7")
    child(0, "0", ["tutor:0"], "3 + 4 = 8")
    child(0, "1", ["student"], "Add 3 and 4")  # a student chunk that joined the right branch
    child(0, "s", ["student"], "Let us see")  # no teacher asked at this node
    child(right, "11", ["http-tutor:1", "student"], "#### 7")  # the same chunk from both
    tree.root.visits = 5
    return tree


def fills(svg: str) -> tuple[dict[int, str], dict[str, str]]:
    """(node id -> its fill, legend kind -> its colour) of a drawn tree."""
    root = ET.fromstring(svg)
    nodes = {int(c.get("data-id")): c.get("fill") for c in root.iter(f"{SVG}circle") if c.get("class") == "azlib-node"}
    legend = list(root.find(f"{SVG}g[@class='azlib-legend']"))
    kinds = {legend[k + 1].text: e.get("fill") for k, e in enumerate(legend) if e.get("class") == "azlib-kind"}
    return nodes, kinds


@pytest.mark.parametrize("colouring, expected", [
    ("proposer", {1: "tutor", 2: "tutor", 3: "student", 4: "student", 5: "http-tutor + student"}),
    ("right/wrong", {1: "right (1)", 2: "wrong (0)", 3: "right (1)", 4: "no teacher (s)", 5: "right (1)"}),
])
def test_a_teacher_tree_is_coloured_by_proposer_and_by_branch(colouring, expected):
    tree = teacher_tree()
    nodes, kinds = fills(tree_svg(tree, "t", describe_text_node, colour_by=TEXT_KINDS[colouring]))
    assert set(kinds) == set(expected.values()) and len(set(kinds.values())) == len(kinds), "one colour per kind"
    assert {i: fill for i, fill in nodes.items() if i} == {i: kinds[kind] for i, kind in expected.items()}
    assert nodes[0] == "#ffffff", "the question is of no kind"


def test_the_widget_colours_notebook_03s_tree_by_the_menus_choice(tmp_path):
    tree = teacher_tree()
    widget = TreeWidget(tree, "t", describe_text_node, colourings=TEXT_KINDS, colour="proposer")
    assert widget.colourings == ["Q", "proposer", "right/wrong"]
    assert set(fills(widget.svg)[1]) == {"tutor", "student", "http-tutor + student"}
    widget.colour = "right/wrong"
    assert set(fills(widget.svg)[1]) == {"right (1)", "wrong (0)", "no teacher (s)"}
    widget.colour = "Q"
    assert not fills(widget.svg)[1] and "the mean reward of the simulations" in widget.svg
    with pytest.raises(ValueError, match="colour 'teacher': choose 'Q' or one of the colourings"):
        TreeWidget(tree, "t", describe_text_node, colourings=TEXT_KINDS, colour="teacher")
    saved = save_tree(tree, tmp_path, "t", "t", describe_text_node, colour_by=TEXT_KINDS["proposer"]).read_text()
    assert set(fills(saved)[1]) == {"tutor", "student", "http-tutor + student"}


def countdown_tree():
    """Notebook 08's picture: a search over a tiny net's legal lines on a 3-number problem, replay recorded."""
    import torch

    from azlib.games.countdown.play import play_searched
    from azlib.games.countdown.policy import Policy, PolicyValueNet
    from azlib.settings import GPTShape
    from azlib.games.countdown.rules import State
    from azlib.games.countdown.settings import CountdownSearchSettings

    torch.manual_seed(0)
    policy = Policy(PolicyValueNet(GPTShape(n_layer=1, n_head=2, n_embd=16)))
    played = play_searched(policy, [State(10, (2, 5, 3))], CountdownSearchSettings(candidates=8, simulations=12),
                           "learned", random.Random(0), explore=False, keep_trees=True,
                           generator=torch.Generator().manual_seed(0))
    return played.games[0].trees[0]


def test_a_countdown_tree_is_coloured_by_the_oracle_and_labelled_by_its_lines(tmp_path):
    from azlib.games.countdown.rules import State, apply, parse_move, solvable
    from azlib.games.countdown.play import Episode
    from azlib.viz.countdown import describe_countdown_node, solvable_kind

    tree = countdown_tree()
    children = [tree.nodes[i] for i in tree.root.children]
    truth = {c.action: solvable(apply(State(10, (2, 5, 3)), parse_move(c.action))) for c in children}
    assert set(truth.values()) == {True, False}, "the sampled lines hold both a live and a dead move"
    nodes, kinds = fills(tree_svg(tree, "t", describe_countdown_node, colour_by=solvable_kind, top_k=None))
    assert {"solvable", "dead"} <= set(kinds) and nodes[0] == "#ffffff"
    for i in tree.root.children:
        if tree.nodes[i].visits:
            assert nodes[i] == kinds["solvable" if truth[tree.nodes[i].action] else "dead"]
    label, details = describe_countdown_node(children[0])
    assert label == children[0].action and children[0].state.text in details
    widget = TreeWidget(tree, "t", describe_countdown_node, colourings={"oracle": solvable_kind}, colour="oracle")
    assert set(fills(widget.svg)[1]) == set(kinds)
    saved = save_tree(tree, tmp_path, "08_countdown", "t", describe_countdown_node, colour_by=solvable_kind)
    assert Tree.load(tmp_path / "08_countdown.json", decode=Episode.from_json).nodes[1].state == tree.nodes[1].state
    assert set(fills(saved.read_text())[1]) <= set(kinds)


def test_a_wide_tree_is_drawn_whole_and_shown_at_page_width():
    """Every visited node of an 800-simulation tree is drawn, in a picture scaled to the page: its viewBox keeps
    the drawing's own size, its width and height are that size scaled down to PAGE_WIDTH."""
    from azlib.viz.tree import PAGE_WIDTH

    tree = ttt_search(800)
    svg = ET.fromstring(tree_svg(tree, "wide", describe_board_node, top_k=None))
    _, _, width, height = map(float, svg.get("viewBox").split())
    assert width > 2 * PAGE_WIDTH and float(svg.get("width")) == PAGE_WIDTH
    assert float(svg.get("height")) == pytest.approx(height * PAGE_WIDTH / width, abs=1)
    assert len(svg.findall(f"{SVG}circle[@class='azlib-node']")) == len(shown_nodes(tree))
    narrow = ET.fromstring(tree_svg(ttt_search(3), "narrow", describe_board_node))
    assert narrow.get("width") == narrow.get("viewBox").split()[2] == "900"


def test_a_tree_whose_every_q_is_equal_says_so_instead_of_a_scale_from_a_value_to_itself():
    tree = ttt_search(3)
    tree.two_player = False
    for node in tree.nodes:
        node.value_sum = 0.0
    tree.history = []
    drawn = ET.fromstring(tree_svg(tree, "flat"))
    legend = " ".join(t.text or "" for t in drawn.find(f"{SVG}g[@class='azlib-legend']").iter(f"{SVG}text"))
    assert "the mean reward of the simulations through the node: every visited node's is +0.00" in legend
    assert legend.count("+0.00") == 1, "no scale from +0.00 to +0.00"
