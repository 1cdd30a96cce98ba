"""Search trees as pictures: a static SVG for run folders, and an interactive widget for JupyterLab
(click a node for its text, visits, Q, prior and rewards; a slider replays the order of expansion).
Draws only; the tree comes from azlib.mcts."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Callable

import anywidget
import traitlets
from matplotlib import colormaps, colors

from azlib.mcts.tree import Node, Tree

Describe = Callable[[Node], tuple[str, str]]  # node -> (short label, details shown on click)
VALUE_COLOURS = colormaps["RdYlGn"]


def describe_node(node: Node) -> tuple[str, str]:
    """Generic: the edge's action as label; statistics, state and extras as details."""
    label = "root" if node.parent < 0 else str(node.action)
    details = {"action": node.action, "visits": node.visits, "Q": round(node.q, 4), "prior": round(node.prior, 4),
               "depth": node.depth, "terminal": node.terminal, "state": node.state, "info": node.info}
    return label[:24], json.dumps(details, indent=1, default=str)


def describe_text_node(node: Node) -> tuple[str, str]:
    """Text search (azlib.mcts.envs.text): the chunk as label; the whole partial answer and rewards."""
    if node.parent < 0:
        return "question", f"root: the question\nvisits {node.visits}, Q {node.q:.3f}"
    info, state = node.info, node.state
    lines = [f"visits {node.visits}   Q {node.q:.3f}   prior {node.prior:.3f}   depth {node.depth}",
             f"proposed by {', '.join(info.get('proposers', []))}   path code {state['code']}",
             f"chunk PRE {info.get('pre', 0.0):.3f}   similarity to teacher's right chunk {info.get('student_similarity')}"]
    if node.terminal:
        lines.append(f"terminal, reward {info.get('terminal_value', 0.0):.3f}")
    lines += ["", "chunk:", info.get("chunk", ""), "", "answer so far:", state["text"]]
    return info.get("chunk", "")[:24], "\n".join(lines)


def describe_board_node(node: Node) -> tuple[str, str]:
    """Tic-tac-toe (azlib.mcts.envs.tictactoe): the move as label; the board and statistics."""
    board = node.state
    grid = "\n".join(" ".join(board[r * 3 : r * 3 + 3]) for r in range(3))
    label = "start" if node.parent < 0 else f"move {node.action}"
    return label, f"{label}\n{grid}\nvisits {node.visits}   Q {node.q:.3f}   prior {node.prior:.3f}"


def _layout(tree: Tree) -> dict[int, tuple[float, float]]:
    """Tidy enough: leaves side by side in depth-first order, parents centred over their children."""
    x: dict[int, float] = {}
    next_leaf = 0

    def place(i: int) -> float:
        nonlocal next_leaf
        children = tree.nodes[i].children
        if not children:
            x[i] = next_leaf
            next_leaf += 1
        else:
            x[i] = sum(place(c) for c in children) / len(children)
        return x[i]

    place(0)
    return {i: (x[i], float(tree.nodes[i].depth)) for i in x}


def drawing(tree: Tree, describe: Describe = describe_node, width: int = 900, height: int = 480) -> list[dict[str, Any]]:
    """One dict per node: pixel position, radius by visits, colour by Q, when it appeared, texts."""
    positions = _layout(tree)
    span_x = max(p[0] for p in positions.values()) or 1.0
    span_y = max(p[1] for p in positions.values()) or 1.0
    visited = [n.q for n in tree.nodes if n.visits]
    norm = colors.Normalize(min(visited, default=0.0), max(visited, default=1.0) + 1e-9)
    most = max(n.visits for n in tree.nodes) or 1
    out = []
    for i, node in enumerate(tree.nodes):
        label, details = describe(node)
        px, py = positions[i]
        out.append({
            "id": i, "parent": node.parent, "x": 30 + px / span_x * (width - 60), "y": 30 + py / span_y * (height - 60),
            "r": 3 + 9 * (node.visits / most) ** 0.5,
            "color": colors.to_hex(VALUE_COLOURS(norm(node.q))) if node.visits else "#cccccc",
            "born": tree.nodes[node.parent].expanded_at if node.parent >= 0 else -1,
            "label": label, "details": details, "terminal": node.terminal,
        })
    return out


def tree_svg(tree: Tree, title: str, describe: Describe = describe_node, width: int = 900, height: int = 480) -> str:
    """The final tree as a standalone SVG (node colour = Q, red low to green high; size = visits)."""
    nodes = drawing(tree, describe, width, height)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
             f'font-family="sans-serif" font-size="10">',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{html.escape(title)}</text>',
             '<g transform="translate(0,20)">']
    for n in nodes:
        if n["parent"] >= 0:
            p = nodes[n["parent"]]
            parts.append(f'<line x1="{p["x"]:.1f}" y1="{p["y"]:.1f}" x2="{n["x"]:.1f}" y2="{n["y"]:.1f}" stroke="#999"/>')
    for n in nodes:
        stroke = ' stroke="black" stroke-width="2"' if n["terminal"] else ""
        parts.append(f'<circle cx="{n["x"]:.1f}" cy="{n["y"]:.1f}" r="{n["r"]:.1f}" fill="{n["color"]}"{stroke}>'
                     f'<title>{html.escape(n["details"])}</title></circle>')
    parts.append("</g></svg>")
    return "\n".join(parts)


def save_tree(tree: Tree, folder: str | Path, name: str, title: str, describe: Describe = describe_node) -> Path:
    """trees/<name>.json (loadable with Tree.load) and trees/<name>.svg; returns the SVG's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tree.save(folder / f"{name}.json")
    svg = folder / f"{name}.svg"
    svg.write_text(tree_svg(tree, title, describe))
    return svg


_ESM = """
function render({ model, el }) {
  const ns = "http://www.w3.org/2000/svg";
  const box = document.createElement("div");
  box.className = "azlib-tree";
  box.style.fontFamily = "sans-serif";
  const title = document.createElement("div");
  title.style.fontWeight = "bold";
  const controls = document.createElement("label");
  const slider = document.createElement("input");
  slider.type = "range";
  slider.min = -1;
  const stepLabel = document.createElement("span");
  controls.append("search step ", slider, stepLabel);
  const row = document.createElement("div");
  row.style.display = "flex";
  row.style.gap = "12px";
  const svg = document.createElementNS(ns, "svg");
  const panel = document.createElement("pre");
  panel.className = "azlib-tree-details";
  svg.style.flex = "none";
  panel.style.cssText = "flex:1;min-width:220px;max-height:460px;overflow:auto;font-size:11px;white-space:pre-wrap;margin:0";
  row.append(svg, panel);
  box.append(title, controls, row);
  el.appendChild(box);

  function draw() {
    const nodes = model.get("nodes");
    const step = model.get("step");
    title.textContent = model.get("title");
    slider.max = model.get("max_step");
    slider.value = step;
    stepLabel.textContent = ` ${step} / ${model.get("max_step")}`;
    svg.setAttribute("width", model.get("width"));
    svg.setAttribute("height", model.get("height"));
    svg.replaceChildren();
    const shown = nodes.filter((n) => n.born <= step);
    for (const n of shown) {
      if (n.parent < 0) continue;
      const p = nodes[n.parent];
      const line = document.createElementNS(ns, "line");
      line.setAttribute("x1", p.x); line.setAttribute("y1", p.y);
      line.setAttribute("x2", n.x); line.setAttribute("y2", n.y);
      line.setAttribute("stroke", "#999");
      svg.appendChild(line);
    }
    for (const n of shown) {
      const c = document.createElementNS(ns, "circle");
      c.setAttribute("cx", n.x); c.setAttribute("cy", n.y); c.setAttribute("r", n.r);
      c.setAttribute("fill", n.color);
      c.setAttribute("class", "azlib-node");
      c.setAttribute("stroke", n.id === model.get("selected") ? "blue" : (n.terminal ? "black" : "none"));
      c.setAttribute("stroke-width", 2);
      c.style.cursor = "pointer";
      c.addEventListener("click", () => { model.set("selected", n.id); model.save_changes(); });
      svg.appendChild(c);
    }
    const sel = nodes[model.get("selected")];
    panel.textContent = sel ? `node ${sel.id}: ${sel.label}\\n${sel.details}` : "click a node";
  }
  slider.addEventListener("input", () => { model.set("step", Number(slider.value)); model.save_changes(); });
  for (const name of ["nodes", "step", "selected", "title"]) model.on(`change:${name}`, draw);
  draw();
}
export default { render };
"""


class TreeWidget(anywidget.AnyWidget):
    """Interactive tree for JupyterLab 4 / ipywidgets 8; all JavaScript is inline (no CDN)."""

    _esm = _ESM
    nodes = traitlets.List().tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    max_step = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Int(0).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    width = traitlets.Int(640).tag(sync=True)
    height = traitlets.Int(460).tag(sync=True)

    def __init__(self, tree: Tree, title: str = "", describe: Describe = describe_node, **kwargs):
        last = max(n.expanded_at for n in tree.nodes)
        super().__init__(title=title, max_step=last, step=last, **kwargs)
        self.nodes = drawing(tree, describe, self.width, self.height)
