"""The code says what it is, not what it was: no issue numbers, change history or per-machine timings in the
library, the tests, the benchmarks' code or the profiles. Measurements belong in docs/results.md with their command,
commit and machine; the docs are not scanned."""

import re
from pathlib import Path

import pytest

from azlib.paths import REPO_ROOT

SCANNED = ("azlib", "tests", "benchmarks", "params")
SUFFIXES = (".py", ".yaml", ".yml", ".sh", ".toml", ".cfg")
SKIPPED = ("benchmarks/results",)  # shipped run outputs: data, not code

HISTORY = re.compile(r"""(?ix)
      (?<![a-z])issues?[\s_-]*\#?\d+(?!\d)                  # an issue's number, in prose or in a test's name
    | (?:^|[\s(\[,;])\#\d{1,4}\b(?![0-9a-f])             # a bare "#44" (not a colour such as "#555" in quotes)
    | (?<![a-z])(?:the[\s_]+)?issues?(?:'s)?[\s_]+(?:goals?|asks|measurements?)   # what an issue asked for
    | \bpreviously\b
    | \b(?:we|it|this|that|which|azlib|they|there)\s+used\s+to\b   # "used to" as a habit, not "used to divide"
    | \bno\s+longer\b
    | \bwas\s+changed\b
    | \bolder\s+(?:azlib|versions?\s+of\s+azlib)\b
    | \btook\s+(?:about\s+)?[\d.,]+\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b   # a timing on some machine
    | \babout\s+[\d.,]+\s?(?:min|minutes?|hours?)\b                     # a measured duration, stated as fact
    | \bin\s+\d+\s+of\s+\d+\s+runs\b
""")


def history_lines(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


def scanned_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (REPO_ROOT / folder).rglob("*")
                  if p.suffix in SUFFIXES and p.is_file() and "__pycache__" not in p.parts
                  and not any(p.relative_to(REPO_ROOT).as_posix().startswith(s) for s in SKIPPED))


def test_the_code_says_what_it_is_not_what_it_was():
    found = [f"{p.relative_to(REPO_ROOT)}:{n}: {line}" for p in scanned_files()
             for n, line in history_lines(p.read_text(errors="replace"))]
    assert len(scanned_files()) > 100, "the scan reads the repository"
    assert not found, "history, issue numbers or timings in code (docs/results.md is their place):\n" + "\n".join(found)


# Each planted line is built from parts, so that this file itself says none of them.
@pytest.mark.parametrize("planted", [
    "def test_the_requests_of_" + "issue" + "_26_are_refused():",
    "# see " + "issue" + " 44 for why",
    "# the goal of (" + "#" + "44) is met",
    "help='the " + "issue" + " asks for >= 500'",
    "def test_sizes_match_the_" + "issues" + "_measurements():",
    "# this was " + "previ" + "ously done in config",
    "# it " + "used to" + " read the env var",
    "# the cache is no " + "longer" + " needed",
    "# the default " + "was" + " changed to 0.7",
    "raise ValueError('written by an " + "older" + " azlib')",
    "# the sweep " + "took" + " 214 s on 2 cores",
    "# every arm, both ablations; " + "about" + " 10 min with 1 thread.",
    "# a wake-up was missed in 8 " + "of" + " 14 runs",
])
def test_a_planted_history_line_is_found(planted):
    assert history_lines(f"x = 1\n{planted}\ny = 2\n") == [(2, planted.strip())]


@pytest.mark.parametrize("ordinary", [
    'scale_rewards: str = "group"  # std used to divide advantages',
    "style = 'stroke=\"#1f77b4\" fill=\"#555\"'",
    'ANSWER = "#### 7"',
    "# Q + c * P * sqrt(N) / (1 + N_child), the issue of scale aside",
    "timeout_s: int = 600  # the longest a command may take",
    "# 4 runs of the search, one per seed",
])
def test_ordinary_lines_are_not_history(ordinary):
    assert history_lines(ordinary) == []
