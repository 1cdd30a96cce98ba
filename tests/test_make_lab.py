"""`make lab`: the README's quick start opens JupyterLab at notebook 01. Runs the make target itself (in the test's
own environment, which make must not rebuild), waits for the server, asks it for notebook 01, and stops it."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from azlib.lab import config

NOTEBOOK = "notebooks/01_toy_bandit_grpo.ipynb"
SERVED = "01_toy_bandit_grpo.ipynb"  # given a file, JupyterLab serves the file's folder and opens the file
START_SECONDS = 120


def _make_lab_command(port: int, token: str) -> list[str]:
    lab_args = " ".join([
        "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ])
    return ["make", "--no-print-directory", "lab", f"VENV={sys.prefix}", f"LAB_ARGS={lab_args}"]


@pytest.mark.slow
def test_make_lab_serves_notebook_01(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    command = _make_lab_command(port, token)

    # What make would run: only JupyterLab, never a venv or pip (the environment's .installed stamp is current).
    dry = subprocess.run([*command[:2], "-n", *command[2:]], cwd=config.REPO_ROOT, capture_output=True, text=True,
                         check=True).stdout
    if "pip install" in dry or "-m venv" in dry:
        pytest.skip(f"make would rebuild {sys.prefix} (its .installed is older than pyproject.toml)")
    assert dry.strip().splitlines() == [
        f"{sys.prefix}/bin/python -m jupyter lab {NOTEBOOK} {command[-1].removeprefix('LAB_ARGS=')}"]

    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        lab = subprocess.Popen(command, cwd=config.REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)  # its own group: make and the server it starts stop together
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"token {token}"}
    try:
        deadline = time.monotonic() + START_SECONDS
        contents = None
        while time.monotonic() < deadline and lab.poll() is None:
            try:
                contents = httpx.get(f"{url}/api/contents/{SERVED}", params={"content": 0}, headers=headers,
                                     timeout=5)
                break
            except httpx.HTTPError:
                time.sleep(1)
        assert contents is not None, f"JupyterLab did not answer within {START_SECONDS} s: {log.read_text()[-2000:]}"
        assert contents.status_code == 200, contents.text
        assert contents.json()["type"] == "notebook"
        assert contents.json()["path"] == SERVED
        page = httpx.get(f"{url}/lab/tree/{SERVED}", headers=headers, timeout=10)
        assert page.status_code == 200
        assert httpx.get(f"{url}/api/contents/{SERVED}", timeout=5).status_code == 403  # the token is required
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
            pytest.fail(f"make lab did not stop on SIGTERM: {log.read_text()[-2000:]}")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/api/status", timeout=5)
