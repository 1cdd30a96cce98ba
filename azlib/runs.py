"""The run folder: the one place where a run's config, metrics and figures are written, and its page (index.md).
JSON writes are atomic (temp file + rename): an interrupted run never leaves half a metrics.json."""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from azlib.paths import repo_path

CHECKPOINT_PREFIX = "step-"  # a training's checkpoints/step-NNNNNN folders


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete or repair it") from None


class RunFolder:
    """outputs/<run-id>/: config.json, metrics.json (one section per notebook), figures/."""

    def __init__(self, path: str | Path):
        self.path = repo_path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_path = self.path / "config.json"
        self.metrics_path = self.path / "metrics.json"
        self.figures_dir = self.path / "figures"

    def metrics(self) -> dict[str, dict[str, Any]]:
        return read_json(self.metrics_path) if self.metrics_path.exists() else {}

    def clear_metrics(self, notebook: str) -> None:
        """Forget a notebook's section before it runs again, so no stale key survives a rerun."""
        everything = self.metrics()
        if everything.pop(notebook, None) is not None:
            write_json(self.metrics_path, everything)

    def record_metrics(self, notebook: str, values: dict[str, Any]) -> None:
        """Merge `values` into metrics.json under `notebook` (flat: name -> number, string or null)."""
        bad = {k: type(v).__name__ for k, v in values.items() if not isinstance(v, (int, float, str, bool, type(None)))}
        if bad:
            raise TypeError(f"metrics must be flat numbers, strings or None; not {bad}")
        # JSON has no inf or nan: an unreached threshold or an undefined ratio is recorded as null.
        values = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}
        everything = self.metrics()
        everything.setdefault(notebook, {}).update(values)
        write_json(self.metrics_path, everything)

    def save_figure(self, fig, name: str) -> Path:
        """Save a matplotlib figure as figures/<name>.png and return the path."""
        self.figures_dir.mkdir(exist_ok=True)
        path = self.figures_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        return path


PAGE = "index.md"
PAGE_FIGURES = "index_files"  # the executed notebooks' figures, taken out of their outputs for the page
PAGE_OPEN_ROWS = 40  # a notebook's numbers are shown as a table up to this many, folded beyond


def write_page(folder: str | Path) -> Path:
    """index.md in a run folder (config.json's notebooks, in run order): per notebook its status and time, a link
    to the executed copy, its verdict and every number it recorded in metrics.json, the figures it showed (its
    image/png outputs, written to index_files/) and the trees it saved (trees/<its number>_*.svg). Markdown, so
    that JupyterLab, an editor or GitHub shows it with its pictures; the run's own record stays in its JSON."""
    run = RunFolder(folder)
    config = read_json(run.config_path)
    metrics = run.metrics()
    figures = run.path / PAGE_FIGURES
    shutil.rmtree(figures, ignore_errors=True)  # the figures of the notebooks as they last ran, no others
    statuses = config.get("status", {})
    ok = sum(s["status"] == "ok" for s in statuses.values())
    lines = [f"# Run {run.path.name}", "",
             f"Profile **{config.get('profile') or 'none (the parameters cells’ defaults)'}**, commit "
             f"`{config.get('git_commit', 'unknown')}`, started {config.get('created', 'at an unknown time')}: "
             f"{ok} of {len(statuses)} notebooks ran to the end. Every run's parameters are in "
             f"[config.json](config.json), its numbers in [metrics.json](metrics.json).", "",
             "| notebook | status | minutes |", "|---|---|---|"]
    lines += [f"| [{stem}](#{stem}) | {_cell(s['status'])} | {s['seconds'] / 60:.1f} |" for stem, s in statuses.items()]
    for stem, s in statuses.items():
        numbers = metrics.get(stem, {})
        lines += ["", f"## {stem}", "",
                  f"{_cell(s['status'])}, {s['seconds'] / 60:.1f} minutes: [the executed notebook]({stem}.ipynb)."]
        if numbers.get("verdict"):
            lines += ["", *(f"> {line}" for line in str(numbers["verdict"]).splitlines())]
        table = ["| metric | value |", "|---|---|", *(f"| {k} | {_cell(_number(v))} |" for k, v in numbers.items())]
        if len(numbers) > PAGE_OPEN_ROWS:
            lines += ["", f"<details><summary>{len(numbers)} numbers recorded (metrics.json)</summary>", "", *table,
                      "", "</details>"]
        elif numbers:
            lines += ["", *table]
        for name in _extract_figures(run.path / f"{stem}.ipynb", figures, stem):
            lines += ["", f"![{name}]({PAGE_FIGURES}/{name})"]
        for tree in sorted((run.path / "trees").glob(f"{stem[:2]}_*.svg")):
            lines += ["", f"Searched tree [{tree.name}](trees/{tree.name}) (its JSON beside it opens in "
                      "azlib.viz.TreeWidget):", "", f"![{tree.stem}](trees/{tree.name})"]
    page = run.path / PAGE
    atomic_write_text(page, "\n".join(lines) + "\n")
    return page


def _extract_figures(notebook: Path, folder: Path, stem: str) -> list[str]:
    """Write every image/png output of an executed notebook to folder/<stem>-cell<k>[-<n>].png; their names."""
    if not notebook.is_file():
        return []
    names = []
    for k, cell in enumerate(read_json(notebook).get("cells", [])):
        pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        for n, png in enumerate(pngs):
            name = f"{stem}-cell{k}" + (f"-{n + 1}" if len(pngs) > 1 else "") + ".png"
            folder.mkdir(exist_ok=True)
            (folder / name).write_bytes(base64.b64decode("".join(png) if isinstance(png, list) else png))
            names.append(name)
    return names


def _number(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def saved_checkpoints(folder: str | Path) -> list[Path]:
    """The whole checkpoints in a trainer's checkpoints/ folder, oldest step first (a partial one, still hidden
    under its staging name, is none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith(CHECKPOINT_PREFIX) and p.is_dir())


def checkpoint_step(checkpoint: Path) -> int:
    """The step a checkpoint folder (checkpoints/step-NNNNNN) was saved after."""
    return int(checkpoint.name.removeprefix(CHECKPOINT_PREFIX))


def trainings_in(run_folder: str | Path) -> dict[Path, Path]:
    """Every training under a run folder that has saved a checkpoint (notebook 04's train-04/, each of notebook
    05's arms): its folder -> its newest checkpoint."""
    found = {}
    for checkpoints in sorted(Path(run_folder).glob("**/checkpoints")):
        if saved := saved_checkpoints(checkpoints):
            found[checkpoints.parent] = saved[-1]
    return found
