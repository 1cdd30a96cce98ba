"""The README and docs/: the README stays a front door of at most 10,000 characters, every relative link in it and
in docs/*.md reaches a file of the repository (and a heading, where it names one), every page of docs/ is linked
from the README, and the README's notebooks table has a row for every notebook. The notebooks' markdown says what
is, for a learner: how a result came about (run histories, issue numbers, bare commit ids) lives in
docs/results.md."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from azlib.lab import config, stored_notebooks

ROOT = config.REPO_ROOT
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_LIMIT = 10_000  # characters: nanoGPT's and CleanRL's READMEs are about 14k

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The Markdown without code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text()))


def _relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: ... are not checked here


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces to hyphens, a
    repeated heading numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in filter(_relative, _links(path)):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.is_relative_to(ROOT) or not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target} (no such heading in {linked.relative_to(ROOT)})")
    return broken


def test_readme_is_short():
    assert len(README.read_text()) <= README_LIMIT, "README.md: move the depth into docs/"


def test_relative_links_resolve():
    assert DOCS, "docs/ has no Markdown pages"
    broken = {str(p.relative_to(ROOT)): b for p in [README, *DOCS] if (b := _broken_links(p))}
    assert not broken, broken


def test_every_doc_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in filter(_relative, _links(README))}
    assert not [p.name for p in DOCS if p.resolve() not in linked]


def test_readme_notebooks_table_names_every_notebook():
    section = _prose(README.read_text()).split("## The notebooks", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("|")]
    named = {m.group(0) for row in rows for m in [re.search(r"\d\d_\w+", row)] if m}
    assert named == {p.stem for p in config.NOTEBOOKS_DIR.glob("*.ipynb")}


def test_readme_gives_each_notebooks_stored_run_time_and_memory():
    """The quick-run minutes and peak GiB in the README's table are those recorded in each stored notebook."""
    section = README.read_text().split("## The notebooks", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        name = re.search(r"\d\d_\w+", cells[0]) if cells else None
        if not name:
            continue
        nb = nbformat.read(config.NOTEBOOKS_DIR / f"{name.group(0)}.ipynb", as_version=4)
        record = nb.metadata[stored_notebooks.RECORD]["executed"]
        assert (float(cells[2]), float(cells[3])) == (round(record["minutes"], 1),
                                                      round(record["peak_rss_mb"] / 1024, 1)), name.group(0)


HISTORY = re.compile(r"\bissues?\s+#?\d+\b|(?<![\w&/#])#\d+\b|\bthe (?:previous|first|second) run\b|\bwe changed\b"
                     r"|\bpreviously\b|\bno longer\b|\bthe issue's\b", re.I)
COMMIT_ID = re.compile(r"(?<![\w#])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?!\w)")
AFTER_COMMIT = re.compile(r"\bcommits?\s+(?:[0-9a-f]{7,40}(?:\s*,\s*|\s+and\s+))*$", re.I)
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def history_phrases(markdown: str) -> list[str]:
    """The phrases of a notebook's markdown that tell its history rather than what is (HISTORY: an issue's number, a
    bare "#" and number, the previous, first or second run, what we changed, what was so before, what an issue
    asked), and bare commit ids. Fenced code and link targets are not read (a cited URL may hold an issue or a commit). A commit id is 7-40
    hex characters with at least one digit and one letter a-f, not preceded by "#" (a hex colour such as #1f77b4, a
    code span's or not, is no id) and not inside a longer word or number ("4,520" has no letter, so it is no id).
    An id is provenance, and allowed, where the word "commit" or "commits" stands directly before it or before the
    list of ids it ends ("commits f68ff8d and 150fb46"), or on a line that starts with "Shipped" or "shipped"
    (after list, quote and emphasis marks): a shipped run's caption."""
    text = LINK_TARGET.sub("]", FENCE.sub("", markdown))
    found = [m.group(0) for m in HISTORY.finditer(text)]
    for m in COMMIT_ID.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        if not (AFTER_COMMIT.search(text[:m.start()]) or re.match(r"[\s>*_-]*shipped\b", line, re.I)):
            found.append(m.group(0))
    return found


def test_history_detector_finds_history_and_passes_provenance():
    # the planted phrases are built from parts, so that this file says none of them (tests/test_history.py)
    for text in ["fixed in iss" + "ue 12", "see #" + "12.", "The first run forked from any answer", "the previous run",
                 "we changed the default", "it was previ" + "ously 4", "it no lon" + "ger loses", "the iss" + "ue's goal",
                 "measured at 7889bdc", "between d32f6b7 and 0c6e1e0", "ids 75c8a0f0123456789abcdef0123456789abcdef"]:
        assert history_phrases(text), text
    for text in ["a colour `#1f77b4` and #ff7f0e", "4,520 positions, 1234567 tokens", "commit 7889bdc",
                 "the command and commits f68ff8d and 150fb46", "shipped: `python -m azlib run`, at 7889bdc",
                 "- **Shipped** run of a4de247", "[TRL](https://github.com/huggingface/trl/issues/3452)",
                 "## Verdict", "a deadbeef word, bf16, 2e-4", "```\niss" + "ue 12 at 7889bdc\n```",
                 "[results](../docs/results.md#does-the-tree-earn-its-place)", "Now a node is the answer"]:
        assert not history_phrases(text), (text, history_phrases(text))


def test_notebook_markdown_says_what_is():
    found = [f"{path.stem} cell {i}: {phrase!r}"
             for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
             for i, cell in enumerate(nbformat.read(path, as_version=4).cells) if cell.cell_type == "markdown"
             for phrase in history_phrases(cell.source)]
    assert not found, "history in the notebooks' markdown (it belongs in docs/results.md): " + "; ".join(found)
