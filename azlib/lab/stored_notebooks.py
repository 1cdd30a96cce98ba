"""The notebooks as the repository shows them, executed at their defaults with a record of what ran (code digest,
commit, minutes, peak memory), so a test can tell when the code moved on. Executing is azlib.lab.runner's."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from azlib.paths import atomic_write_text
from azlib.lab.run_folder import read_json

RECORD = "azlib"  # the notebook metadata key of the record
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Per-cell metadata an execution adds that says nothing a reader needs (timestamps, papermill's bookkeeping).
RUN_METADATA = ("papermill", "execution")
SIZE_BUDGET = 5_000_000  # bytes, all committed notebooks together


def code_cells(notebook: dict) -> list[dict]:
    """The notebook's own code cells that run, in order (papermill's injected-parameters cell is not the notebook's;
    an empty cell is never executed)."""
    return [c for c in notebook["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()
            and "injected-parameters" not in c.get("metadata", {}).get("tags", [])]


def code_digest(notebook: dict) -> str:
    """sha256 over the code cells' sources in order: what decides the outputs (markdown does not)."""
    digest = hashlib.sha256()
    for cell in code_cells(notebook):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        digest.update(source.encode() + b"\0")
    return digest.hexdigest()


def _static(output: dict) -> dict | None:
    """An output as a reader without a kernel sees it: a widget's live view goes (its model is not stored), its
    still picture stays (azlib.viz.static); a widget with none (a progress bar, whose text is its first state) goes
    whole; a figure is stored in 256 colours."""
    data = output.get("data")
    if not data:
        return output
    if WIDGET_VIEW in data and set(data) <= {WIDGET_VIEW, "text/plain"}:
        return None
    data = {k: _small_png(v) if k == "image/png" else v for k, v in data.items() if k != WIDGET_VIEW}
    return output | {"data": data}


def _small_png(encoded: str | list[str]) -> str:
    """A plot's PNG in 256 colours on white (about a third of the bytes; a plot has few colours to lose)."""
    picture = Image.open(io.BytesIO(base64.b64decode("".join(encoded)))).convert("RGBA")
    flat = Image.alpha_composite(Image.new("RGBA", picture.size, "white"), picture).convert("RGB")
    out = io.BytesIO()
    flat.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, format="PNG", optimize=True)
    return base64.b64encode(out.getvalue()).decode()


def store(executed: Path, target: Path, record: dict[str, Any]) -> None:
    """Put an executed copy's outputs into the committed notebook `target`, cell by cell, with `record` (commit,
    profile, minutes, peak memory) and the code's digest in its metadata. The target's markdown is kept as it is
    now; its code must be the code that ran, or nothing is written."""
    ran, shown = read_json(executed), read_json(target)
    ran_cells, shown_cells = code_cells(ran), code_cells(shown)
    if code_digest(ran) != code_digest(shown):
        raise ValueError(f"{target}'s code changed while {executed} ran: run it again")
    for cell, done in zip(shown_cells, ran_cells):
        cell["outputs"] = [output for output in map(_static, done["outputs"]) if output is not None]
        cell["execution_count"] = done["execution_count"]
        for key in RUN_METADATA:
            cell.get("metadata", {}).pop(key, None)
    shown["metadata"].pop("widgets", None)  # the live widgets' state: their static pictures are in the outputs
    shown["metadata"][RECORD] = {"executed": record | {"code_sha256": code_digest(shown)}}
    atomic_write_text(target, _dumps(shown))


def drift(path: Path) -> list[str]:
    """What is wrong with a committed notebook's outputs, empty when they are the outputs of its code: a record,
    a matching digest, every code cell run once in order, no error."""
    notebook = read_json(path)
    record = notebook.get("metadata", {}).get(RECORD, {}).get("executed")
    if not record:
        return [f"{path.name} has no record of an execution (make notebooks)"]
    problems = []
    if record.get("code_sha256") != code_digest(notebook):
        problems.append(f"{path.name}'s code differs from the code that made its outputs (make notebooks ONLY="
                        f"{path.name[:2]})")
    counts = [c.get("execution_count") for c in code_cells(notebook)]
    if counts != sorted(c for c in counts if c is not None) or None in counts:
        problems.append(f"{path.name}: code cells not all run, in order (execution counts {counts})")
    errors = [i for i, c in enumerate(notebook["cells"]) for o in c.get("outputs", []) if o["output_type"] == "error"]
    if errors:
        problems.append(f"{path.name}: cells {errors} show an error")
    return problems


def _dumps(notebook: dict) -> str:
    """nbformat's layout (indent 1, keys sorted, unicode as is), so a stored notebook diffs like a saved one."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
