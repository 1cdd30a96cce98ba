"""The library's import layering: azlib's modules import only from their own layer and those below it (LAYERS, as
docs/library.md's layout draws them), without a circle (module-level and function-level imports alike), and
`import azlib.lab.config`, the notebook-parameter schema, loads no model library."""

import ast
import subprocess
import sys
from pathlib import Path

from azlib.paths import REPO_ROOT

AZLIB = REPO_ROOT / "azlib"
MODEL_LIBRARIES = ("torch", "transformers", "peft", "accelerate", "vllm", "datasets")

# From the top; a module belongs to the layer of its longest matching prefix.
LAYERS = {
    "the lab": ("azlib.lab", "azlib.__main__"),
    "figures": ("azlib.viz",),
    "training and comparisons": ("azlib.training", "azlib.games.text.explorers", "azlib.games.text.signals",
                                 "azlib.bandit", "azlib.rlt", "azlib.referee", "azlib.games.countdown.arms",
                                 "azlib.games.countdown.evaluate", "azlib.games.countdown.curves",
                                 "azlib.games.countdown.experiment"),
    "the update": ("azlib.grpo",),
    "search and games": ("azlib.mcts", "azlib.games", "azlib.teachers", "azlib.evaluation",
                         "azlib.step_check_precision"),
    "foundations": ("azlib", "azlib.models", "azlib.rewards", "azlib.data", "azlib.sampled_answer", "azlib.prompts",
                    "azlib.statistics", "azlib.parallel", "azlib.optional_packages", "azlib.paths", "azlib.settings"),
}


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its code (at the top, in a function, under a
    condition). `from azlib.x import y` is an edge to azlib.x.y when that is a module, else to azlib.x."""
    files = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    edges.add(submodule if submodule in files else node.module)
        graph[name] = {m for m in edges if m in files and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan), as a path back to its start."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or component_top != v:
                component_top = stack.pop()
                on_stack.discard(component_top)
                component.add(component_top)
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [circle_in(graph, component) for component in components]


def circle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    following.append(w)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def layer_of(module: str, layers: dict[str, tuple[str, ...]] = LAYERS) -> int:
    """The index of a module's layer (0 at the top): the layer of its longest matching prefix."""
    matches = [(len(prefix), i) for i, prefixes in enumerate(layers.values()) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]], layers: dict[str, tuple[str, ...]] = LAYERS) -> list[str]:
    """Every import of a module from a layer above its own."""
    return [f"{m} -> {e}" for m, edges in sorted(graph.items()) for e in sorted(edges)
            if layer_of(e, layers) < layer_of(m, layers)]


def test_azlib_has_no_import_circle():
    found = cycles(import_graph(AZLIB))
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_algorithm_module_imports_the_lab():
    """azlib.lab runs the notebooks around the algorithms; the search, games, models, rewards and updates run
    without it."""
    graph = import_graph(AZLIB)
    upward = {m: sorted(e for e in edges if e.startswith("azlib.lab")) for m, edges in graph.items()
              if not m.startswith("azlib.lab") and m != "azlib.__main__"}
    assert not {m: e for m, e in upward.items() if e}, upward


def test_no_module_imports_from_a_layer_above_its_own():
    upward = upward_imports(import_graph(AZLIB))
    assert not upward, "imports up a layer: " + "; ".join(upward)


def test_the_layer_check_finds_a_planted_upward_import():
    graph = {"azlib.grpo": {"azlib.sampled_answer"}, "azlib.games.text.signals": {"azlib.grpo"},
             "azlib.games.text.env": {"azlib.mcts.search"}, "azlib.mcts.search": set(), "azlib.sampled_answer": set()}
    assert upward_imports(graph) == []
    graph["azlib.mcts.search"] = {"azlib.games.text.signals"}  # the search reaching into a training signal
    graph["azlib.sampled_answer"] = {"azlib.viz.tree"}
    assert upward_imports(graph) == ["azlib.mcts.search -> azlib.games.text.signals",
                                     "azlib.sampled_answer -> azlib.viz.tree"]
    assert layer_of("azlib.games.countdown.arms") < layer_of("azlib.games.countdown.play") == layer_of("azlib.games")


def test_the_settings_import_no_azlib_module():
    """azlib.settings is the layer every component reads its settings type from, models and rewards included, so
    it imports none of them."""
    assert import_graph(AZLIB)["azlib.settings"] == set()


def test_the_circle_finder_finds_a_planted_circle(tmp_path):
    package = tmp_path / "azlib"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from azlib.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from azlib import c\n")  # a function-level edge
    (package / "c.py").write_text("import azlib.a\n")
    (package / "d.py").write_text("from azlib.a import f\n")  # into the circle, not on it
    assert cycles(import_graph(package)) == [["azlib.a", "azlib.sub.b", "azlib.c", "azlib.a"]]
    (package / "c.py").write_text("x = 1\n")
    assert cycles(import_graph(package)) == [], "a line, not a circle"


def test_importing_the_config_loads_no_model_library():
    code = ("import sys, azlib.lab.config; "
            f"print(' '.join(m for m in {MODEL_LIBRARIES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.split() == [], f"import azlib.lab.config loads {out.stdout.strip()}"
