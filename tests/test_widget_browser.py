"""Notebook 02 in a real JupyterLab, in headless Chromium: the tree widgets render and respond to
clicks, with no 'Error displaying widget'. Needs Debian's chromium (.ci/run installs it)."""

import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import papermill
import pytest

from azlib import config

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
        yield url, token, root
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_tree_widgets_render_and_respond_in_jupyterlab(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    url, token, root = lab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/lab/tree/02_mcts_tree.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
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
                page.wait_for_function("document.querySelectorAll('.azlib-tree').length >= 2", timeout=900_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "timeout.png"), full_page=True)
                errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                pytest.fail(f"widgets did not appear (screenshot in {tmp_path}); stderr outputs: "
                            f"{[errors.nth(i).text_content()[-500:] for i in range(errors.count())]}")
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=600_000)
            page.screenshot(path=str(tmp_path / "notebook02.png"), full_page=True)

            assert "Error displaying widget" not in page.content()
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                                ":text('Traceback')").count() == 0
            text_tree = page.locator(".azlib-tree").nth(1)
            assert text_tree.locator("circle.azlib-node").count() > 3
            details = text_tree.locator(".azlib-tree-details")
            text_tree.locator("circle.azlib-node").nth(2).click()
            page.wait_for_function("el => el.textContent.startsWith('node 2')", arg=details.element_handle(),
                                   timeout=10_000)
            assert "answer so far" in details.text_content()
            page.screenshot(path=str(tmp_path / "notebook02-clicked.png"))
        finally:
            browser.close()
    print(f"screenshots in {tmp_path}")
