"""Whether a change keeps training's behaviour: the step logs of short `azlib train` runs (smoke profile, answers of
up to 48 tokens) for every `train.signal`, both updates, the teachers, chunked expansion and hint and teacher forks,
with the fields that measure the machine (seconds, memory) dropped. Written as JSON; `--against` compares with a file
another checkout wrote and names the first difference. A file whose lines have no namespaces (update/, search/,
reward/) is read under them (`namespaced`); its GRPO lines hold GRPO's reward_mean only, so the step's own
reward_mean is compared where the older line has one.

    .venv/bin/python benchmarks/train_logs.py --out logs.json [--against other.json] [--runs answers-grpo ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# the keys of the update's and the explorer's parts in a line written with them beside the step's own (no namespaces)
UNSPACED_UPDATE = {"reward_std", "zero_std_groups", "sequences", "dropped_sequences", "loss", "kl", "entropy",
                   "clip_fraction", "clip_low", "clip_high", "grad_norm", "completion_tokens", "advantage_abs_mean"}
UNSPACED_SEARCH = {"answers", "verified_by_teacher", "verified_by_writer"}


def namespaced(line: dict) -> dict:
    """A step log line whose parts' keys stand beside the step's own (loss, answers, reward_hre) under the names
    azlib.training.StepLog gives them (update/loss, search/answers, reward/hre); a namespaced line comes back as it
    is. In such a line a GRPO step's reward_mean is GRPO's (it wrote over the step's own): update/reward_mean."""
    if any("/" in key for key in line):
        return line
    grpo = "reward_std" in line
    out = {}
    for key, value in line.items():
        if key in UNSPACED_UPDATE or (key == "reward_mean" and grpo):
            out[f"update/{key}"] = value
        elif key in UNSPACED_SEARCH:
            out[f"search/{key}"] = value
        elif key.startswith("reward_") and key != "reward_mean":
            out[f"reward/{key.removeprefix('reward_')}"] = value
        else:
            out[key] = value
    return out


RUNS = {
    "answers-sft": ["train.signal=answers", "train.update=sft"],
    "answers-grpo": ["train.signal=answers", "train.update=grpo"],
    "answers-teachers": ["train.signal=answers", "train.update=grpo", "teacher_tier=cpu"],
    "paths-grpo": ["train.signal=paths", "train.update=grpo"],
    "siblings-grpo": ["train.signal=siblings", "train.update=grpo"],
    "visits-grpo": ["train.signal=visits", "train.update=grpo"],
    "chunk-paths": ["train.signal=paths", "train.update=grpo", "text.expansion=chunk"],
    "independent-sft": ["train.signal=independent", "train.update=sft"],
    "forked-grpo": ["train.signal=forked", "train.update=grpo"],
    "forked-hint": ["train.signal=forked", "train.update=sft", "fork.writer=hint"],
    "forked-teachers": ["train.signal=forked", "train.update=sft", "fork.writer=teachers", "teacher_tier=cpu"],
    "treerl-grpo": ["train.signal=treerl", "train.update=grpo"],
}
MACHINE_FIELDS = {"seconds", "ram_peak_mb", "vram_peak_mb", "vram_used_mb"}


def train_log(assignments: list[str]) -> list[dict]:
    """One smoke-profile training run's log, without the machine's fields."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "azlib", "train", "--profile", "smoke", "--out", folder, "--set",
                        "train.max_new_tokens=48", *assignments], check=True, stdout=subprocess.DEVNULL)
        lines = next(Path(folder).rglob("train_log.jsonl")).read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in MACHINE_FIELDS} for line in lines]


def first_difference(a: dict, b: dict) -> str | None:
    for run in sorted(a.keys() | b.keys()):
        if run not in a or run not in b:
            return f"{run}: only in one file"
        for step, (x, y) in enumerate(zip(a[run], b[run]), 1):
            keys = sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))
            if keys:
                return f"{run}, step {step}: {keys[0]} {x.get(keys[0])!r} vs {y.get(keys[0])!r}"
        if len(a[run]) != len(b[run]):
            return f"{run}: {len(a[run])} vs {len(b[run])} steps"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the logs, as JSON")
    parser.add_argument("--against", type=Path, help="logs another checkout wrote: report the first difference")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS), metavar="RUN")
    args = parser.parse_args()
    logs = {}
    for run in args.runs:
        logs[run] = train_log(RUNS[run])
        print(f"{run}: {len(logs[run])} steps", flush=True)
    args.out.write_text(json.dumps(logs, indent=1, sort_keys=True))
    if args.against:
        other = {k: [namespaced(line) for line in v] for k, v in json.loads(args.against.read_text()).items()
                 if k in logs}
        ours = {run: [{k: v for k, v in line.items() if k != "reward_mean" or i >= len(other.get(run, [])) or
                       "reward_mean" in other[run][i]} for i, line in enumerate(lines)] for run, lines in logs.items()}
        difference = first_difference(other, ours)
        print(f"against {args.against}: " + (f"DIFFERENT ({difference})" if difference else
                                             f"the same, {len(logs)} runs"))


if __name__ == "__main__":
    main()
