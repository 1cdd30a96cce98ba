"""The run folder: the one place where a run's config, metrics and figures are written.
JSON writes are atomic (temp file + rename): an interrupted run never leaves half a metrics.json."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from azlib.paths import repo_path


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

    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.json"

    @property
    def figures_dir(self) -> Path:
        return self.path / "figures"

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
