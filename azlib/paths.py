"""Where things are and how a file is put there: the repository root, paths from parameters resolved against it,
a write that leaves a file whole or absent, and a training's checkpoint folders. No parameters."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def repo_path(path: str | Path) -> Path:
    """A path from params: absolute as given, relative ones under the repo root."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


CHECKPOINT_PREFIX = "step-"  # a training's checkpoints/step-NNNNNN folders


class CheckpointError(RuntimeError):
    """A checkpoint is missing a file or does not load, or a training folder is not the run asked for."""


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


def saved_checkpoints(folder: str | Path) -> list[Path]:
    """The whole checkpoints in a trainer's checkpoints/ folder (step-NNNNNN), oldest step first (a partial one, still
    hidden under its staging name, is none; nor is a folder of another name)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.name.startswith(CHECKPOINT_PREFIX) and p.name[len(CHECKPOINT_PREFIX):].isdigit() and p.is_dir())


def checkpoint_step(checkpoint: Path) -> int:
    """The step a checkpoint folder (checkpoints/step-NNNNNN) was saved after."""
    return int(checkpoint.name.removeprefix(CHECKPOINT_PREFIX))
