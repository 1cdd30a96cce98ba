"""Notebook 02 in a real JupyterLab, in headless Chromium: the tree widgets render and respond to clicks, the
slider replays the game search (a node's N after k simulations is the N of the same search stopped at k, run here),
pruning draws fewer nodes, the tic-tac-toe board answers a click with the net's move, with no 'Error displaying
widget'. And notebook 03's tree, coloured by right/wrong and by proposer from the widget's menu. Needs Debian's
chromium (.ci/run installs it)."""

import json
import random
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nbformat
import papermill
import pytest

from azlib.lab import config
from azlib.mcts import search
from azlib.games import tictactoe
from azlib.settings import SearchSettings

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    assert Path(CHROMIUM).exists(), "install Debian's chromium (apt-get install chromium) for this test"
    root = tmp_path_factory.mktemp("lab")
    source = config.NOTEBOOKS_DIR / "02_mcts_tree.ipynb"
    params, _ = config.resolve(source, "smoke", root / "run")
    papermill.execute_notebook(str(source), str(root / "02_mcts_tree.ipynb"), parameters=params.model_dump(),
                               prepare_only=True, kernel_name="python3", progress_bar=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=subprocess.DEVNULL, stderr=open(root / "lab.log", "w"), cwd=config.REPO_ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            if server.poll() is not None:
                break
            try:
                if httpx.get(f"{url}/api/status", params={"token": token}, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"JupyterLab did not start: {(root / 'lab.log').read_text()[-2000:]}")
        yield url, token, root, params
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_tree_widgets_render_and_respond_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    params = lab[3]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            run_all_cells(page, lab, "02_mcts_tree.ipynb", 2, tmp_path, timeout_ms=900_000)
            page.screenshot(path=str(tmp_path / "notebook02.png"), full_page=True)

            assert "Error displaying widget" not in page.content()
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                                ":text('Traceback')").count() == 0
            check_game_replay_and_pruning(page, page.locator(".azlib-tree").nth(0), params)
            text_tree = page.locator(".azlib-tree").nth(1)
            assert text_tree.locator("circle.azlib-node").count() > 3
            node = text_tree.locator("circle.azlib-node").nth(2)
            node.click()
            wait_for_text(page, text_tree.locator(".azlib-tree-details"), f"node {node.get_attribute('data-id')}:")
            assert "answer so far" in text_tree.locator(".azlib-tree-details").text_content()
            page.screenshot(path=str(tmp_path / "notebook02-clicked.png"))
            check_play_tictactoe(page, page.locator(".azlib-tictactoe").first)
        finally:
            browser.close()
    print(f"screenshots in {tmp_path}")


def test_notebook_03s_tree_is_coloured_by_branch_and_by_proposer_in_the_browser(lab, tmp_path):
    """Notebook 03's kind of tree (right and wrong children from two teachers and the student), shown by its widget
    call: coloured by right/wrong, a right and a wrong child differ and the right ones agree; the menu's "proposer"
    recolours them (the tutor's right and wrong child then agree, the student's differs). A few seconds."""
    from playwright.sync_api import sync_playwright
    from test_tree_view import teacher_tree  # 1 tutor right, 2 tutor wrong, 3 student on the right branch, 5 below 1

    root = lab[2]
    (root / "teacher_tree.json").write_text(json.dumps(teacher_tree().to_json()))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import json\nfrom azlib.mcts import Tree\nfrom azlib.viz import TEXT_KINDS, TreeWidget, describe_text_node\n"
        "TreeWidget(Tree.from_json(json.load(open('teacher_tree.json'))), 'notebook 03', describe_text_node,\n"
        "           colourings=TEXT_KINDS, colour='right/wrong')")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "teacher_tree.ipynb")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            run_all_cells(page, lab, "teacher_tree.ipynb", 1, tmp_path, timeout_ms=120_000)
            assert "Error displaying widget" not in page.content()
            tree = page.locator(".azlib-tree").first

            def fills() -> dict[int, str]:
                nodes = tree.locator("circle.azlib-node")
                return {int(nodes.nth(k).get_attribute("data-id")): nodes.nth(k).get_attribute("fill")
                        for k in range(nodes.count())}

            by_branch = fills()
            assert set(by_branch) == {0, 1, 2, 3, 5}, "the three most visited children of the question, and 5 below 1"
            assert by_branch[1] == by_branch[3] == by_branch[5] != by_branch[2], "right children share a colour"
            assert {"right (1)", "wrong (0)"} <= set(tree.locator(".azlib-legend text").all_text_contents())
            tree.locator("select.azlib-tree-colour").select_option("proposer")
            wait_for_text(page, tree, "http-tutor + student")  # the legend of the redrawn tree
            by_proposer = fills()
            assert by_proposer[1] == by_proposer[2] != by_proposer[3], "the tutor's two children, the student's one"
            assert by_proposer[5] not in (by_proposer[1], by_proposer[3]), "a chunk both proposed is a kind of its own"
            assert by_proposer != by_branch
            page.screenshot(path=str(tmp_path / "notebook03-tree.png"))
        finally:
            browser.close()


def run_all_cells(page, lab, notebook: str, trees: int, tmp_path, timeout_ms: int) -> None:
    """Open a notebook in JupyterLab, alone in a fresh workspace of its own (no tab restored from an earlier session),
    run all its cells from the menu, and wait until `trees` tree widgets are shown and the kernel is idle (a
    screenshot and the stderr outputs on failure)."""
    url, token = lab[:2]
    page.goto(f"{url}/lab/workspaces/{Path(notebook).stem}/tree/{notebook}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    idle = ("[...document.querySelectorAll('.jp-Notebook-ExecutionIndicator')]"
            ".some(e => e.dataset.status === 'idle' && e.checkVisibility())")  # the open notebook's, not a hidden one
    page.wait_for_function(idle, timeout=120_000)
    started = "[...document.querySelectorAll('.jp-InputPrompt')].some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"
    for _ in range(10):  # on a fresh install the kernel can connect after the page says idle
        page.wait_for_timeout(2000)
        dialogs = page.locator(".jp-Dialog")  # a dialog JupyterLab opens at start blocks the menu
        accept = page.locator(".jp-Dialog .jp-mod-accept")
        if accept.count():
            accept.first.click()
        elif dialogs.count():
            page.keyboard.press("Escape")
        try:
            page.get_by_role("menuitem", name="Run", exact=True).click(timeout=10_000)
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click(timeout=10_000)
            page.wait_for_function(started, timeout=15_000)
            break
        except Exception:
            continue
    try:
        page.wait_for_function(f"document.querySelectorAll('.azlib-tree').length >= {trees}", timeout=timeout_ms)
    except Exception:
        page.screenshot(path=str(tmp_path / "timeout.png"), full_page=True)
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        pytest.fail(f"widgets did not appear (screenshot in {tmp_path}); stderr outputs: "
                    f"{[errors.nth(i).text_content()[-500:] for i in range(errors.count())]}")
    page.wait_for_function(idle, timeout=timeout_ms)


def wait_for_text(page, locator, text: str) -> None:
    page.wait_for_function("([el, text]) => el.textContent.includes(text)", arg=[locator.element_handle(), text],
                           timeout=20_000)


def check_game_replay_and_pruning(page, game_tree, params) -> None:
    """Slider to step k: the root's most visited child shows the N that the notebook's search stopped after k
    simulations gives it (run here, independently of the widget). Then "top 1" draws fewer nodes than "visited"."""
    step = 9
    short_config = SearchSettings(num_simulations=step, max_depth=9, rule=params.search.rule, c=params.search.c,
                                temperature=0)  # the notebook's game search, stopped after `step` simulations
    (short,) = search(tictactoe.TicTacToe(), [params.ttt_position], short_config, random.Random(params.seed))
    child = max(short.tree.root.children, key=lambda c: short.tree.nodes[c].visits)
    game_tree.locator("input.azlib-tree-step").evaluate(
        f"el => {{ el.value = {step}; el.dispatchEvent(new Event('input')); }}")
    wait_for_text(page, game_tree, f"after {step} of {params.ttt_simulations} simulations")  # the svg is replaced
    game_tree.locator(f"circle.azlib-node[data-id='{child}']").click()
    details = game_tree.locator(".azlib-tree-details")
    wait_for_text(page, details, f"node {child}:")
    shown = int(re.search(r"\nN (\d+) ", details.text_content()).group(1))
    assert shown == short.tree.nodes[child].visits, details.text_content()
    assert "Q + U" in details.text_content()

    show = game_tree.locator("select.azlib-tree-show")
    show.select_option("visited")
    wait_for_text(page, game_tree, "the visited children")
    visited = game_tree.locator("circle.azlib-node").count()
    show.select_option("1")
    wait_for_text(page, game_tree, "the 1 most visited children")
    assert 0 < game_tree.locator("circle.azlib-node").count() < visited


def check_play_tictactoe(page, board) -> None:
    """A click on the centre: an X there, the net's O on another square, and the board asks for the next move."""
    squares = board.locator(".azlib-square")
    assert squares.count() == 9
    squares.nth(4).click()
    page.wait_for_function("el => [...el.querySelectorAll('.azlib-square')].filter(b => b.textContent.trim() === 'O')"
                           ".length === 1", arg=board.element_handle(), timeout=60_000)
    marks = [squares.nth(i).text_content().strip() for i in range(9)]
    assert marks[4] == "X" and marks.count("X") == 1 and marks.count("O") == 1
    wait_for_text(page, board, "your move")
    wait_for_text(page, board, "The net's last move: square")
