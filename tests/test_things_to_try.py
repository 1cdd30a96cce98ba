"""Every "Things to try" suggestion of every notebook: each parameter change it names is valid under the notebook's
schema, over the notebook's own defaults (a learner's edit of the parameters cell) and over the smoke profile; the
changes that make other code run also execute their notebook at smoke size, a few changes to a run; and the effect
each suggestion states is asserted, by a cheap call into azlib at the smallest size that shows it (a test of this
file or of another that asserts the same effect), or by the smoke run that executes it."""

import ast
import json
import re
from pathlib import Path
from typing import NamedTuple

import nbformat
import pytest
import torch

from azlib.lab import config, runner
from azlib.lab.run_folder import RunFolder, read_json

NOTEBOOKS = {nb.name[:2]: nb for nb in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))}


class Try(NamedTuple):
    notebook: str  # its number
    quote: str  # words of the suggestion, as its bullet writes them
    sets: tuple[str, ...]  # the change as `azlib run --set` takes it
    run: str | None = None  # the smoke run below that executes it; None: a change of numbers, or see `covered`
    covered: str = ""  # where the code it makes run is tested instead (a code edit, a command line, a slow path)
    # the test that asserts the effect the suggestion states: a test of this file, or "tests/<file>.py::<test>";
    # "" only with `question`
    effect: str = ""
    question: str = ""  # why nothing is asserted: what the suggestion asks is read off the run, not stated


TRIES = [
    Try("01", "`beta = 0` and then", ("beta=0",), effect="test_01_without_the_penalty_the_kl_ends_higher"),
    Try("01", "and then `beta = 0.1`", ("beta=0.1",), effect="test_01_without_the_penalty_the_kl_ends_higher"),
    Try("01", "`num_tokens = 16`", ("num_tokens=16",), effect="test_01_at_16_tokens_only_grpo_learns_in_the_updates"),
    Try("01", "edit `Bandit.reward`", (), covered="a code edit; the exercise checks of 01 run Bandit (test_exercises)",
        effect="test_01_the_reward_line_names_the_reward_the_bandit_has"),
    Try("02", '`search.rule = "uct"`', ("search.rule=uct",), run="02-uct", effect="test_02_uct_grows_a_wider_tree"),
    Try("02", '`search.q_transform = "mctx"`', ("search.q_transform=mctx",), run="02-uct",
        effect="tests/test_mcts.py::test_q_transforms_by_hand"),
    Try("02", '`search.rule = "gumbel"` with `search.leaves_per_step = 1`',
        ("search.rule=gumbel", "search.leaves_per_step=1"), run="02-gumbel",
        effect="tests/test_mcts.py::test_gumbel_wins_and_blocks_on_tictactoe"),
    Try("02", "Fewer `ttt_simulations` (50, 200)", ("ttt_simulations=50", "ttt_position=X...O...X"),
        effect="test_02_few_simulations_choose_a_losing_move_where_a_corner_loses"),
    Try("02", "Fewer `ttt_simulations` (50, 200)", ("ttt_simulations=200", "ttt_position=X...O...X"),
        effect="test_02_few_simulations_choose_a_losing_move_where_a_corner_loses"),
    Try("02", "- `search.leaves_per_step = 1`", ("search.leaves_per_step=1",),
        effect="test_02_one_leaf_per_step_takes_more_model_steps"),
    Try("02", "`alphazero.simulations = 32`", ("alphazero.simulations=32",),
        question="which positions the trained search gets wrong is the run's answer (its grade), not a stated effect"),
    Try("02", "`alphazero.arena_games = 0`", ("alphazero.arena_games=0",), run="02-gumbel",
        effect="tests/test_mcts.py::test_alphazero_grades_the_rounds_asked_for_once_per_best_net"),
    Try("02", "`alphazero.random_opening = 0`", ("alphazero.random_opening=0",),
        effect="tests/test_mcts.py::test_alphazero_random_openings"),
    Try("03", "`failing_teacher = False`", ("failing_teacher=false",), run="03-no-failing",
        effect="test_suggestions_that_change_the_code_run_run"),
    Try("03", "`teachers_per_node = 1`", ("teachers_per_node=1",),
        effect="test_03_one_teacher_per_node_writes_fewer_teacher_tokens"),
    Try("03", "Your own teachers: `teachers = [",
        ('teachers=[{"name": "local-vllm", "backend": "openai", "model": "...", "tier": "production", '
         '"base_url": "http://127.0.0.1:8000/v1", "api_key_env": "MY_KEY"}]',),
        covered="the remote path runs in every 03 smoke run (its http-tutor, a real HTTP server)",
        effect="tests/test_teachers.py::test_cpu_tier_proposes_right_and_wrong_from_every_drawn_teacher"),
    Try("04", '`train.signal = "independent"` (no tree', ("train.signal=independent",), run="04-independent",
        effect="test_suggestions_that_change_the_code_run_run"),
    Try("04", 'add `train.update = "grpo"` for plain GRPO', ("train.signal=independent", "train.update=grpo"),
        effect="test_04_independent_with_grpo_is_05s_grpo_arm"),
    Try("04", 'or `"siblings"`', ("train.signal=siblings",), run="04-siblings",
        effect="test_suggestions_that_change_the_code_run_run"),
    Try("04", '`train.update = "grpo"` with `grpo.loss_type = "grpo"`', ("train.update=grpo", "grpo.loss_type=grpo"),
        effect="test_04_the_per_sequence_mean_weighs_a_short_answers_tokens_more"),
    Try("04", 'vs `"dr_grpo"`', ("train.update=grpo", "grpo.loss_type=dr_grpo"),
        effect="test_04_the_per_sequence_mean_weighs_a_short_answers_tokens_more"),
    Try("04", '`teacher_tier = "cpu"`', ("teacher_tier=cpu",),
        covered="training with the cpu teachers: notebook 05's smoke run (its mcts and tree_teachers arms) and "
                "test_training.py; notebook 04 has no cell of its own for them (a run here: 57 s)",
        effect="test_04_the_direction_bonus_counts_only_in_the_combined_reward"),
    Try("04", '`train.reward = "combined"`', ("teacher_tier=cpu", "train.reward=combined"),
        effect="test_04_the_direction_bonus_counts_only_in_the_combined_reward"),
    Try("04", "set `resume = True`, run again", ("resume=true",),
        covered="test_training.py: resume takes the newest folder with a checkpoint and continues it",
        effect="tests/test_training.py::test_resume_takes_the_newest_run_folder_that_holds_a_checkpoint"),
    Try("04", "`torchrun --nproc_per_node=2 -m azlib train", (),
        covered="a command line: test_parallel.py and test_training.py run `azlib train`",
        effect="tests/test_parallel.py::test_two_processes_update_as_one_process_on_the_same_examples"),
    Try("05", "`fork.rounds = 0`", ("fork.rounds=0",),
        effect="tests/test_forking.py::test_with_no_forks_the_tree_is_the_independent_signal_bit_for_bit"),
    Try("05", '`fork.where = "line"`', ("fork.where=line",), run="05-one-seed",
        effect="tests/test_forking.py::test_fork_points_lie_in_the_work_never_in_the_answer_line_or_a_repeated_line"),
    Try("05", '`fork.fork_from = "wrong"`', ("fork.fork_from=wrong",), run="05-one-seed",
        effect="tests/test_forking.py::test_fork_from_chooses_whose_tokens_are_fork_points"),
    Try("05", "`arithmetic_steps = [1]`", ("arithmetic_steps=[1]",), effect="test_05_one_step_task_has_one_step_problems"),
    Try("05", '`arms = ["tree", "resample", "rft"]`', ("arms=[tree, resample, rft]",),
        effect="test_05_resample_is_the_trees_allocation_without_its_prefixes"),
    Try("05", '`train.signal = "paths"`, `train.reward = "combined"`, `text.expansion = "chunk"` with the `mcts` arm',
        ("train.signal=paths", "train.reward=combined", "text.expansion=chunk", "arms=[mcts]"), run="05-original",
        effect="test_suggestions_that_change_the_code_run_run"),
    Try("05", "`seeds = [0]`", ("seeds=[0]",), run="05-one-seed", effect="test_suggestions_that_change_the_code_run_run"),
    Try("06", "`rlt.kl_weight = 0`", ("rlt.kl_weight=0",), effect="test_06_without_the_kl_weight_copying_the_solution_pays"),
    Try("06", "`rlt.alpha = 0.5`", ("rlt.alpha=0.5",), effect="test_06_alpha_weighs_the_worst_solution_token_in"),
    Try("06", "`rlt.group_size` larger and `rlt.temperature` higher", ("rlt.group_size=4", "rlt.temperature=1.0"),
        question="how varied the explanations become and what the extra signal buys is the run's answer"),
    Try("06", '`task = "gsm8k"`', ("task=gsm8k",), effect="test_06_the_shipped_run_beside_says_when_its_task_differs"),
    Try("07", "`reward.referee_weight = 0.6`", ("reward.referee_weight=0.6",),
        effect="test_07_the_referee_settings_move_the_reward"),
    Try("07", "`reward.smoothing = 0.3`", ("reward.smoothing=0.3",), effect="test_07_the_referee_settings_move_the_reward"),
    Try("07", '`reward.advantage = "group"`', ("reward.advantage=group",),
        effect="test_07_group_advantages_keep_the_gradient"),
    Try("07", "`reward.top_k = 4`", ("reward.top_k=4",), effect="test_07_the_referee_settings_move_the_reward"),
    Try("07", "`ablations = []`", ("ablations=[]",), effect="test_07_without_ablations_two_arms_train"),
    Try("08", "`search.candidates = 16`", ("search.candidates=16",),
        effect="test_08_more_candidates_show_the_root_more_first_moves"),
    Try("08", "`size = 4` with `imitation.steps = 1200`", ("size=4", "imitation.steps=1200"),
        effect="test_08_a_four_number_game_takes_three_moves"),
    Try("08", "`legal_only = False`", ("legal_only=false",), effect="test_08_without_the_mask_the_rules_refuse_lines"),
    Try("08", "`search.widen_after = 16`", ("search.widen_after=16",),
        effect="tests/test_countdown_curves.py::"
               "test_widening_samples_more_lines_where_a_draw_left_legal_lines_out_until_it_has_them_all"),
    Try("08", '`search.children = "listed"`', ("search.children=listed",),
        effect="tests/test_countdown_curves.py::"
               "test_a_listed_expansion_has_every_legal_line_as_a_child_at_the_models_probability"),
    Try("08", '`search.children_by = "line"`', ("search.children_by=line",),
        effect="tests/test_countdown_curves.py::"
               "test_lines_to_one_position_are_one_child_with_their_summed_prior_and_the_most_probable_line"),
]

# Smoke runs of the changes that make other code run: the smoke profile, a tiny random student (a run checks that
# every cell runs with the change, not what it shows), the notebook's own arms and teachers where the smoke profile
# has others (05's: all ten arms, cpu teachers), then the changes of the TRIES that name the run.
RUNS = {
    "02-uct": ("02", ["model={tiny}"]),
    "02-gumbel": ("02", ["model={tiny}"]),
    "04-independent": ("04", ["model={tiny}"]),
    "04-siblings": ("04", ["model={tiny}"]),
    "05-one-seed": ("05", ["model={tiny}", "arms=[tree, rft]", "teacher_tier=none"]),
    "05-original": ("05", ["model={tiny}", "teacher_tier=none", "seeds=[0]"]),
    "03-no-failing": ("03", ["model={tiny}"]),
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
    metrics = RunFolder(tmp_path).metrics()[NOTEBOOKS[notebook].stem]
    assert metrics
    RUN_EFFECTS.get(name, lambda folder, metrics: None)(tmp_path, metrics)


# -- what each suggestion says it does ---------------------------------------------------------------------------

def test_every_suggestion_names_the_test_of_its_effect_and_the_test_exists():
    here = {node.name for node in ast.parse(Path(__file__).read_text()).body if isinstance(node, ast.FunctionDef)}
    for t in TRIES:
        assert bool(t.effect) != bool(t.question), f"{t.quote!r}: name the test of its effect, or why none is stated"
        if "::" in t.effect:
            path, test = t.effect.split("::")
            tree = ast.parse((config.REPO_ROOT / path).read_text())
            assert test in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, f"{t.effect} is no test"
        elif t.effect:
            assert t.effect in here, f"{t.effect} is no test of this file"
        if t.effect == "test_suggestions_that_change_the_code_run_run":
            assert t.run in RUN_EFFECTS, f"{t.quote!r}: its run {t.run} checks no effect (RUN_EFFECTS)"


def resolved(notebook: str, *sets: str):
    """The notebook's parameters with a suggestion's changes, as a learner's edit of its parameters cell gives them."""
    return config.resolve(NOTEBOOKS[notebook], None, Path("unused"), sets)[0]


def bandit_history(params, algorithm: str, *, num_updates: int, num_runs: int = 4):
    from azlib import bandit

    problem = bandit.Bandit.from_answers(params.correct_answers, params.num_tokens)
    algo = next(a for a in bandit.standard_algorithms(params.beta, params.clip_epsilon, params.ppo_epochs)
                if a.name == algorithm)
    return bandit.train(problem, algo, group_size=params.group_size, num_updates=num_updates,
                        learning_rate=params.learning_rate, num_runs=num_runs, seed=params.seed,
                        baseline_rate=params.baseline_rate)


def test_01_without_the_penalty_the_kl_ends_higher():
    """beta 0 against 0.1, GRPO on the notebook's bandit: the penalty holds the KL down and costs reward."""
    free, held = (bandit_history(resolved("01", f"beta={b}"), "GRPO", num_updates=150) for b in (0, 0.1))
    assert free.final("kl") > held.final("kl") + 0.02
    assert free.final("reward") > held.final("reward")


def test_01_at_16_tokens_only_grpo_learns_in_the_updates():
    """16 tokens: one right answer in 16 at first. GRPO's std division scales up a rare right answer's step; REINFORCE
    (its running-mean baseline starts at 0) and GRPO without the division barely move; every one is slower than at 4."""
    hard = resolved("01", "num_tokens=16")
    final = {name: bandit_history(hard, name, num_updates=300).final("reward")
             for name in ("GRPO", "GRPO without std (Dr. GRPO)", "REINFORCE", "REINFORCE + baseline")}
    assert final["GRPO"] > 2 * max(v for k, v in final.items() if k != "GRPO"), final
    assert abs(final["REINFORCE"] - final["REINFORCE + baseline"]) < 0.05, final
    assert bandit_history(resolved("01"), "GRPO", num_updates=300).final("reward") > final["GRPO"]


def test_01_the_reward_line_names_the_reward_the_bandit_has(monkeypatch):
    from azlib import bandit

    params = resolved("01")
    chain = bandit.Bandit.from_answers(params.chain_correct_answers, params.num_tokens)
    assert bandit.reward_label(chain) == "expected reward (every token right)"
    monkeypatch.setattr(bandit.Bandit, "reward",  # partial credit, a learner's edit: the share of tokens right
                        lambda self, prompts, answers: (answers == self.correct[prompts]).float().mean(-1))
    assert "every token right" not in bandit.reward_label(chain)
    source = "".join(c.source for c in nbformat.read(NOTEBOOKS["01"], as_version=4).cells if c.cell_type == "code")
    assert "bandit.reward_label(chain)" in source and "both right" not in source


def ttt_search(board: str, simulations: int, seed: int, **changes):
    import random

    from azlib import mcts
    from azlib.settings import SearchSettings
    from azlib.games import tictactoe

    settings = SearchSettings(num_simulations=simulations, max_depth=9, temperature=0, **changes)
    (result,) = mcts.search(tictactoe.TicTacToe(), [board], settings, random.Random(seed))
    return result


def test_02_uct_grows_a_wider_tree():
    """The notebook's tic-tac-toe search: UCT spreads the root's visits and grows more nodes than PUCT."""
    trees = {}
    for rule in ("puct", "uct"):
        p = resolved("02", f"search.rule={rule}")
        trees[rule] = ttt_search(p.ttt_position, p.ttt_simulations, p.seed, rule=p.search.rule, c=p.search.c)
    least = {rule: min(r.tree.nodes[i].visits for i in r.tree.root.children) for rule, r in trees.items()}
    assert len(trees["uct"].tree.nodes) > len(trees["puct"].tree.nodes) and least["uct"] > least["puct"], least


def test_02_few_simulations_choose_a_losing_move_where_a_corner_loses():
    from azlib.games import tictactoe

    def losing(board: str, simulations: int) -> int:
        moves = [ttt_search(board, simulations, seed).action for seed in range(5)]
        return sum(-tictactoe.minimax(tictactoe.play(board, m)) != tictactoe.minimax(board) for m in moves)

    p = resolved("02", "ttt_simulations=50", "ttt_position=X...O...X")
    assert losing(p.ttt_position, p.ttt_simulations) > 0
    assert losing(p.ttt_position, resolved("02").ttt_simulations) == 0
    assert losing(resolved("02").ttt_position, p.ttt_simulations) == 0, "the default position: most moves hold"


def test_02_one_leaf_per_step_takes_more_model_steps():
    """A model step is one batched expand call; one leaf per step makes one call per simulation."""
    import random

    from azlib import mcts
    from azlib.games import tictactoe

    class Counting(tictactoe.TicTacToe):
        calls = 0

        def expand(self, boards, rng):
            Counting.calls += 1
            return super().expand(boards, rng)

    calls = {}
    for leaves in (resolved("02").search.leaves_per_step, 1):
        settings = resolved("02", f"search.leaves_per_step={leaves}").search
        Counting.calls = 0
        mcts.search(Counting(), [tictactoe.EMPTY], settings, random.Random(0))
        calls[leaves] = Counting.calls
    assert calls[1] > calls[resolved("02").search.leaves_per_step], calls


@pytest.mark.model
def test_03_one_teacher_per_node_writes_fewer_teacher_tokens(tiny_model_dir):
    from azlib.models import make_backend
    from azlib.teachers import TeacherEnsemble, TeacherSpec

    student = make_backend("hf", str(tiny_model_dir))
    specs = [TeacherSpec(name=name, backend="hf", model=str(tiny_model_dir), tier="cpu", persona=persona)
             for name, persona in (("tutor", "tutor"), ("terse", "terse"))]
    asked = {}
    for per_node in (resolved("03").teachers_per_node, resolved("03", "teachers_per_node=1").teachers_per_node):
        with TeacherEnsemble(specs, shared={str(tiny_model_dir): student}, per_node=per_node, seed=0) as ensemble:
            (proposals,) = ensemble.propose([("What is 2 + 3?", "2 + 3 =")], n=1, max_new_tokens=4, seed=0)
        asked[per_node] = ({p.teacher for p in proposals}, sum(p.sample.completion_tokens for p in proposals))
    assert len(asked[1][0]) == 1 and len(asked[2][0]) == 2 and asked[1][1] < asked[2][1], asked


def test_04_independent_with_grpo_is_05s_grpo_arm():
    from azlib.settings import arm_settings

    p = resolved("04", "train.signal=independent", "train.update=grpo")
    assert arm_settings("grpo", p.fork)[1] == {"signal": p.train.signal, "update": p.train.update}


def test_04_the_per_sequence_mean_weighs_a_short_answers_tokens_more():
    """The same advantage on a 2-token and an 8-token answer: grpo's per-sequence mean gives each token of the short
    one 4 times the weight of the long one's; dr_grpo's constant normaliser, the same weight."""
    import torch

    from azlib import grpo

    per_token = {}
    for loss_type in ("grpo", "dr_grpo"):
        settings = resolved("04", "train.update=grpo", f"grpo.loss_type={loss_type}").grpo
        logp = torch.zeros(2, 8, requires_grad=True)
        mask = torch.tensor([[1.0] * 2 + [0.0] * 6, [1.0] * 8])
        loss = grpo.grpo_loss(logp, logp.detach(), logp.detach(), torch.ones(2), mask, settings, max_completion_length=8)
        (grad,) = torch.autograd.grad(loss, logp)
        per_token[loss_type] = (grad[0, 0] / grad[1, 0]).item()
    assert per_token["grpo"] == pytest.approx(4.0) and per_token["dr_grpo"] == pytest.approx(1.0), per_token


def test_04_the_direction_bonus_counts_only_in_the_combined_reward():
    from azlib.rewards import answer_reward

    for sets, counted in (((), False), (("train.reward=combined",), True)):
        kind = resolved("04", "teacher_tier=cpu", *sets).train.reward
        with_bonus, without = (answer_reward("2 + 3 = 5\n#### 5", "5", finished=True, step_pres=[-1.0], kind=kind,
                                             path_code=code) for code in ("11", ""))
        assert with_bonus.direction_bonus > 0, "the bonus is reported under either reward"
        assert (with_bonus.total > without.total) == counted, kind


def test_04_a_bonus_every_answer_earns_moves_nothing_and_the_notebook_says_so():
    """04's "Your own reward": the bonus without its correctness test, on a group of short wrong answers. Under its
    25-word limit every answer earns it: equal rewards, zero advantages, no step; a limit inside the answers' lengths
    splits the group. The notebook says when a bonus moves nothing, and which size to run instead."""
    import torch

    from azlib import grpo

    words = torch.tensor([9.0, 14.0, 18.0, 23.0])  # short answers, as the quick size's are
    groups = torch.zeros(4, dtype=torch.long)
    for limit, moves in ((25, False), (15, True)):
        rewards = 0.2 * (words <= limit).float()  # correctness 0 for every answer, the bonus alone
        assert bool(grpo.group_advantages(rewards, groups).abs().sum() > 0) == moves, limit
    nb = nbformat.read(NOTEBOOKS["04"], as_version=4)
    (text,) = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Your own reward")]
    assert "or none does" in text and "nothing moves" in text and "`train.steps = 10`" in text


def test_05_one_step_task_has_one_step_problems():
    from azlib.lab.tree_vs_sampling import task_sets

    problems, sets, _ = task_sets(resolved("05", "arithmetic_steps=[1]", "num_train_problems=16", "eval_problems=8"))
    assert {r["info"]["steps"] for r in problems + [r for rows in sets.values() for r in rows]} == {1}


def test_05_resample_is_the_trees_allocation_without_its_prefixes():
    from azlib.settings import arm_settings

    p = resolved("05", "arms=[tree, resample, rft]")
    (tree_fork, tree), (resample_fork, resample), (_, rft) = (arm_settings(a, p.fork, p.train.signal) for a in p.arms)
    assert resample == tree and resample_fork.where == "root" and tree_fork.where != "root", "forks from the question"
    assert rft["signal"] == "independent", "no extra answers for the unsolved problems"


def test_05_the_mcts_arm_takes_the_signal_of_its_search():
    from azlib.settings import arm_settings

    p = resolved("05", "train.signal=paths", "train.reward=combined", "text.expansion=chunk", "arms=[mcts]")
    assert arm_settings("mcts", p.fork, p.train.signal)[1]["signal"] == "paths"
    assert arm_settings("mcts", p.fork, resolved("05").train.signal)[1]["signal"] == "answers", \
        "the notebook's default signal (forked) is not one of the search's"


def test_05_the_verdict_says_what_it_compared():
    from azlib.lab.tree_vs_sampling import verdict

    def row(a, b, name, difference):
        return {"a": a, "b": b, "set": name, "difference": difference, "ci_low": -0.1, "ci_high": 0.1, "seeds": 1,
                "b_above_a_in": 0, "p_holm": 1.0, "significant": False}

    alone = verdict([row("base", "mcts", "heldout", 0.0), row("base", "mcts", "transfer", 0.05)], 60)
    assert alone.startswith("At 60 generated tokens per arm and seed, mcts against base on heldout and transfer: ")
    assert "heldout: mcts is level with base" in alone and "transfer: mcts is above base by 5.0 points" in alone
    usual = verdict([row("tree", "rft", "heldout", -0.02), row("base", "tree", "heldout", 0.01),
                     row("base", "rft", "heldout", 0.0)], 3000)
    assert "rft against tree, tree against base on heldout: " in usual and "rft is below tree by 2.0" in usual
    assert "rft is level with base" not in usual, "with a tree, the other arms are read against the tree"
    assert "nothing to compare" in verdict([], 60)


class Scorer:
    """A backend's score(): each continuation's log-probs from a table keyed by its first token id."""

    def __init__(self, table):
        self.table = table

    def score(self, prompts, continuations):
        return [list(self.table[c[0]][:len(c)]) for c in continuations]


def test_06_without_the_kl_weight_copying_the_solution_pays():
    """Two explanations: one copies the solution (the student then writes it surely, r_SS high, but the student would
    never write such an explanation, r_KL high); one the student finds natural (r_KL 0) that helps less. The published
    lambda prefers the natural one; lambda 0 the copy."""
    from azlib.rlt.rewards import score_explanations

    copy, natural, solution = [1, 1], [2, 2], [9, 9]
    teacher = Scorer({1: [-0.1, -0.1], 2: [-1.0, -1.0]})
    student = Scorer({1: [-3.0, -3.0, -0.1, -0.1], 2: [-1.0, -1.0, -1.0, -1.0]})  # explanation, then solution

    def preferred(*sets):
        rlt = resolved("06", *sets).rlt
        reward = score_explanations(teacher, student, ["q"] * 2, ["q"] * 2, [copy, natural], [solution] * 2,
                                    alpha=rlt.alpha, kl_weight=rlt.kl_weight).reward
        return "copy" if reward[0] > reward[1] else "natural"

    assert preferred() == "natural" and preferred("rlt.kl_weight=0") == "copy"


def test_06_alpha_weighs_the_worst_solution_token_in():
    """Two explanations after which the solution's tokens have the same mean log-prob, one with a token left
    unexplained: alpha 0.5 parts them by far more than the published 0.01."""
    import torch

    from azlib.rlt.rewards import solution_reward

    logp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-0.1, -0.1, -0.1, -3.7]])  # mean -1 both; the worst -1 and -3.7
    mask = torch.ones_like(logp)
    gap = {}
    for sets in ((), ("rlt.alpha=0.5",)):
        alpha = resolved("06", *sets).rlt.alpha
        r = solution_reward(logp, mask, alpha)
        gap[alpha] = (r[0] - r[1]).item()
    assert gap[0.5] > 0.5 and gap[0.5] > 20 * gap[0.01] > 0, gap


def test_06_the_shipped_run_beside_says_when_its_task_differs():
    from azlib.lab.shipped_results import RLT, shipped_metrics
    from azlib.viz import plot_rlt

    shipped, made = shipped_metrics(RLT)
    assert shipped["task"] == "arithmetic"
    yours = shipped | {"task": resolved("06", "task=gsm8k").task}
    title = plot_rlt({"yours: this run": yours, made.label: shipped})._suptitle
    assert title is not None and "different tasks" in title.get_text() and "gsm8k" in title.get_text()
    assert plot_rlt({"yours: this run": shipped, made.label: shipped})._suptitle is None
    source = "".join(c.source for c in nbformat.read(NOTEBOOKS["06"], as_version=4).cells if c.cell_type == "code")
    assert '"task": ' in source, "the notebook records its task in its metrics, for the figure beside"


def referee_diagnostics(*sets: str) -> dict[str, float]:
    """referee_rl_loss's diagnostics on random student and referee logits over a character vocabulary."""
    import torch

    from azlib.referee.objective import referee_rl_loss

    generator = torch.Generator().manual_seed(0)
    student, referee = (2 * torch.randn(512, 64, generator=generator) for _ in range(2))
    targets = torch.randint(64, (512,), generator=generator)
    return referee_rl_loss(student, referee, targets, resolved("07", *sets).reward)[1]


def test_07_the_referee_settings_move_the_reward():
    base = referee_diagnostics()
    assert referee_diagnostics("reward.referee_weight=0.6")["gt_reward_share"] < base["gt_reward_share"] - 0.1
    assert referee_diagnostics("reward.smoothing=0.3")["only_gt_rewarded"] < base["only_gt_rewarded"] - 0.1
    small = referee_diagnostics("reward.top_k=4")["action_set_size"]
    assert small <= 9 < base["action_set_size"]


def test_07_group_advantages_keep_the_gradient():
    """A student sure of the ground truth against one that is not: the reward-weighted loss's gradient shrinks, the
    group-relative one's does not."""
    import torch

    from azlib.referee.objective import referee_rl_loss

    generator = torch.Generator().manual_seed(0)
    referee, targets = torch.randn(256, 64, generator=generator), torch.randint(64, (256,), generator=generator)
    shrink = {}
    for sets in ((), ("reward.advantage=group",)):
        rl = resolved("07", *sets).reward
        norms = []
        for sure in (0.0, 10.0):
            student = (sure * torch.nn.functional.one_hot(targets, 64).float()).requires_grad_()
            (grad,) = torch.autograd.grad(referee_rl_loss(student, referee, targets, rl)[0], student)
            norms.append(grad.norm().item())
        shrink[rl.advantage] = norms[1] / norms[0]
    assert shrink["reward"] < 0.7 and shrink["group"] > 0.9, shrink


def test_07_without_ablations_two_arms_train():
    from azlib.lab.from_params import referee_shapes
    from azlib.referee.train import arm_specs

    names = {}
    for sets in ((), ("ablations=[]",)):
        p = resolved("07", *sets)
        names[sets] = [spec.name for spec in arm_specs(*referee_shapes(p, 64), p.reward, list(p.ablations), p.seed)]
    assert names[("ablations=[]",)] == ["ce", "rl"] and len(names[()]) > 2


def checkpoint_settings(folder: Path) -> dict:
    """The settings a training run's newest checkpoint records."""
    (latest,) = sorted(folder.glob("checkpoints/*/state.json"))[-1:]
    return read_json(latest)["config"]


def run_05_original(folder: Path, metrics: dict) -> None:
    """The mcts arm trained on the signal "paths" (its checkpoint's settings, and the reward parts paths log) and the
    verdict names the comparison it made."""
    arm = folder / "05-experiment" / "seed-0" / "mcts" / "train"
    assert checkpoint_settings(arm)["train.signal"] == "paths"
    log = [json.loads(line) for line in (arm / "train_log.jsonl").read_text().splitlines()]
    assert any("reward/hre" in step for step in log), "paths log their reward's parts"
    assert "mcts against base on" in metrics["verdict"] and "mcts is" in metrics["verdict"]


def run_05_one_seed(folder: Path, metrics: dict) -> None:
    """One seed: no comparison across seeds can be significant (p = 1 throughout)."""
    p = [v for k, v in metrics.items() if k.endswith("_p_holm")]
    assert p and all(v == 1.0 for v in p), p


def run_04(signal: str, accuracy: str):
    def check(folder: Path, metrics: dict) -> None:
        assert metrics["signal"] == signal and metrics["accuracy_column"] == accuracy
    return check


def run_03_no_failing(folder: Path, metrics: dict) -> None:
    assert metrics["failed_teachers"] == 0 and not any(k.startswith("down_") for k in metrics), "no teacher down"


RUN_EFFECTS = {
    "04-independent": run_04("independent", "sampled_accuracy"),  # without a search, the student's own answers
    "04-siblings": run_04("siblings", "answer_accuracy"),
    "05-original": run_05_original,
    "05-one-seed": run_05_one_seed,
    "03-no-failing": run_03_no_failing,
}


def _tiny_countdown_policy(legal_only: bool):
    from azlib.games.countdown.policy import Policy, PolicyValueNet
    from azlib.settings import GPTShape

    torch.manual_seed(0)
    return Policy(PolicyValueNet(GPTShape(n_layer=1, n_head=2, n_embd=16)), legal_only=legal_only)


def test_08_more_candidates_show_the_root_more_first_moves():
    import random

    from azlib.games.countdown.play import Episode, LineSearch
    from azlib.games.countdown.problems import heldout
    from azlib.games.countdown.settings import CountdownSearchSettings

    policy, roots = _tiny_countdown_policy(True), [Episode.start(p) for p in heldout(3, "unseen")[:30]]

    def first_moves(candidates: int) -> float:
        env = LineSearch(policy, CountdownSearchSettings(candidates=candidates), "oracle",
                         torch.Generator().manual_seed(0))
        return sum(len(e.children) for e in env.expand(roots, random.Random(0))) / len(roots)

    eight, sixteen = first_moves(8), first_moves(16)
    assert sixteen > eight + 1, (eight, sixteen)


def test_08_a_four_number_game_takes_three_moves():
    from azlib.games.countdown.problems import heldout
    from azlib.games.countdown.rules import solve

    for size in (3, 4):
        solutions = [solve(p) for p in heldout(size, "seen")[:20]]
        assert all(s is not None and len(s) == size - 1 for s in solutions)


def test_08_without_the_mask_the_rules_refuse_lines():
    from azlib.games.countdown.play import play_episodes
    from azlib.games.countdown.problems import heldout

    problems = heldout(3, "unseen")[:20]
    refused = {legal_only: sum(e.refused for group in play_episodes(_tiny_countdown_policy(legal_only), problems, 2, 1.0,
                                                                      torch.Generator().manual_seed(0)) for e in group)
               for legal_only in (True, False)}
    assert refused[True] == 0 and refused[False] > 10, refused
