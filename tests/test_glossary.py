"""notebooks/GLOSSARY.md defines every technical term and cited name the notebooks' prose uses.

The rule that finds them, on the notebooks' markdown cells with math ($...$), code spans and link targets
removed: (1) words with two or more capital letters, hyphenated parts included (acronyms and CamelCase: GRPO,
PUCT, LoRA, McNemar, Tree-GRPO, avataRL); (2) a capitalised name before "et al." or a year (Snell et al.,
Wilson 1927); (3) a capitalised name before "interval", "test" or "correction", with or without "'s" (Holm's
correction). A term is defined when the glossary holds it as a whole word. ORDINARY lists the words the rule
finds that need no definition. Words the rule cannot find (lower case, or one capital) that a learner needs
defined are listed in DEFINED: each must name a glossary entry (be in an entry's bold name)."""

import re

import nbformat

from azlib.lab import config

ORDINARY = {"CPU", "GPU", "GPUs", "HTTP", "NaN", "GLOSSARY"}

DEFINED = ("adapter", "profile", "Jaccard", "Dirichlet", "arena", "bits/char", "rollout", "prior", "visit count",
           "advantage", "logit", "softmax", "temperature", "greedy", "exponential moving average", "benched",
           "label smoothing", "distillation", "checkpoint", "held-out", "minimax", "entropy", "importance sampling",
           "trie", "progressive widening")

_TERM = re.compile(r"(?<![\w-])(?:[A-Za-z]+-)?[A-Za-z]*[A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*")
_CITED = re.compile(r"\b([A-Z][a-z]+) (?:et al\.|\(?\d{4}\b)")
_NAMED = re.compile(r"\b([A-Z][A-Za-z]+)(?:'s)? (?:interval|test|correction)\b")


def _prose(text):
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]*\$", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def notebook_terms():
    """term -> the notebooks whose prose uses it."""
    terms = {}
    for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                text = _prose(cell.source)
                for term in [*_TERM.findall(text), *_CITED.findall(text), *_NAMED.findall(text)]:
                    terms.setdefault(term, set()).add(path.stem[:2])
    return terms


def test_the_rule_finds_the_kinds_of_term_it_names():
    text = _prose("GRPO and Tree-GRPO (Snell et al. 2024), Wilson 1927, Holm's correction, avataRL, $KL_{x}$, `PUCT`")
    found = {*_TERM.findall(text), *_CITED.findall(text), *_NAMED.findall(text)}
    assert found == {"GRPO", "Tree-GRPO", "Snell", "Wilson", "Holm", "avataRL"}


def test_every_term_the_notebooks_use_is_in_the_glossary():
    glossary = (config.NOTEBOOKS_DIR / "GLOSSARY.md").read_text()
    terms = notebook_terms()
    assert {"GRPO", "PUCT", "McNemar", "Holm", "Wilson", "STaR", "Tree-GRPO", "Snell"} <= set(terms)
    missing = {t: sorted(nbs) for t, nbs in terms.items()
               if t not in ORDINARY and not re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", glossary)}
    assert not missing, f"used in the notebooks, not in GLOSSARY.md: {missing}"
    assert not ORDINARY - set(terms), f"ORDINARY lists words no notebook uses: {ORDINARY - set(terms)}"


def test_the_original_system_is_named_with_its_source_and_every_notebook_links_the_glossary():
    glossary = (config.NOTEBOOKS_DIR / "GLOSSARY.md").read_text()
    entry = glossary.split("**The original system.**")[1].split("\n\n")[0]
    assert "alphazero-llm-trainer" in entry and "Environments Hub" in entry, "its public source, said as it is"
    opening = nbformat.read(config.NOTEBOOKS_DIR / "01_toy_bandit_grpo.ipynb", as_version=4).cells[:2]
    intro = "\n".join(cell.source for cell in opening)  # the first screen and the cell that follows it
    assert "the original system" in intro and "GLOSSARY.md#the-system-azlib-grows-from" in intro
    for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        assert "(GLOSSARY.md" in nbformat.read(path, as_version=4).cells[0].source, path.stem
    for term in ("t-interval", "tier"):
        assert re.search(rf"\*\*[^*]*\b{term}\b", glossary, re.I), f"no glossary entry for {term}"


def _named(term):
    """The term as a whole word, a plural allowed, any case."""
    return re.compile(rf"(?<![\w-]){re.escape(term)}s?(?![\w-])", re.I)


def test_every_listed_lower_case_term_is_used_and_names_a_glossary_entry():
    glossary = (config.NOTEBOOKS_DIR / "GLOSSARY.md").read_text()
    entries = re.findall(r"^\*\*(.+?)\*\*", glossary, re.M | re.S)
    prose = "\n".join(_prose(cell.source) for path in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
                      for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown")
    unused = [term for term in DEFINED if not _named(term).search(prose)]
    assert not unused, f"DEFINED lists terms no notebook's prose uses: {unused}"
    missing = [term for term in DEFINED if not any(_named(term).search(entry) for entry in entries)]
    assert not missing, f"used in the notebooks, no entry of GLOSSARY.md names it: {missing}"
