"""Search trees as pictures: an SVG drawing saved with each run, and a JupyterLab widget that replays the search and
shows each node's N, Q, prior and Q + U. Draws only: the tree, its replay and the scores come from azlib.mcts."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Callable

import anywidget
import traitlets
from matplotlib import colormaps, colors

from azlib.mcts import selection_terms, tree_after
from azlib.games.tictactoe import to_move
from azlib.mcts.tree import Node, Tree
from azlib.viz.static import StillPicture

Describe = Callable[[Node], tuple[str, str]]  # node -> (short label, details shown on click)
Kind = Callable[[Node], str | None]  # node -> the kind it is coloured by (None: white, not in the legend)
VALUE_COLOURS = colormaps["RdYlGn"]
KIND_COLOURS = colormaps["tab10"]
LEGEND_HEIGHT = 64  # pixels under the tree
PAGE_WIDTH = 1000  # pixels: a wider tree is drawn at its own size and shown scaled down to this width


def describe_node(node: Node) -> tuple[str, str]:
    """Generic: the edge's action as label; depth, state and extras as details."""
    label = "root" if node.parent < 0 else str(node.action)
    details = {"action": node.action, "depth": node.depth, "terminal": node.terminal, "state": node.state,
               "info": node.info}
    return label[:20], json.dumps(details, indent=1, default=str)


def describe_text_node(node: Node) -> tuple[str, str]:
    """Text search (azlib.games.text.env): the chunk's first words as label; the whole partial answer and rewards."""
    if node.parent < 0:
        return "question", "root: the question"
    info, (code, text) = node.info, code_and_text(node)
    lines = [f"depth {node.depth}   proposed by {', '.join(info.get('proposers', []))}   path code {code}",
             f"chunk PRE {info.get('pre', 0.0):.3f}   similarity to teacher's right chunk {info.get('student_similarity')}"]
    if node.terminal:
        lines.append(f"terminal, reward {info.get('terminal_value', 0.0):.3f}")
    lines += ["", "chunk:", info.get("chunk", ""), "", "answer so far:", text]
    return first_words(info.get("chunk", "")), "\n".join(lines)


def code_and_text(node: Node) -> tuple[str, str]:
    """A text search node's path code and text so far, from its state (azlib.games.text.env.TextState) or, in a
    tree loaded from JSON, the dict that holds it."""
    state = node.state
    return (state["code"], state["answer"]["text"]) if isinstance(state, dict) else (state.code, state.answer.text)


def proposer_of(node: Node) -> str | None:
    """Text search: who proposed the chunk: "student" or a teacher's name ("a + b" when both wrote the same chunk)."""
    names = sorted({p.split(":")[0] for p in node.info.get("proposers", [])})
    return " + ".join(names) if node.parent >= 0 else None


def branch_of(node: Node) -> str | None:
    """Text search: the branch the chunk is on, the last letter of its path code: a teacher's right (1) or wrong (0)
    chunk, a student chunk joining the teacher chunk it resembles most, or a student chunk with no teacher asked."""
    if node.parent < 0:
        return None
    return {"1": "right (1)", "0": "wrong (0)"}.get(code_and_text(node)[0][-1:], "no teacher (s)")


# The kinds a text search's nodes can be coloured by, beside Q (TreeWidget's colourings)
TEXT_KINDS: dict[str, Kind] = {"proposer": proposer_of, "right/wrong": branch_of}


def describe_board_node(node: Node) -> tuple[str, str]:
    """Tic-tac-toe (azlib.games.tictactoe): who moved where as label ("X 4"); the board as details."""
    board = node.state
    grid = "\n".join(" ".join(board[r * 3 : r * 3 + 3]) for r in range(3))
    if node.parent < 0:
        return "start", f"start, {to_move(board)} to move\n{grid}"
    mover = "O" if to_move(board) == "X" else "X"  # the player who just moved
    return f"{mover} {node.action}", f"{mover} played {node.action}\n{grid}"


def first_words(text: str, words: int = 3, chars: int = 20) -> str:
    short = " ".join(text.split()[:words])
    return short if len(short) <= chars else short[: chars - 1] + "…"


def shown_nodes(tree: Tree, top_k: int | None = None, unvisited: bool = False, keep: set[int] = frozenset()) -> list[int]:
    """The nodes drawn, root first: every node's visited children (also the unvisited ones with `unvisited`), only
    its `top_k` most visited when given, and always the nodes in `keep` (the path just selected)."""
    out = []

    def walk(i: int) -> None:
        out.append(i)
        children = [c for c in tree.nodes[i].children if unvisited or tree.nodes[c].visits or c in keep]
        if top_k:
            ranked = sorted(children, key=lambda c: -tree.nodes[c].visits)[:top_k]
            children = [c for c in children if c in ranked or c in keep]
        for c in children:
            walk(c)

    walk(0)
    return out


def _layout(tree: Tree, shown: list[int]) -> tuple[dict[int, tuple[float, int]], int]:
    """Tidy enough: leaves side by side in depth-first order, parents centred over their children. (x, depth) per
    node, and the number of leaves."""
    drawn, x = set(shown), {}
    leaves = 0

    def place(i: int) -> float:
        nonlocal leaves
        children = [c for c in tree.nodes[i].children if c in drawn]
        if children:
            x[i] = sum(place(c) for c in children) / len(children)
        else:
            x[i], leaves = leaves, leaves + 1
        return x[i]

    place(0)
    return {i: (x[i], tree.nodes[i].depth) for i in shown}, leaves


def q_range(tree: Tree) -> tuple[float, float]:
    """The range Q can take over the whole replay: every node's Q is a mean of backed-up values (their sign flipped
    for the other player in a two-player game), so it lies within theirs. Without a history: the final Qs."""
    means = [b.value / b.visits for backups in tree.history for b in backups if b.visits]
    means = means or [n.q for n in tree.nodes if n.visits] or [0.0]
    if tree.two_player:
        top = max(abs(m) for m in means) or 1.0
        return -top, top
    low, high = min(means), max(means)
    return low, max(high, low + 1e-9)


def node_details(tree: Tree, i: int, describe: Describe = describe_node) -> str:
    """What a click on node i shows: its N, Q (and whose), prior P, the score its parent ranks it by, then the
    environment's details. `tree` is the tree as it stands (tree_after for a replay)."""
    node = tree.nodes[i]
    label, details = describe(node)
    whose = "for the player who moved here" if tree.two_player else "mean reward of the simulations through it"
    lines = [f"node {i}: {label}", f"N {node.visits}   Q {node.q:+.3f} ({whose})   P {node.prior:.3f}"]
    terms = selection_terms(tree, node.parent) if node.parent >= 0 else None
    if terms:
        k = tree.nodes[node.parent].children.index(i)
        q, score = terms[k]
        rank = 1 + sorted((s for _, s in terms), reverse=True).index(score)
        lines.append(f"as its parent ranks it ({tree.settings['rule']}, Q read {tree.settings['q_transform']}): "
                     f"Q + U = {q:+.3f} + {score - q:.3f} = {score:+.3f} "
                     f"(rank {rank} of {len(terms)}; the next simulation enters rank 1)")
    return "\n".join([*lines, "", details])


def kind_colours(tree: Tree, kind: Kind) -> dict[str, str]:
    """Each kind of node in the whole tree -> its colour, in sorted order: a replay or a pruned view keeps them."""
    kinds = sorted({k for n in tree.nodes if (k := kind(n)) is not None})
    return {k: colors.to_hex(KIND_COLOURS(i % KIND_COLOURS.N)) for i, k in enumerate(kinds)}


def tree_svg(tree: Tree, title: str, describe: Describe = describe_node, *, step: int | None = None,
             top_k: int | None = None, unvisited: bool = False, selected: int | None = None,
             colour_by: Kind | None = None, width: int = 900, height: int = 420) -> str:
    """The tree after `step` simulations (None: as it is) as a standalone SVG: each node labelled with its move or
    first words and its N and Q, the path simulation `step` took in blue, and a legend (colour = Q, or the node's
    kind with `colour_by`; size = visits). A hover shows a node's details. The picture grows with the number of
    leaves drawn."""
    then = tree_after(tree, step) if step is not None else tree
    path = {i for b in tree.history[step - 1] for i in b.path} if step else set()
    shown = shown_nodes(then, top_k, unvisited, path)
    positions, leaves = _layout(then, shown)
    deepest = max(n.depth for n in tree.nodes) or 1
    width, height = max(width, 64 * leaves + 40), max(height, 52 * deepest + 70)
    low, high = q_range(tree)
    norm = colors.Normalize(low, high)
    kinds = kind_colours(tree, colour_by) if colour_by else None
    most = max(tree.root.visits, 1)

    def radius(visits: int) -> float:
        return 3 + 9 * math.sqrt(visits / most)

    def xy(i: int) -> tuple[float, float]:
        px, depth = positions[i]
        return 20 + (px + 0.5) / max(leaves, 1) * (width - 40), 58 + depth / deepest * (height - 92)

    existing = 1 + sum(len(n.children) for n in then.nodes)
    status = f"after {step} of {len(tree.history)} simulations; " if step is not None else ""
    rule = (f"the {top_k} most visited children of each node" if top_k else
            "all children" if unvisited else "the visited children")
    shown_width = min(width, PAGE_WIDTH)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{shown_width}" '
             f'height="{(height + LEGEND_HEIGHT) * shown_width / width:.0f}" '
             f'viewBox="0 0 {width} {height + LEGEND_HEIGHT}" font-family="sans-serif" font-size="9">',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{html.escape(title)}</text>',
             f'<text x="{width / 2}" y="30" text-anchor="middle" fill="#555">{status}showing {len(shown)} of '
             f'{existing} nodes: {rule}</text>']
    for i in shown[1:]:
        (x1, y1), (x2, y2) = xy(then.nodes[i].parent), xy(i)
        style = 'stroke="#1f77b4" stroke-width="3"' if i in path else 'stroke="#999"'
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" {style}/>')
    for i in shown:
        node, (x, y) = then.nodes[i], xy(i)
        if kinds is not None:
            fill = kinds.get(colour_by(node), "#ffffff")
        else:
            fill = colors.to_hex(VALUE_COLOURS(norm(node.q))) if node.visits else "#cccccc"
        ring = "#ff7f0e" if i == selected else "#1f77b4" if i in path else "black" if node.terminal else "none"
        label = describe(node)[0]
        parts += [f'<circle class="azlib-node" data-id="{i}" data-n="{node.visits}" cx="{x:.1f}" cy="{y:.1f}" '
                  f'r="{radius(node.visits):.1f}" fill="{fill}" stroke="{ring}" stroke-width="2">'
                  f'<title>{html.escape(node_details(then, i, describe))}</title></circle>',
                  f'<text x="{x:.1f}" y="{y - radius(node.visits) - 3:.1f}" text-anchor="middle">{html.escape(label)}</text>',
                  f'<text x="{x:.1f}" y="{y + radius(node.visits) + 9:.1f}" text-anchor="middle" fill="#333">'
                  f'N {node.visits} Q {node.q:+.2f}</text>']
    parts += _legend(tree, height, low, high, radius, bool(path), kinds)
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(tree: Tree, top: float, low: float, high: float, radius: Callable[[int], float], path: bool,
            kinds: dict[str, str] | None) -> list[str]:
    """Under the tree: the colour scale of Q (and whose Q it is) or the colour of each kind, sizes for a few visit
    counts, the rings."""
    out = [f'<g class="azlib-legend" transform="translate(20,{top + 8})">', '<text x="0" y="10">colour:</text>']
    if kinds is not None:
        x = 45
        for kind, fill in kinds.items():
            out += [f'<rect class="azlib-kind" x="{x}" y="1" width="12" height="12" fill="{fill}"/>',
                    f'<text x="{x + 15}" y="10">{html.escape(kind)}</text>']
            x += 30 + 6 * len(kind)
    else:
        whose = ("Q for the player who moved into the node (the one to move at its parent): the sign flips each ply"
                 if tree.two_player else "Q, the mean reward of the simulations through the node")
        if high - low < 1e-6:  # one value everywhere: a swatch and the value, not a scale from it to itself
            out += [f'<rect x="45" y="1" width="12" height="12" fill="{colors.to_hex(VALUE_COLOURS(0.0))}"/>',
                    f'<text x="62" y="10">{html.escape(whose)}: every visited node\'s is {low:+.2f}; grey: not '
                    'visited yet</text>']
        else:
            for k in range(10):
                value = low + (high - low) * (k + 0.5) / 10
                out.append(f'<rect x="{45 + 12 * k}" y="1" width="12" height="12" '
                           f'fill="{colors.to_hex(VALUE_COLOURS(colors.Normalize(low, high)(value)))}"/>')
            out += [f'<text x="45" y="24">{low:+.2f}</text>',
                    f'<text x="165" y="24" text-anchor="end">{high:+.2f}</text>',
                    f'<text x="175" y="10">{html.escape(whose)}; grey: not visited yet</text>']
    out.append('<text x="0" y="48">size:</text>')
    x = 45
    for visits in sorted({1, max(tree.root.visits // 10, 1), max(tree.root.visits, 1)}):
        out += [f'<circle cx="{x + radius(visits):.1f}" cy="44" r="{radius(visits):.1f}" fill="#cccccc"/>',
                f'<text x="{x + 2 * radius(visits) + 3:.1f}" y="48">N {visits}</text>']
        x += 2 * radius(visits) + 48
    rings = "ring: black terminal, orange selected" + (", blue the path this simulation took" if path else "")
    out += [f'<text x="{x}" y="48">visits N (labels: N and Q under each node); {rings}</text>', "</g>"]
    return out


def save_tree(tree: Tree, folder: str | Path, name: str, title: str, describe: Describe = describe_node,
              top_k: int | None = 3, colour_by: Kind | None = None) -> Path:
    """trees/<name>.json (loadable with Tree.load; every node) and trees/<name>.svg (the `top_k` most visited
    children of each node, None for all visited ones; coloured by Q, or by `colour_by`); returns the SVG's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tree.save(folder / f"{name}.json")
    svg = folder / f"{name}.svg"
    svg.write_text(tree_svg(tree, title, describe, top_k=top_k, colour_by=colour_by))
    return svg


_ESM = """
const SHOW = {all: [0, true], visited: [0, false], 1: [1, false], 2: [2, false], 3: [3, false], 5: [5, false]};

function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "azlib-tree";
  box.style.fontFamily = "sans-serif";
  const controls = document.createElement("div");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.min = 0;
  slider.className = "azlib-tree-step";
  const stepLabel = document.createElement("span");
  const show = document.createElement("select");
  show.className = "azlib-tree-show";
  for (const [value, text] of [["all", "all children"], ["visited", "visited children"], ["1", "top 1 by visits"],
                               ["2", "top 2 by visits"], ["3", "top 3 by visits"], ["5", "top 5 by visits"]]) {
    show.add(new Option(text, value));
  }
  const colour = document.createElement("select");
  colour.className = "azlib-tree-colour";
  for (const name of model.get("colourings")) colour.add(new Option(name, name));
  const colourLabel = document.createElement("label");
  colourLabel.append("   colour by ", colour);
  colourLabel.style.display = model.get("colourings").length > 1 ? "" : "none";
  const replay = document.createElement("label");
  replay.append("simulation ", slider, stepLabel);
  controls.append(replay, "   show ", show, colourLabel);
  const row = document.createElement("div");
  row.style.cssText = "display:flex;gap:12px";
  const picture = document.createElement("div");
  picture.style.cssText = "flex:none;max-width:70%;max-height:640px;overflow:auto";
  const panel = document.createElement("pre");
  panel.className = "azlib-tree-details";
  panel.style.cssText = "flex:1;min-width:220px;max-height:640px;overflow:auto;font-size:11px;white-space:pre-wrap;margin:0";
  row.append(picture, panel);
  box.append(controls, row);
  el.appendChild(box);

  function draw() {
    const last = model.get("max_step");
    replay.style.display = last > 0 ? "" : "none";
    slider.max = last;
    slider.value = model.get("step");
    stepLabel.textContent = ` ${model.get("step")} / ${last}`;
    show.value = model.get("unvisited") ? "all" : (model.get("top_k") ? String(model.get("top_k")) : "visited");
    colour.value = model.get("colour");
    picture.innerHTML = model.get("svg");
    for (const c of picture.querySelectorAll("circle.azlib-node")) {
      c.style.cursor = "pointer";
      c.addEventListener("click", () => { model.set("selected", Number(c.dataset.id)); model.save_changes(); });
    }
    panel.textContent = model.get("details");
  }
  slider.addEventListener("input", () => { model.set("step", Number(slider.value)); model.save_changes(); });
  show.addEventListener("change", () => {
    const [topK, unvisited] = SHOW[show.value];
    model.set("top_k", topK);
    model.set("unvisited", unvisited);
    model.save_changes();
  });
  colour.addEventListener("change", () => { model.set("colour", colour.value); model.save_changes(); });
  for (const name of ["svg", "details", "max_step"]) model.on(`change:${name}`, draw);
  draw();
}
export default { render };
"""


class TreeWidget(StillPicture, anywidget.AnyWidget):
    """Interactive tree for JupyterLab 4 / ipywidgets 8; all JavaScript is inline (no CDN). The kernel draws
    (tree_svg) and the browser shows: moving the slider to k redraws the tree after k simulations (tree_after), a
    click asks for that node's details (node_details), a menu colours the nodes by Q or by one of `colourings`
    (name -> a node's kind, e.g. TEXT_KINDS)."""

    _esm = _ESM
    svg = traitlets.Unicode("").tag(sync=True)
    details = traitlets.Unicode("click a node").tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)  # simulations replayed
    max_step = traitlets.Int(0).tag(sync=True)  # simulations recorded (0: a tree without history, shown as it is)
    top_k = traitlets.Int(0).tag(sync=True)  # children drawn per node, most visited first; 0: no limit
    unvisited = traitlets.Bool(False).tag(sync=True)  # also draw children never visited
    selected = traitlets.Int(-1).tag(sync=True)
    colourings = traitlets.List(traitlets.Unicode(), ["Q"]).tag(sync=True)  # the menu: "Q", then each kind's name
    colour = traitlets.Unicode("Q").tag(sync=True)

    def __init__(self, tree: Tree, title: str = "", describe: Describe = describe_node, top_k: int | None = 3,
                 unvisited: bool = False, colourings: dict[str, Kind] | None = None, colour: str = "Q", **kwargs):
        self._tree, self._title, self._describe = tree, title, describe
        self._kinds = dict(colourings or {})
        if colour != "Q" and colour not in self._kinds:
            raise ValueError(f"colour {colour!r}: choose 'Q' or one of the colourings {sorted(self._kinds)}")
        last = len(tree.history)
        super().__init__(step=last, max_step=last, top_k=top_k or 0, unvisited=unvisited,
                         colourings=["Q", *self._kinds], colour=colour, **kwargs)
        self.observe(self._redraw, ["step", "top_k", "unvisited", "selected", "colour"])
        self._redraw()

    def still(self) -> dict[str, str]:
        return {"image/svg+xml": self.svg}

    def _redraw(self, _change=None) -> None:
        step = self.step if self.max_step else None
        then = tree_after(self._tree, step) if step is not None else self._tree
        self.svg = tree_svg(self._tree, self._title, self._describe, step=step, top_k=self.top_k or None,
                            unvisited=self.unvisited, selected=self.selected, colour_by=self._kinds.get(self.colour))
        exists = self.selected == 0 or (0 < self.selected < len(then.nodes) and
                                        self.selected in then.nodes[then.nodes[self.selected].parent].children)
        self.details = (node_details(then, self.selected, self._describe) if exists else
                        "click a node" if self.selected < 0 else f"node {self.selected} does not exist yet")
