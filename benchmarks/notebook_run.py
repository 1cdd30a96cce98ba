"""What the notebook-run benchmarks share: run one notebook through the runner under a profile into a
run folder, and read back its metrics and the wall time. Not a benchmark itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from azlib.paths import REPO_ROOT


def default_out(name: str) -> Path:
    return REPO_ROOT / "outputs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_notebook(number: str, stem: str, out: Path, profile: str = "cpu") -> tuple[dict, float]:
    """(the notebook's metrics, minutes of wall time) of `python -m azlib run --only <number>`."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "azlib", "run", "--profile", profile, "--only", number, "--out", str(out)],
                   check=True, cwd=REPO_ROOT)
    minutes = (time.perf_counter() - start) / 60
    return json.loads((out / "metrics.json").read_text())[stem], minutes
