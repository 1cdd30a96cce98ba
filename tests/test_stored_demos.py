"""What each notebook's quick run shows, read from its stored outputs (the repository page a reader opens first):
the demo's point holds in the outputs beside the text that names it, every notebook ends on what its run showed,
and no markdown types a number that only a run can produce."""

import re

import nbformat
import pytest

from azlib.lab import config

NOTEBOOKS = sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


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



# A number: signed or not, with thousands commas, decimals or a percent sign; not part of a word, path or version.
NUMBER = re.compile(r"(?<![\w.$/-])[-+\u2212]?\d+(?:,\d{3})*(?:\.\d+)?%?(?![\w/])")
# numbers markdown may state that outputs print too: the intervals' confidence level; tic-tac-toe's positions
CONSTANTS = {"95%", "4,520"}
SHIPPED = ("docs/results.md", "benchmarks/results")  # a cell that names its shipped source may quote its numbers


def printed_numbers(nb) -> set[str]:
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts += [output.get("data", {}).get(mime, "") for mime in ("text/plain", "text/markdown", "text/html")]
    return set(NUMBER.findall("\n".join(map(str, texts))))


def typed_run_numbers(nb) -> list[tuple[int, str]]:
    """(cell index, number) for each number a markdown cell states that the stored outputs print and no code cell
    writes: a run's result typed into prose, which the next run can contradict. Decimals, percentages and whole
    numbers from 10 up (smaller ones count things the text sets up: "two problems"); formulas, code spans and link
    targets aside; a cell naming its shipped source (SHIPPED) and a concept check's hypothetical numbers too."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    printed = printed_numbers(nb) - CONSTANTS
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or any(s in cell.source for s in SHIPPED) or \
                cell.source.startswith("## Concept check"):
            continue
        prose = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "", re.sub(r"\$[^$]*\$", "", cell.source)))
        for number in NUMBER.findall(prose):
            bare = number.lstrip("+-\u2212")
            whole = bare.rstrip("%").replace(",", "")
            if number in printed and ("." in bare or "%" in bare or int(whole) >= 10) and \
                    not re.search(rf"(?<![\d.]){re.escape(bare)}(?!\d)", code):
                found.append((i, number))
    return found


def test_the_typed_number_check_catches_a_run_number_in_prose_and_passes_a_parameter():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("simulations = 12\nprint(search())", outputs=[
            nbformat.v4.new_output("stream", text="11 simulations, 53 nodes, 2043 tokens; 63% joined the right branch")]),
        nbformat.v4.new_markdown_cell("The search ran 11 simulations; 63% of the chunks joined the right branch."),
        nbformat.v4.new_markdown_cell("It stops at 12 simulations or `max_tokens`, with a 95% interval."),
        nbformat.v4.new_markdown_cell("The shipped run (docs/results.md) wrote 53 nodes."),
    ])
    assert typed_run_numbers(nb) == [(1, "11"), (1, "63%")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_markdown_types_a_number_its_run_prints(path):
    assert typed_run_numbers(nbformat.read(path, as_version=4)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_ends_on_what_its_run_showed(path):
    """A "What you saw" heading, then a code cell whose stored output says it in sentences ("- ..." lines)."""
    nb = nbformat.read(path, as_version=4)
    (heading,) = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith("## What you saw")]
    said = "".join(o.get("text", "") for o in nb.cells[heading + 1].get("outputs", []))
    assert nb.cells[heading + 1].cell_type == "code" and said.count("\n- ") >= 1 and said.startswith("- ")


def test_02_each_tree_is_drawn_once_at_a_width_that_fits_a_page():
    nb = nbformat.read(config.NOTEBOOKS_DIR / "02_mcts_tree.ipynb", as_version=4)
    for cell in [c for c in nb.cells if c.cell_type == "code" and "TreeWidget(" in c.source]:
        (picture,) = [o["data"]["image/svg+xml"] for o in cell.outputs if "image/svg+xml" in o.get("data", {})]
        assert int(re.search(r'<svg[^>]* width="(\d+)"', picture).group(1)) <= 1000


def test_03_the_weights_demo_says_whether_they_moved_and_shows_the_shipped_searches():
    shown = printed("03_teacher_ensemble", "weights_over_time = [")
    assert re.search(r"shipped: .*: [1-9]\d* of \d+ searches found a right answer through a teacher's child", shown)


def test_03_a_search_credits_a_teacher_and_a_weight_moves():
    shown = printed("03_teacher_ensemble", "moved = float(")
    credited, moved = re.search(r"(\d+) of \d+ searches found a right answer through a teacher's child; the largest "
                                r"change of a weight was (\d+\.\d+)", shown).groups()
    assert int(credited) > 0 and float(moved) > 0


def test_04_the_drawn_forking_tree_has_a_right_answer():
    shown = printed("04_gsm8k_run", "forking.grow(")
    assert re.search(r"problem \d+: \d+ answers \([1-9]\d* correct\)", shown)
    assert "no right answer in any of these trees" not in shown


def test_04_the_opened_step_has_a_verified_answer_and_a_loss():
    shown = printed("04_gsm8k_run", "demo = mcts.search(")
    verified = int(re.search(r"imitation loss of its (\d+) verified answers", shown).group(1))
    grpo_loss = float(re.search(r"GRPO loss of this batch: ([-+]\d+\.\d+)", shown).group(1))
    assert verified > 0 and grpo_loss != 0.0


def test_05_the_original_reward_ranks_a_right_answer_below_another_and_correctness_never_does():
    shown = printed("05_base_vs_trained", "def line_pres(")
    shares = dict(re.findall(r"(correctness|combined) (\d+)%", shown))
    assert int(shares["correctness"]) == 0 and int(shares["combined"]) > 0
