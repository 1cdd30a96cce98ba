"""Every "Things to try" suggestion of every notebook: each parameter change it names is valid under the notebook's
schema, over the notebook's own defaults (a learner's edit of the parameters cell) and over the smoke profile; the
changes that make other code run also execute their notebook at smoke size, a few changes to a run."""

import ast
import re
from typing import NamedTuple

import nbformat
import pytest

from azlib import config, runner
from azlib.runs import RunFolder, read_json

NOTEBOOKS = {nb.name[:2]: nb for nb in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))}


class Try(NamedTuple):
    notebook: str  # its number
    quote: str  # words of the suggestion, as its bullet writes them
    sets: tuple[str, ...]  # the change as `azlib run --set` takes it
    run: str | None = None  # the smoke run below that executes it; None: a change of numbers, or see `covered`
    covered: str = ""  # where the code it makes run is tested instead (a code edit, a command line, a slow path)


TRIES = [
    Try("01", "`beta = 0` and then", ("beta=0",)),
    Try("01", "and then `beta = 0.1`", ("beta=0.1",)),
    Try("01", "`num_tokens = 16`", ("num_tokens=16",)),
    Try("01", "edit `Bandit.reward`", (), covered="a code edit; the exercise checks of 01 run Bandit (test_exercises)"),
    Try("02", '`search.rule = "uct"`', ("search.rule=uct",), run="02-uct"),
    Try("02", '`search.q_transform = "mctx"`', ("search.q_transform=mctx",), run="02-uct"),
    Try("02", '`search.rule = "gumbel"` with `search.leaves_per_step = 1`',
        ("search.rule=gumbel", "search.leaves_per_step=1"), run="02-gumbel"),
    Try("02", "Fewer `ttt_simulations` (50, 200)", ("ttt_simulations=50",)),
    Try("02", "Fewer `ttt_simulations` (50, 200)", ("ttt_simulations=200",)),
    Try("02", "- `search.leaves_per_step = 1`", ("search.leaves_per_step=1",)),
    Try("02", "`az_simulations = 32`", ("az_simulations=32",)),
    Try("02", "`az_arena_games = 0`", ("az_arena_games=0",), run="02-gumbel"),
    Try("02", "`az_random_opening = 0`", ("az_random_opening=0",)),
    Try("03", "`failing_teacher = False`", ("failing_teacher=false",)),
    Try("03", "`teachers_per_node = 1`", ("teachers_per_node=1",)),
    Try("03", "Your own teachers: `teachers = [",
        ('teachers=[{"name": "local-vllm", "backend": "openai", "model": "...", "tier": "production", '
         '"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "MY_KEY"}]',),
        covered="the remote path runs in every 03 smoke run (its http-tutor, a real HTTP server)"),
    Try("04", '`train.groups = "sampling"` (no tree', ("train.groups=sampling",), run="04-sampling"),
    Try("04", 'add `train.update = "grpo"` for plain GRPO', ("train.groups=sampling", "train.update=grpo")),
    Try("04", 'or `"siblings"`', ("train.groups=siblings",), run="04-siblings"),
    Try("04", '`train.update = "grpo"` with `grpo.loss_type = "grpo"`', ("train.update=grpo", "grpo.loss_type=grpo")),
    Try("04", 'vs `"dr_grpo"`', ("train.update=grpo", "grpo.loss_type=dr_grpo")),
    Try("04", '`teacher_tier = "cpu"`', ("teacher_tier=cpu",),
        covered="training with the cpu teachers: notebook 05's smoke run (its mcts and tree_teachers arms) and "
                "test_training.py; notebook 04 has no cell of its own for them (a run here: 57 s)"),
    Try("04", '`train.reward = "original"`', ("teacher_tier=cpu", "train.reward=original")),
    Try("04", "set `resume = True`, run again", ("resume=true",),
        covered="test_training.py: resume takes the newest folder with a checkpoint and continues it"),
    Try("04", "`torchrun --nproc_per_node=2 -m azlib train", (),
        covered="a command line: test_parallel.py and test_training.py run `azlib train`"),
    Try("05", "`fork.rounds = 0`", ("fork.rounds=0",)),
    Try("05", '`fork.where = "line"`', ("fork.where=line",), run="05-one-seed"),
    Try("05", '`fork.fork_from = "wrong"`', ("fork.fork_from=wrong",), run="05-one-seed"),
    Try("05", "`arithmetic_steps = [1]`", ("arithmetic_steps=[1]",)),
    Try("05", '`arms = ["tree", "resample", "rft"]`', ("arms=[tree, resample, rft]",)),
    Try("05", '`train.groups = "paths"`, `train.reward = "original"`, `text.expansion = "chunk"` with the `mcts` arm',
        ("train.groups=paths", "train.reward=original", "text.expansion=chunk", "arms=[mcts]"), run="05-original"),
    Try("05", "`seeds = [0]`", ("seeds=[0]",), run="05-one-seed"),
    Try("06", "`rlt.kl_weight = 0`", ("rlt.kl_weight=0",)),
    Try("06", "`rlt.alpha = 0.5`", ("rlt.alpha=0.5",)),
    Try("06", "`rlt.group_size` larger and `rlt.temperature` higher", ("rlt.group_size=4", "rlt.temperature=1.0")),
    Try("06", '`task = "gsm8k"`', ("task=gsm8k",)),
]

# Smoke runs of the changes that make other code run: the smoke profile, a tiny random student (a run checks that
# every cell runs with the change, not what it shows), the notebook's own arms and teachers where the smoke profile
# has others (05's: all ten arms, cpu teachers), then the changes of the TRIES that name the run.
RUNS = {
    "02-uct": ("02", ["model={tiny}"]),
    "02-gumbel": ("02", ["model={tiny}"]),
    "04-sampling": ("04", ["model={tiny}"]),
    "04-siblings": ("04", ["model={tiny}"]),
    "05-one-seed": ("05", ["model={tiny}", "arms=[tree, rft]", "teacher_tier=none"]),
    "05-original": ("05", ["model={tiny}", "teacher_tier=none", "seeds=[0]"]),
}
def suggestions(notebook: str) -> list[str]:
    """The bullets of the notebook's "Things to try" cell."""
    nb = nbformat.read(NOTEBOOKS[notebook], as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Things to try")]
    return [b.strip() for b in re.split(r"^- ", cell.source, flags=re.M)[1:]]


def assignments(bullet: str) -> list[tuple[str, object]]:
    """The `name = value` changes a bullet names, values as Python reads them."""
    return [(name, ast.literal_eval(value)) for name, value in re.findall(r"`([a-z_][\w.]*) = ([^`]+)`", bullet)]


WITH_SUGGESTIONS = [n for n in NOTEBOOKS if any(c.cell_type == "markdown" and c.source.startswith("## Things to try")
                                               for c in nbformat.read(NOTEBOOKS[n], as_version=4).cells)]


@pytest.mark.parametrize("notebook", WITH_SUGGESTIONS)
def test_every_suggestion_is_in_the_table_and_every_entry_is_a_suggestion(notebook):
    bullets = suggestions(notebook)
    tries = [t for t in TRIES if t.notebook == notebook]
    for bullet in bullets:
        mine = [t for t in tries if t.quote in "- " + bullet]
        assert mine, f"notebook {notebook}: add this suggestion to TRIES: {bullet[:80]!r}"
        named = [(k, v) for t in mine for k, v in config.parse_assignments(t.sets).items()]
        for name, value in assignments(bullet):
            if name == "teachers":  # the bullet's teacher, with the key variable its text asks for
                value = [spec | {"api_key_env": "MY_KEY"} for spec in value]
            assert any(k == name and v == value and type(v) is type(value) for k, v in named), \
                f"notebook {notebook}: TRIES lacks {name} = {value!r} of {bullet[:60]!r}"
    for t in tries:
        assert any(t.quote in "- " + b for b in bullets), f"notebook {notebook}: no suggestion says {t.quote!r}"
        assert bool(t.sets) or t.covered, "a suggestion without a change says where it is covered"
        assert t.run is None or t.run in RUNS and RUNS[t.run][0] == notebook


@pytest.mark.parametrize("profile", [None, "smoke"], ids=["defaults", "smoke"])
@pytest.mark.parametrize("notebook", WITH_SUGGESTIONS)
def test_every_suggested_change_is_valid(notebook, profile, tmp_path):
    """resolve raises ParamsError naming the notebook and the parameter for an unknown name or a bad value."""
    for t in TRIES:
        if t.notebook == notebook and t.sets:
            config.resolve(NOTEBOOKS[notebook], profile, tmp_path, t.sets)


def run_changes(name: str) -> list[str]:
    return [s for t in TRIES if t.run == name for s in t.sets]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_suggestions_that_change_the_code_run_run(name, tmp_path, tiny_model_dir):
    notebook, extra = RUNS[name]
    sets = [s.format(tiny=tiny_model_dir) for s in extra] + run_changes(name)
    code = runner.run("smoke", only=[notebook], out=tmp_path, assignments=sets)
    status = read_json(tmp_path / "config.json")["status"][NOTEBOOKS[notebook].stem]["status"]
    assert code == 0, f"{name} ({' '.join(sets)}): {status}"
    assert RunFolder(tmp_path).metrics()[NOTEBOOKS[notebook].stem]
