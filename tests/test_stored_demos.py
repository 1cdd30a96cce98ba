"""What each notebook's quick run shows, read from its stored outputs (the repository page a reader opens first):
the demo's point holds in the outputs beside the text that names it."""

import re

import nbformat

from azlib import config


def printed(stem: str, marker: str) -> str:
    """The printed output of the one code cell of notebook `stem` whose source holds `marker`."""
    nb = nbformat.read(config.NOTEBOOKS_DIR / f"{stem}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_07_the_referee_takes_the_reward_from_the_ground_truth_only_when_it_is_sure_against_it():
    shown = {line.split(" candidates")[0].strip(): line.split("paid ")[1]
             for line in printed("07_referee_rl", "referees = {").splitlines()}
    assert shown == {"no referee (beta 0)": "{2: 1.5}", "leans to 3": "{2: 1.5}", "sure of 3": "{3: 1.5}"}


def test_06_the_paired_gain_says_how_many_problems_it_rose_on_and_a_tie_has_no_gap():
    shown = printed("06_rlt_teachers", "paired = seed_difference(")
    assert re.search(r"r rose on \d+ of the \d+ problems and fell on \d+", shown)
    verdict = printed("06_rlt_teachers", "verdict = (")
    assert "by 0.0 points" not in verdict

