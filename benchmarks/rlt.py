"""Does RL-training a teacher to explain help, on 2 CPU cores in under 45 minutes? Runs notebook 06 with the
`cpu` profile through the runner: the teacher's reward over training (first vs last quarter of its steps,
95% CI; and a paired comparison of the trained and untrained teacher on the same problems), then the
held-out accuracy of students distilled on RLT explanations, untrained-teacher explanations and solutions
alone at an equal token budget, with McNemar p against the solution-distilled one, whatever the answer.
Long (about half an hour); not part of the tests.

    .venv/bin/python benchmarks/rlt.py [--out outputs/rlt]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from azlib.paths import REPO_ROOT
from azlib.lab.runner import run
from azlib.lab.run_folder import RunFolder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "outputs" / f"rlt-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()
    start = time.perf_counter()
    if run("cpu", only=["06"], out=args.out):
        raise SystemExit(f"notebook 06 failed under the cpu profile; its partial output is in {args.out}")
    m, minutes = RunFolder(args.out).metrics()["06_rlt_teachers"], (time.perf_counter() - start) / 60
    print(f"\nnotebook 06, cpu profile, in {minutes:.1f} min (goal < 45; run folder {args.out}); "
          f"teacher training {m['teacher_seconds'] / 60:.1f} min")
    print(f"teacher reward, first vs last quarter ({m['teacher_steps']} steps): {m['reward_first_quarter']:.3f} -> "
          f"{m['reward_last_quarter']:.3f}, {m['reward_rise']:+.3f} (95% CI {m['reward_rise_ci_low']:+.3f} to "
          f"{m['reward_rise_ci_high']:+.3f}): {'rises' if m['reward_rise_ci_low'] > 0 else 'no significant rise'}")
    print(f"same problems, untrained vs trained teacher: r {m['paired_r_untrained']:.3f} -> {m['paired_r_trained']:.3f} "
          f"({m['paired_r_gain']:+.3f}, paired 95% CI {m['paired_r_ci_low']:+.3f} to {m['paired_r_ci_high']:+.3f})")
    for name in ("base", "rlt", "untrained", "solutions"):
        tokens = f"{m[f'{name}_sft_tokens']:>7,} SFT tokens" if f"{name}_sft_tokens" in m else ""
        print(f"  {name:9s} {m[f'{name}_accuracy']:6.1%}  95% CI {m[f'{name}_ci_low']:.1%}-{m[f'{name}_ci_high']:.1%}  "
              f"n {m[f'{name}_n']}  {tokens}")
    for name in ("rlt", "untrained", "base"):
        print(f"  {name} vs solutions: fixed {m[f'{name}_vs_solutions_fixed']}, broken {m[f'{name}_vs_solutions_broken']}, "
              f"McNemar p = {m[f'{name}_vs_solutions_p']:.3g}")
    print(m["verdict"])
    (args.out / "rlt.json").write_text(json.dumps(m | {"minutes": minutes}, indent=1))


if __name__ == "__main__":
    main()
