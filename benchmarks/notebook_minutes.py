"""How long does each notebook take as a learner runs it? Executes every notebook with its parameters cell's
defaults (no profile: only output_dir is set, to a temporary folder) through the runner, one after another,
and prints each one's minutes against its goal: 5 minutes on 2 CPU cores, 10 for notebook 05.

    .venv/bin/python benchmarks/notebook_minutes.py [--only 01,02] [--keep DIR]

The goal is about wall minutes on a quiet machine: run it with nothing else busy, or say what was. Beside them it
prints the CPU minutes the notebook's kernel used (all its threads together): on a busy machine, with
OMP_NUM_THREADS=1, they are a fair estimate of the wall minutes a quiet core would take. Not part of the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

from azlib.lab.config import ENV_OVERRIDES
from azlib.lab.config import list_notebooks
from azlib.lab.runner import run

GOAL_MINUTES = {"05": 10.0}  # every other notebook: DEFAULT_GOAL
DEFAULT_GOAL = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=lambda s: [p.strip() for p in s.split(",") if p.strip()],
                        help="comma-separated notebook prefixes, e.g. 01,04")
    parser.add_argument("--keep", type=Path, help="run folders under this folder, kept (default: a temporary one)")
    args = parser.parse_args()
    if set_vars := sorted(v for v in ENV_OVERRIDES if v in os.environ):
        sys.exit(f"unset {', '.join(set_vars)}: they override the search budgets, and this measures the defaults")
    notebooks = list_notebooks(args.only)
    print(f"{len(notebooks)} notebook(s), parameters-cell defaults; {os.cpu_count()} CPUs, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load average {_load()} at the start")
    rows = []
    with tempfile.TemporaryDirectory(prefix="notebook-minutes-") as tmp:
        root = args.keep or Path(tmp)
        for nb in notebooks:
            number = nb.name[:2]
            out = root / nb.stem
            cpu = _kernel_cpu_seconds()
            code = run(None, only=[number], out=out)
            cpu = _kernel_cpu_seconds() - cpu
            status = json.loads((out / "config.json").read_text())["status"].get(nb.stem, {})
            rows.append((nb.stem, status.get("seconds", float("nan")) / 60, cpu / 60,
                         GOAL_MINUTES.get(number, DEFAULT_GOAL), "ok" if code == 0 else status.get("status", "failed")))
            print(f"{nb.stem}: {rows[-1][1]:.1f} wall min, {rows[-1][2]:.1f} CPU min, load average {_load()}")
    print(f"\nminutes with the parameters-cell defaults (load average {_load()} at the end):")
    width = max(len(stem) for stem, *_ in rows)
    print(f"  {'notebook':{width}s} {'wall':>6s}   {'CPU':>6s}   goal")
    for stem, minutes, cpu, goal, status in rows:
        verdict = status if status != "ok" else ("within" if minutes <= goal else "OVER")
        print(f"  {stem:{width}s} {minutes:6.1f}   {cpu:6.1f}   {goal:4.1f}   {verdict}")
    return 0 if all(status == "ok" and minutes <= goal for _, minutes, _, goal, status in rows) else 1


def _kernel_cpu_seconds() -> float:
    """CPU seconds of this process's finished children: each notebook's kernel, once papermill has ended it."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
