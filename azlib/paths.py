"""Where things are: the repository root, and paths from parameters resolved against it.
Nothing else: no parameters, no I/O."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def repo_path(path: str | Path) -> Path:
    """A path from params: absolute as given, relative ones under the repo root."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path
