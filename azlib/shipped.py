"""The results the repository ships (`benchmarks/results/`), read back with the settings that wrote them: each
folder holds its answers and a `provenance.json`. Reads only; training and evaluating are azlib.experiment's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from azlib.config import resolve_library
from azlib.experiment import Experiment, task_sets
from azlib.paths import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# notebook 05's experiment with every arm over three seeds (benchmarks/tree_vs_sampling.py --mode all)
TREE_VS_SAMPLING = RESULTS_DIR / "tree-vs-sampling-all"


@dataclass(frozen=True)
class Provenance:
    """A shipped folder's `provenance.json`: what wrote it (command, commit, machine), and how to read it back
    (the notebook's parameters under `profile` with the `set` assignments, `azlib run --set`'s form)."""

    command: str
    commit: str
    machine: str
    notebook: str
    profile: str
    set: tuple[str, ...]
    experiment: str  # the experiment's folder inside the shipped folder

    @property
    def label(self) -> str:
        """How a figure of these results is labelled."""
        return f"shipped: {self.command}, commit {self.commit}"


def provenance(folder: Path | str) -> Provenance:
    path = Path(folder) / "provenance.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a shipped results folder says what wrote it and how to read it "
                                "(command, commit, machine, notebook, profile, set, experiment)")
    recorded = json.loads(path.read_text())
    missing = sorted(set(Provenance.__dataclass_fields__) - set(recorded))
    if missing:
        raise ValueError(f"{path} lacks {missing}")
    return Provenance(**{**recorded, "set": tuple(recorded["set"])})


def shipped_experiment(folder: Path | str = TREE_VS_SAMPLING) -> tuple[Experiment, Provenance]:
    """A shipped experiment folder read back (nothing trained), and its provenance. The held-out problems are drawn
    again from the recorded settings and must be the ones the folder answered (`Experiment` checks their ids)."""
    folder = Path(folder)
    made = provenance(folder)
    params, _ = resolve_library(made.notebook, made.profile, folder, made.set)
    problems, sets, _ = task_sets(params)
    return Experiment(params, problems, sets, folder / made.experiment).load(), made
