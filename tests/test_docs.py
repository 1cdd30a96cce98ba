"""The README and docs/: the README stays a front door of at most 10,000 characters, every relative link in it and
in docs/*.md reaches a file of the repository (and a heading, where it names one), every page of docs/ is linked
from the README, and the README's notebooks table has a row for every notebook."""

from __future__ import annotations

import re
from pathlib import Path

from azlib import config

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
