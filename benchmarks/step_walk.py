"""What one training step walks: the azlib functions `Trainer.train_step` calls (distinct), the modules they live
in, the deepest chain of azlib calls, and the record types handed between them, all outside the model's internals
(azlib.models: decode loop, caches, forward passes) and the process group (azlib.parallel). A record type is one
of azlib's data classes, or the shape of an anonymous record: a dict by its string keys, a tuple of mixed values
by its length. Components (settings, backends, engines, explorers) and plain numbers are not records. A smoke
trainer of the given `train.signal` takes one step to warm up; the second is traced.

    .venv/bin/python benchmarks/step_walk.py --signal answers --update grpo
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import azlib
from azlib.lab.config import resolve_library
from azlib.lab.from_params import trainer_from_params, training_problems

PACKAGE = str(Path(azlib.__file__).parent)
INTERNALS = (PACKAGE + "/models", PACKAGE + "/parallel")
NOT_FUNCTIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>", "<lambda>", "__post_init__")
COMPONENTS = ("Settings", "Weights", "Sampling", "Backend", "Env", "Search", "Student", "Update", "Trainer",
              "Ensemble", "Policy", "Explorer", "Prompts")


def record_type(value) -> str | None:
    """The record type of a value (see the module's docstring), or None when it is not a record."""
    kind = type(value)
    if kind is list:
        return record_type(value[0]) if value else None
    if kind is dict and value and all(isinstance(k, str) for k in value):
        return "dict{" + ",".join(sorted(value)) + "}"
    if kind is tuple and value and not all(isinstance(v, (int, float, str)) for v in value):
        return f"tuple of {len(value)}"
    if kind.__module__.startswith("azlib") and not kind.__name__.endswith(COMPONENTS):
        return kind.__name__
    return None


class Walk:
    """A profile hook: azlib's functions, their depth, and the record types of their arguments and results."""

    def __init__(self):
        self.functions, self.records, self.depth, self.deepest = set(), set(), 0, 0

    def __call__(self, frame, event, result):
        code = frame.f_code
        if not code.co_filename.startswith(PACKAGE) or code.co_filename.startswith(INTERNALS) \
                or code.co_name in NOT_FUNCTIONS:
            return
        if event == "call":
            self.depth += 1
            self.deepest = max(self.deepest, self.depth)
            module = code.co_filename[len(PACKAGE) - len("azlib"):].removesuffix(".py").replace("/", ".")
            self.functions.add((module, getattr(code, "co_qualname", code.co_name)))  # co_qualname: Python 3.11+
            self._note(list(frame.f_locals.values())[:code.co_argcount + code.co_kwonlyargcount])
        elif event == "return":
            self.depth -= 1
            self._note([result])

    def _note(self, values) -> None:
        self.records |= {name for v in values if (name := record_type(v)) is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signal", default="answers")
    parser.add_argument("--update", default="grpo", choices=("grpo", "sft"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        params, _ = resolve_library("04_gsm8k_run", "smoke", folder, [f"train.signal={args.signal}",
                                                                      f"train.update={args.update}",
                                                                      "train.max_new_tokens=48"])
        problems, _ = training_problems(params)
        with trainer_from_params(params, folder / "run", problems) as trainer:
            trainer.train_step()
            walk = Walk()
            sys.setprofile(walk)
            try:
                trainer.train_step()
            finally:
                sys.setprofile(None)
    modules = {module for module, _ in walk.functions}
    print(f"train.signal {args.signal}, update {args.update}: {len(walk.functions)} functions in {len(modules)} "
          f"modules, {walk.deepest} calls deep, {len(walk.records)} record types")
    print("record types:\n  " + "\n  ".join(sorted(walk.records)))
    print("functions:\n  " + "\n  ".join(f"{m}.{q}" for m, q in sorted(walk.functions)))


if __name__ == "__main__":
    main()
