"""The run folder: the one place where a run's config, metrics and figures are written, and its page (index.md).
JSON writes are atomic (temp file + rename): an interrupted run never leaves half a metrics.json."""

from __future__ import annotations

import base64
import json
import math
import platform
import re
import shutil
import subprocess
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from azlib.paths import REPO_ROOT, atomic_write_text, repo_path, saved_checkpoints

def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete or repair it") from None


RECORDED_PACKAGES = ("azlib", "torch", "transformers", "numpy", "papermill", "peft")
RUNNER = "azlib run"  # config.json's launched_by in a batch run's folder; "notebook" in an interactive run's


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def git_commit() -> str:
    """HEAD's hash, with "+dirty" when the working tree has changes; "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode:
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class RunFolder:
    """outputs/<run-id>/: config.json, metrics.json (one section per notebook), figures/, index.md."""

    def __init__(self, path: str | Path):
        self.path = repo_path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config_path = self.path / "config.json"
        self.metrics_path = self.path / "metrics.json"
        self.figures_dir = self.path / "figures"
        self.started = time.time()  # an interactive notebook's minutes on its page count from here

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
        """Save a matplotlib figure as figures/<name>.png, its title in the PNG's Title text (the page's caption);
        return the path."""
        self.figures_dir.mkdir(exist_ok=True)
        path = self.figures_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Title": figure_title(fig)})
        return path


def saved_title(png: Path) -> str:
    """The Title text of a PNG that save_figure wrote ("" when it has none)."""
    from PIL import Image

    with Image.open(png) as image:
        return image.text.get("Title", "")


def figure_title(fig) -> str:
    """A matplotlib figure's suptitle, else its axes' titles joined by "; "."""
    if suptitle := " ".join(fig.get_suptitle().split()):
        return suptitle
    return "; ".join(" ".join(ax.get_title().split()) for ax in fig.axes if ax.get_title().strip())


def finish_notebook(run: RunFolder, notebook: str, params: BaseModel) -> None:
    """An interactive notebook's last cell: record in config.json its parameters, its status (ok: the cells above
    ran) and minutes since `run` was made, with the commit and versions, then write the folder's page (index.md)
    as `azlib run` does, and print where it is. In a folder of `azlib run`, the runner records the notebook and
    writes the page when its notebooks end: nothing is written here then."""
    config = read_json(run.config_path) if run.config_path.exists() else {}
    if config.get("launched_by") == RUNNER:
        print(f"the run's page is written by `{RUNNER}` when its notebooks end: {_shown(run.path / PAGE)}")
        return
    now = time.time()
    config.setdefault("launched_by", "notebook")
    config.setdefault("profile", None)
    config.setdefault("run_dir", str(run.path))
    config.setdefault("created", datetime.fromtimestamp(run.started, timezone.utc).isoformat(timespec="seconds"))
    config |= {"git_commit": git_commit(), "versions": versions()}
    config.setdefault("notebooks", {})[notebook] = params.model_dump()
    config.setdefault("status", {})[notebook] = {
        "status": "ok", "seconds": round(now - run.started, 1),
        "finished": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")}
    write_json(run.config_path, config)
    print(f"this run's page (parameters, numbers, figures): {_shown(write_page(run.path))}")


def _shown(path: Path) -> str:
    """A path as printed in a notebook's output: from the repo root when under it (outputs stay machine-free)."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


PAGE = "index.md"
PAGE_FIGURES = "index_files"  # the executed notebooks' figures, taken out of their outputs for the page
PAGE_OPEN_ROWS = 40  # a notebook's numbers are shown as a table up to this many, folded beyond


def write_page(folder: str | Path) -> Path:
    """index.md in a run folder (config.json's notebooks, in run order): how the run was launched (`azlib run`'s
    profile and `--set` assignments, or a notebook run in JupyterLab), its commit; per notebook its status and
    minutes, its environment overrides, a link to the executed copy, its verdict once and every other number it
    recorded in metrics.json, its figures with captions, and the trees it saved (trees/<its number>_*.svg).
    A figure the notebook saved (RunFolder.save_figure) is shown from figures/, captioned with its name and title;
    one it only showed is taken out of the executed copy's outputs into index_files/, captioned with the heading
    above its cell. Markdown, so that JupyterLab, an editor or GitHub shows it with its pictures; the run's own
    record stays in its JSON."""
    run = RunFolder(folder)
    config = read_json(run.config_path)
    metrics = run.metrics()
    extracted = run.path / PAGE_FIGURES
    shutil.rmtree(extracted, ignore_errors=True)  # the figures of the notebooks as they last ran, no others
    statuses = config.get("status", {})
    overrides = config.get("env_overrides", {})
    ok = sum(s["status"] == "ok" for s in statuses.values())
    if config.get("launched_by") == "notebook":
        launched = "Run in JupyterLab (each notebook's parameters cell as it stood)"
    else:
        profile = config.get("profile") or "none (the parameters cells’ defaults)"
        launched = f"Run by `{RUNNER}`, profile **{profile}**"
    lines = [f"# Run {run.path.name}", "",
             f"{launched}, commit `{config.get('git_commit', 'unknown')}`, started "
             f"{config.get('created', 'at an unknown time')}: {ok} of {len(statuses)} notebooks ran to the end. "
             "Every notebook's parameters are in [config.json](config.json), its numbers in "
             "[metrics.json](metrics.json)."]
    if assigned := config.get("set"):
        lines += ["", "Set on the command line (`--set`, over the profile, for every notebook): "
                  + ", ".join(f"`{k}={_yaml(v)}`" for k, v in assigned.items()) + "."]
    lines += ["", "| notebook | status | minutes |", "|---|---|---|"]
    lines += [f"| [{stem}](#{stem}) | {_cell(s['status'])} | {s['seconds'] / 60:.1f} |" for stem, s in statuses.items()]
    for stem, s in statuses.items():
        numbers = metrics.get(stem, {})
        executed = run.path / f"{stem}.ipynb"
        where = (f"[the executed notebook]({stem}.ipynb)" if executed.is_file()
                 else f"run interactively from notebooks/{stem}.ipynb")
        # a notebook run at another commit than the page's (a folder joined by a later run) says its own
        ran_at = s.get("git_commit", config.get("git_commit"))
        at = f" at commit `{ran_at}`" if ran_at != config.get("git_commit") else ""
        lines += ["", f"## {stem}", "", f"{_cell(s['status'])}, {s['seconds'] / 60:.1f} minutes{at}: {where}."]
        if env := overrides.get(stem):
            lines += ["", "Environment overrides (over the profile): "
                      + ", ".join(f"`{k}={v}`" for k, v in env.items()) + "."]
        if numbers.get("verdict"):
            lines += ["", *(f"> {line}" for line in str(numbers["verdict"]).splitlines())]
        rows = {k: v for k, v in numbers.items() if k != "verdict"}  # the verdict is quoted above, once
        table = ["| metric | value |", "|---|---|", *(f"| {k} | {_cell(_number(v))} |" for k, v in rows.items())]
        if len(rows) > PAGE_OPEN_ROWS:
            lines += ["", f"<details><summary>{len(rows)} numbers recorded (metrics.json)</summary>", "", *table,
                      "", "</details>"]
        elif rows:
            lines += ["", *table]
        if executed.is_file():
            pictures = _notebook_figures(executed, run, extracted, stem)
        else:
            pictures = _saved_figures(run, stem)
        for path, caption in pictures:
            lines += ["", f"![{Path(path).stem}]({path})", "", f"*{caption}*"]
        for tree in sorted((run.path / "trees").glob(f"{stem[:2]}_*.svg")):
            lines += ["", f"Searched tree [{tree.name}](trees/{tree.name}) (its JSON beside it opens in "
                      "azlib.viz.TreeWidget):", "", f"![{tree.stem}](trees/{tree.name})"]
    page = run.path / PAGE
    atomic_write_text(page, "\n".join(lines) + "\n")
    return page


_SAVED_NAME = re.compile(r"""save_figure\([^,()]+,\s*["']([^"'{}]+)["']""")


def _saved_caption(png: Path, fallback: str = "") -> str:
    title = saved_title(png) or fallback
    return f"Figure {png.stem}" + (f": {_inline(title)}" if title else "")


def _saved_figures(run: RunFolder, stem: str) -> list[tuple[str, str]]:
    """The figures a notebook saved (figures/<its number>_*.png), in the order saved, with their captions."""
    saved = sorted(run.figures_dir.glob(f"{stem[:2]}_*.png"), key=lambda p: (p.stat().st_mtime, p.name))
    return [(f"figures/{p.name}", _saved_caption(p)) for p in saved]


def _notebook_figures(notebook: Path, run: RunFolder, folder: Path, stem: str) -> list[tuple[str, str]]:
    """Every image/png output of an executed notebook, as (path on the page, caption): the k-th picture of a cell
    that saved figures by name is its k-th saved figure (figures/<name>.png); any other is written to
    folder/<stem>-cell<k>[-<n>].png, captioned with the heading above its cell."""
    found, heading = [], ""
    for k, cell in enumerate(read_json(notebook).get("cells", [])):
        source = "".join(cell.get("source", []))
        if cell.get("cell_type") == "markdown":
            heading = next((line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")), heading)
            continue
        pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
        names = _SAVED_NAME.findall(source)
        for n, png in enumerate(pngs):
            if n < len(names) and (saved := run.figures_dir / f"{names[n]}.png").is_file():
                found.append((f"figures/{saved.name}", _saved_caption(saved, heading)))
                continue
            name = f"{stem}-cell{k}" + (f"-{n + 1}" if len(pngs) > 1 else "") + ".png"
            folder.mkdir(exist_ok=True)
            (folder / name).write_bytes(base64.b64decode("".join(png) if isinstance(png, list) else png))
            under = f", under “{_inline(heading)}”" if heading else ""
            found.append((f"{PAGE_FIGURES}/{name}", f"Cell {k}{under}"))
    return found


def _yaml(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _inline(text: str) -> str:
    """Text that stays one line of Markdown emphasis."""
    return " ".join(str(text).split()).replace("*", "\\*")


def _number(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def trainings_in(run_folder: str | Path) -> dict[Path, Path]:
    """Every training under a run folder that has saved a checkpoint (notebook 04's train-04/, each of notebook
    05's arms): its folder -> its newest checkpoint."""
    found = {}
    for checkpoints in sorted(Path(run_folder).glob("**/checkpoints")):
        if saved := saved_checkpoints(checkpoints):
            found[checkpoints.parent] = saved[-1]
    return found
