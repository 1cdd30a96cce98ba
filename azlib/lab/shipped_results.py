"""The results the repository ships (`benchmarks/results/`), each folder read back with its `provenance.json`. Reads
only: running and training are azlib.lab.runner's and azlib.lab.tree_vs_sampling's."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from azlib.lab import config
from azlib.lab.config import resolve, resolve_library
from azlib.lab.tree_vs_sampling import Experiment, task_sets
from azlib.paths import REPO_ROOT
from azlib.lab.run_folder import read_json

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# notebook 05's experiment with every arm over three seeds (benchmarks/tree_vs_sampling.py --mode all)
TREE_VS_SAMPLING = RESULTS_DIR / "tree-vs-sampling-all"
# notebook 03's, 04's and 06's numbers under the cpu profile (azlib run --profile cpu), each its metrics.json section
TEACHER_ENSEMBLE = RESULTS_DIR / "teacher-ensemble-cpu"
TRAINING = RESULTS_DIR / "training-cpu"
RLT = RESULTS_DIR / "rlt-cpu"
# notebook 08's comparison under the cpu profile (benchmarks/countdown_alphazero.py), azlib.games.countdown's summary
COUNTDOWN = RESULTS_DIR / "countdown-cpu"
# notebook 08's test-time curves at 4 numbers (benchmarks/countdown_search_curves.py), no profile's run
COUNTDOWN_CURVES = RESULTS_DIR / "countdown-curves"


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
    results: str  # what the folder ships, inside it: an experiment's folder, or a run's metrics.json

    @property
    def label(self) -> str:
        """How a figure of these results is labelled."""
        return f"shipped: {self.command}, commit {self.commit}"


def provenance(folder: Path | str) -> Provenance:
    path = Path(folder) / "provenance.json"
    names = [f.name for f in fields(Provenance)]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a shipped results folder says what wrote it and how to read it "
                                f"({', '.join(names)})")
    recorded = read_json(path)
    if not isinstance(recorded, dict):
        raise ValueError(f"{path} holds a {type(recorded).__name__}, not an object of {names}")
    missing = sorted(set(names) - set(recorded))
    if missing:
        raise ValueError(f"{path} lacks {missing}")
    if not isinstance(recorded["set"], list) or not all(isinstance(a, str) for a in recorded["set"]):
        raise ValueError(f"{path}: set must be a list of NAME=VALUE strings, not {recorded['set']!r}")
    return Provenance(**{name: recorded[name] for name in names} | {"set": tuple(recorded["set"])})


def shipped_results(folder: Path | str) -> tuple[dict[str, Any], Provenance]:
    """A shipped folder's results file as read, and its provenance: a benchmark's results that no notebook profile
    made (its command says how), or a notebook run's whole metrics.json."""
    folder = Path(folder)
    made = provenance(folder)
    path = folder / made.results
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {folder / 'provenance.json'} names it as the results")
    return read_json(path), made


def shipped_experiment(folder: Path | str = TREE_VS_SAMPLING) -> tuple[Experiment, Provenance]:
    """A shipped experiment folder read back (nothing trained), and its provenance. The held-out problems are drawn
    again from the recorded settings and must be the ones the folder answered (`Experiment` checks their ids)."""
    folder = Path(folder)
    made = provenance(folder)
    params, _ = resolve_library(made.notebook, made.profile, folder, made.set)
    problems, sets, _ = task_sets(params)
    return Experiment(params, problems, sets, folder / made.results).load(), made


def shipped_metrics(folder: Path | str) -> tuple[dict[str, Any], Provenance]:
    """A shipped notebook run's numbers, its notebook's section of the run's metrics.json (what the notebook
    records for itself, `RunFolder.record_metrics`), and its provenance."""
    folder = Path(folder)
    recorded, made = shipped_results(folder)
    if not isinstance(recorded, dict) or not isinstance(recorded.get(made.notebook), dict):
        raise ValueError(f"{folder / made.results} holds no section for {made.notebook}, the notebook its provenance "
                         "names")
    section = dict(recorded[made.notebook])
    # the notebooks' folder read when asked (tests point it at a kit of their own)
    params, _ = resolve(config.NOTEBOOKS_DIR / f"{made.notebook}.ipynb", made.profile, folder, made.set)
    if hasattr(params, "task"):  # the task its settings name, where the run recorded none (a figure beside says it)
        section.setdefault("task", params.task)
    return section, made


def read_back(notebook: str) -> list[tuple[Path, str]]:
    """Each shipped folder `notebook` draws beside its own results, read as the notebook first reads it (its
    provenance, its results file as JSON, the notebook's section; notebook 05's experiment loaded):
    [(folder, what is wrong with it, "" when nothing)]. The runner's preflight asks before a notebook runs, so a
    damaged folder stops the run before its work, not after it."""
    readers = {"03_teacher_ensemble": [(TEACHER_ENSEMBLE, shipped_metrics)],
               "04_gsm8k_run": [(TRAINING, shipped_metrics)],
               "05_base_vs_trained": [(TREE_VS_SAMPLING, shipped_experiment),
                                      (TREE_VS_SAMPLING, lambda f: read_json(Path(f) / "calibration.json"))],
               "06_rlt_teachers": [(RLT, shipped_metrics)],
               "08_countdown_alphazero": [(COUNTDOWN, shipped_metrics), (COUNTDOWN_CURVES, shipped_results)]}
    found = []
    for folder, read in readers.get(notebook, []):
        try:
            read(folder)
            found.append((folder, ""))
        except Exception as err:  # whatever stops the reading is what the preflight reports
            found.append((folder, f"{type(err).__name__}: {err}"))
    return found
