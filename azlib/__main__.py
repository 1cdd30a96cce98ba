"""Command line: `python -m azlib run --profile {smoke,cpu,h100} [--only 01,04] [--out DIR]`.
Parses arguments and hands over to azlib.runner; holds no logic of its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from azlib.config import PROFILES, ParamsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="azlib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute the notebooks under a profile into outputs/<run-id>/")
    run.add_argument("--profile", choices=PROFILES, default="cpu")
    run.add_argument("--only", type=lambda s: [p.strip() for p in s.split(",") if p.strip()],
                     help="comma-separated notebook prefixes, e.g. 01,04")
    run.add_argument("--out", type=Path, help="run folder (default outputs/<timestamp>-<profile>)")
    args = parser.parse_args(argv)

    from azlib.runner import run as run_notebooks

    try:
        return run_notebooks(args.profile, only=args.only, out=args.out)
    except ParamsError as err:
        print(f"azlib: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
