"""`python -m azlib`: the lab's command line (azlib.lab.cli)."""

from azlib.lab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
