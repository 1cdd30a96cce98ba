"""Params validation: unknown keys, wrong types, ranges, missing folders, env overrides; the parameters cells
against the library's defaults."""

import ast
import dataclasses
import re
import subprocess
import sys

import pytest
from pathlib import Path
from pydantic import TypeAdapter

from azlib.lab import config
from azlib.lab.config import ParamsError
from azlib.settings import AnswerSampling, SearchSettings, TextSearchSettings
from azlib.settings import TrainerSettings, TrainSettings

NB01 = config.NOTEBOOKS_DIR / "01_toy_bandit_grpo.ipynb"


def good_bandit_values(**changes):
    values = config.notebook_defaults(NB01)
    values.update(changes)
    return values


def test_notebook_defaults_are_valid():
    params = config.validate("01_toy_bandit_grpo", good_bandit_values())
    assert params.group_size == 8 and params.correct_answers == [2, 0, 3]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"grup_size": 8}, "grup_size: unknown parameter"),
        ({"learning_rate": "0.1"}, "learning_rate: Input should be a valid number"),
        ({"num_updates": 1.5}, "num_updates: Input should be a valid integer"),
        ({"num_updates": -3}, "num_updates: Input should be greater than or equal to 1"),
        ({"beta": float("inf")}, "beta: Input should be a finite number"),
        ({"correct_answers": [2, 0, 9]}, "correct answers must lie in 0..3"),
        ({"group_sizes": [1, 4]}, "a group needs at least 2 answers"),
    ],
)
def test_bad_values_are_named(changes, message):
    with pytest.raises(ParamsError) as err:
        config.validate("01_toy_bandit_grpo", good_bandit_values(**changes))
    assert "notebook 01_toy_bandit_grpo" in str(err.value)
    assert message in str(err.value)


def test_profile_with_an_unknown_key_fails_before_anything_runs(tmp_path, monkeypatch):
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "01_toy_bandit_grpo.yaml").write_text("num_update: 10\n")
    monkeypatch.setattr(config, "PARAMS_DIR", tmp_path)
    with pytest.raises(ParamsError, match=r"unknown parameter\(s\) \['num_update'\] in params/smoke/01_toy_bandit_grpo"):
        config.resolve(NB01, "smoke", tmp_path / "run")
    (tmp_path / "smoke" / "01_toy_bandit_grpo.yaml").write_text("num_updates: [10\n")
    with pytest.raises(ParamsError, match=r"01_toy_bandit_grpo.yaml is not valid YAML: while parsing"):
        config.resolve(NB01, "smoke", tmp_path / "run")


def test_missing_profile_file_and_unknown_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "PARAMS_DIR", tmp_path)
    with pytest.raises(ParamsError, match="01_toy_bandit_grpo.yaml is missing"):
        config.load_profile("smoke", "01_toy_bandit_grpo")
    with pytest.raises(ParamsError, match="unknown profile 'gpu'"):
        config.load_profile("gpu", "01_toy_bandit_grpo")


def test_every_profile_resolves_for_every_notebook(tmp_path):
    for nb in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        for profile in config.PROFILES:
            params, _ = config.resolve(nb, profile, tmp_path)
            assert params.output_dir == str(tmp_path)


def test_gpu_profiles_stop_on_an_unreadable_gsm8k_and_train_04_05_with_grpo(tmp_path):
    """Only the laptop profiles (cpu, smoke: the notebooks' defaults) may swap an unreadable GSM8K for
    arithmetic; the h100 profiles of 04 and 05 name their update (05's mcts arm reads it) as GRPO."""
    for nb in sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
        if "gsm8k_fallback" not in config.params_model(nb.stem).model_fields:
            continue
        for profile in config.PROFILES:
            params, _ = config.resolve(nb, profile, tmp_path)
            assert params.gsm8k_fallback is (profile in ("cpu", "smoke")), (nb.stem, profile)
            if profile.startswith("h100") and nb.stem in ("04_gsm8k_run", "05_base_vs_trained"):
                assert params.train.update == "grpo", (nb.stem, profile)


def test_data_source_must_exist(gsm8k_dir):
    source = TypeAdapter(config.DataSource)
    assert source.validate_python("auto") == "auto"
    assert source.validate_python("hub") == "hub"
    assert source.validate_python("tests/fixtures/gsm8k") == "tests/fixtures/gsm8k"
    assert source.validate_python(str(gsm8k_dir)) == str(gsm8k_dir)
    with pytest.raises(ValueError, match="dataset folder not found: .*no/such/gsm8k"):
        source.validate_python("no/such/gsm8k")


def test_env_overrides_apply_only_to_known_params(monkeypatch):
    monkeypatch.setenv("MAX_TREE_DEPTH", "7")
    monkeypatch.setenv("MAX_TOKENS", "64")
    assert config.env_overrides({"search", "seed"}) == {"search.max_depth": 7, "search.max_tokens": 64}
    assert config.env_overrides({"seed"}) == {}
    monkeypatch.setenv("MAX_TREE_DEPTH", "deep")
    with pytest.raises(ParamsError, match="MAX_TREE_DEPTH='deep' is not an integer"):
        config.env_overrides({"search"})


def test_the_text_search_budget_variables_leave_countdowns_search_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("NUM_MCTS_ITERATIONS", "5")
    params, overrides = config.resolve(config.NOTEBOOKS_DIR / "08_countdown_alphazero.ipynb", "smoke", tmp_path)
    assert overrides == {} and params.search.simulations == 4
    params, overrides = config.resolve(config.NOTEBOOKS_DIR / "02_mcts_tree.ipynb", "smoke", tmp_path)
    assert overrides == {"search.num_simulations": 5} and params.search.num_simulations == 5


def test_a_profile_or_env_var_changes_one_field_of_a_section(tmp_path, monkeypatch):
    """Sections merge field by field: notebook cell < profile < env; the result is the library's own type."""
    nb = config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"
    cell = config.notebook_defaults(nb)["search"]
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "04_gsm8k_run.yaml").write_text("search: {num_simulations: 7}\ngrpo: {epsilon_low: 0.1}\n")
    monkeypatch.setattr(config, "PARAMS_DIR", tmp_path)
    monkeypatch.setenv("MAX_TREE_DEPTH", "5")
    params, overrides = config.resolve(nb, "smoke", tmp_path / "run")
    assert isinstance(params.search, SearchSettings) and overrides == {"search.max_depth": 5}
    assert (params.search.num_simulations, params.search.max_depth) == (7, 5)
    assert params.search.max_tokens == cell["max_tokens"] and params.search.q_transform == cell["q_transform"]
    assert params.grpo.epsilon_low == 0.1, "a GRPOSettings field the original system's params could not reach"
    assert params.model_dump()["search"]["max_depth"] == 5, "config.json and papermill get plain dicts"


def test_a_training_run_samples_its_answers_one_way():
    """A run's answers are sampled as its train section says (no top-p: GRPO's log-probs are those of the
    distribution they were drawn from), and the original system's chunked search ends an answer at depth x
    chunk tokens; independent answers ignore the search's chunks. The sections keep what they were given."""
    c = TrainerSettings(train=TrainSettings(temperature=0.3, max_new_tokens=40))
    assert c.sampling == AnswerSampling(temperature=0.3, top_p=1.0, max_new_tokens=40)
    chunked = TrainerSettings(text=TextSearchSettings(expansion="chunk", chunk_tokens=10),
                              search=SearchSettings(max_depth=6))
    assert chunked.sampling.max_new_tokens == 60 and chunked.text == TextSearchSettings(expansion="chunk", chunk_tokens=10)
    sampled = dataclasses.replace(chunked, train=TrainSettings(signal="independent", max_new_tokens=40))
    assert sampled.sampling.max_new_tokens == 40


@pytest.mark.parametrize(
    "section, value, message",
    [
        ("search", {"num_simulation": 3}, "search: Value error, unknown field(s) ['num_simulation'] of SearchSettings"),
        ("search", {"num_simulations": "3"}, "search: Value error, num_simulations: Input should be a valid integer"),
        ("search", {"num_simulations": 0}, "search: Value error, num_simulations: Input should be greater than or equal to 1 (got 0)"),
        ("search", {"c": float("nan")}, "search: Value error, c: Input should be a finite number (got nan)"),
        ("grpo", {"temperature": 0.5}, "unknown field(s) ['temperature'] of GRPOSettings"),
        ("train", {"signal": "trees"}, "signal: Input should be 'answers', 'paths'"),
        ("train", {"groups": "answers"}, "unknown field(s) ['groups'] of TrainSettings; settable: ['signal', 'update'"),
        ("train", {"signal": "sampling"}, "'independent', 'forked' or 'treerl' (got 'sampling')"),
        ("train", {"reward": "original"}, "reward: Input should be 'correctness' or 'combined' (got 'original')"),
        ("grpo", {"loss_type": "original"}, "loss_type: Input should be 'grpo', 'bnpo', 'dr_grpo', 'dapo' or "
                                            "'reward_weighted' (got 'original')"),
        ("train", {"steps": 0}, "train: Value error, steps: Input should be greater than or equal to 1 (got 0)"),
        ("train", {"group_size": 1}, "group_size: Input should be greater than or equal to 2 (got 1)"),
        ("grpo", {"clip_advantages": -1.0}, "grpo: Value error, clip_advantages: Input should be greater than 0 (got -1.0)"),
        ("lora", {"dropout": 1.0}, "lora: Value error, dropout: Input should be less than 1 (got 1.0)"),
        ("lora", 16, "expected a dict of LoraSettings fields, got int"),
    ],
)
def test_bad_section_fields_are_named(section, value, message):
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"), "output_dir": "x"}
    with pytest.raises(ParamsError) as err:
        config.validate("04_gsm8k_run", {**values, section: value})
    assert message in str(err.value)


def test_arithmetic_chains_have_one_to_four_steps():
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"), "output_dir": "x"}
    assert config.validate("04_gsm8k_run", {**values, "arithmetic_steps": [1, 2, 3, 4]}).arithmetic_steps == [1, 2, 3, 4]
    for steps in ([5], [], [0, 2]):
        with pytest.raises(ParamsError, match="arithmetic_steps: Value error, arithmetic problems have 1 to 4 steps"):
            config.validate("04_gsm8k_run", {**values, "arithmetic_steps": steps})


def test_generation_through_a_server_needs_its_url():
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"), "output_dir": "x"}
    with pytest.raises(ParamsError, match="generation 'server' needs generation_url, the vLLM server's base URL"):
        config.validate("04_gsm8k_run", {**values, "generation": "server"})
    url = "http://127.0.0.1:8000/v1"
    assert config.validate("04_gsm8k_run", {**values, "generation": "server", "generation_url": url}).generation_url == url


def test_generation_through_a_server_is_refused_where_the_student_must_score_its_teachers_text():
    """The search's and the teacher-written forks' teachers are scored by the student (a server cannot: its
    score() is a BackendError), so those settings stop before anything starts; teachers left unused do not."""
    served = {"generation": "server", "generation_url": "http://127.0.0.1:8000/v1", "output_dir": "x"}
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb"), **served, "teacher_tier": "cpu"}
    searches = [{"train": {**values["train"], "signal": signal}} for signal in ("answers", "paths", "siblings", "visits")]
    for change in (*searches,
                   {"train": {**values["train"], "signal": "forked"}, "fork": {**values["fork"], "writer": "teachers"}}):
        with pytest.raises(ParamsError, match="generation 'server' cannot score the teachers' text"):
            config.validate("04_gsm8k_run", {**values, **change})
    independent = {"train": {**values["train"], "signal": "independent"}}
    assert config.validate("04_gsm8k_run", {**values, **independent}).teacher_tier == "cpu"
    assert config.validate("04_gsm8k_run", {**values, "teacher_tier": "none"}).generation == "server"
    five = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "05_base_vs_trained.ipynb"), **served,
            "teacher_tier": "cpu"}
    with pytest.raises(ParamsError, match="arm mcts: generation 'server' cannot"):
        config.validate("05_base_vs_trained", {**five, "arms": ["tree", "mcts"]})
    answers = {"train": {**five["train"], "signal": "answers"}}  # a search signal that no arm of these trains by
    assert config.validate("05_base_vs_trained", {**five, **answers, "arms": ["tree", "rft"]}).arms == ["tree", "rft"]
    assert config.validate("05_base_vs_trained", {**five, "arms": ["tree", "rft"]}).arms == ["tree", "rft"]


def test_from_namespace_validates_a_notebooks_globals(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "INTERACTIVE_RUNS", str(tmp_path / "interactive"))
    namespace = good_bandit_values(num_seeds=3, output_dir=config.INTERACTIVE_RUNS) | {"plt": object()}
    params = config.from_namespace("01_toy_bandit_grpo", namespace)
    assert params.num_seeds == 3 and Path(params.output_dir).parent == tmp_path / "interactive"
    with pytest.raises(ParamsError, match="num_seeds"):
        config.from_namespace("01_toy_bandit_grpo", namespace | {"num_seeds": 0})
    assert list((tmp_path / "interactive").iterdir()) == [Path(params.output_dir)], "a rejected run makes no folder"


def test_azlib_imports_no_optional_package():
    """vLLM, Unsloth, bitsandbytes, TRL and verifiers are extras: importing every azlib module pulls none."""
    code = ("import importlib, pkgutil, sys, azlib\n"
            "for m in pkgutil.walk_packages(azlib.__path__, 'azlib.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(p for p in ('vllm', 'unsloth', 'bitsandbytes', 'trl', 'verifiers') if p in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_each_interactive_run_gets_its_own_folder_and_resume_needs_a_checkpoint(tmp_path, monkeypatch):
    """Which folder a resume takes among folders with and without checkpoints: test_training.py, on a real one."""
    monkeypatch.setattr(config, "INTERACTIVE_RUNS", str(tmp_path / "interactive"))
    values = config.notebook_defaults(config.NOTEBOOKS_DIR / "04_gsm8k_run.ipynb") | {"output_dir": config.INTERACTIVE_RUNS}
    with pytest.raises(ParamsError, match="holds no earlier run of 04_gsm8k_run to continue"):
        config.from_namespace("04_gsm8k_run", values | {"resume": True})
    first, second = (config.from_namespace("04_gsm8k_run", values).output_dir for _ in range(2))
    assert first != second and all(Path(p).is_dir() and Path(p).parent == tmp_path / "interactive" for p in (first, second))
    with pytest.raises(ParamsError, match=rf"none of the 2 run folder\(s\) of 04_gsm8k_run .* holds a checkpoint "
                                          rf"\(newest: {Path(second).name}\), so there is nothing to continue"):
        config.from_namespace("04_gsm8k_run", values | {"resume": True})
    assert config.from_namespace("04_gsm8k_run", values | {"output_dir": "outputs/x"}).output_dir == "outputs/x"


@pytest.mark.parametrize("path", sorted(config.NOTEBOOKS_DIR.glob("0*.ipynb")), ids=lambda p: p.stem)
def test_every_notebooks_run_all_writes_a_folder_of_its_own(path, tmp_path, monkeypatch):
    """Run All twice in JupyterLab: two folders under outputs/interactive, so a rerun never overwrites a run."""
    monkeypatch.setattr(config, "INTERACTIVE_RUNS", str(tmp_path / "interactive"))
    values = config.notebook_defaults(path)
    assert values["output_dir"] == "outputs/interactive"
    first, second = (config.from_namespace(path.stem, values | {"output_dir": config.INTERACTIVE_RUNS}).output_dir
                     for _ in range(2))
    assert first != second and {Path(first).parent, Path(second).parent} == {tmp_path / "interactive"}
    assert Path(first).name.startswith(f"{path.stem}-")


def _library_default(notebook: str, section: str | None, key: str) -> tuple[bool, object]:
    """(has one, value): the schema's default of a parameter or section field, else the section's settings type's."""
    defaults = config.library_defaults(notebook)
    if section is None:
        return key in defaults, defaults.get(key)
    if section in defaults:
        return True, defaults[section][key]
    kind = config.params_model(notebook).model_fields[section].annotation
    f = {f.name: f for f in dataclasses.fields(kind)}[key]
    return True, f.default if f.default is not dataclasses.MISSING else f.default_factory()


@pytest.mark.parametrize("path", sorted(config.NOTEBOOKS_DIR.glob("0*.ipynb")), ids=lambda p: p.stem)
def test_parameters_cells_say_where_they_differ_from_the_library_defaults(path):
    """The library holds every default (the schema's fields, the settings types' for sections); a parameters
    cell line that sets another value says so with "(library default: X)", X the library's, and says nothing of
    the kind otherwise."""
    import nbformat

    cell = next(c for c in nbformat.read(path, 4).cells if "parameters" in c.metadata.get("tags", []))
    fields = config.params_model(path.stem).model_fields
    section, checked = None, 0
    for line in cell.source.splitlines():
        if opening := re.match(r"^(\w+) = \{", line):  # a section: a settings type's fields, one per line
            section = opening.group(1) if dataclasses.is_dataclass(fields[opening.group(1)].annotation) else None
            continue
        if line.startswith("}"):
            section = None
            continue
        top = re.match(r"^(\w+) = (.*?)(?:\s+#(.*))?$", line)
        entry = re.match(r'^\s+"(\w+)": (.*?),(?:\s*#(.*))?$', line) if section else None
        if top and top.group(1) in fields and top.group(1) != "output_dir":
            where, key, value, comment = top.group(1), top.group(1), top.group(2), top.group(3)
            has, default = _library_default(path.stem, None, key)
        elif entry:
            where, key, value, comment = f"{section}.{entry.group(1)}", entry.group(1), entry.group(2), entry.group(3)
            has, default = _library_default(path.stem, section, key)
        else:
            continue
        if not has:
            continue
        value, marker = ast.literal_eval(value), re.search(r"\(library default: (.*)\)\s*$", comment or "")
        if value == default:
            assert marker is None, f"{path.stem}: {where} = {value!r} is the library default; drop the marker"
        else:
            assert marker, f"{path.stem}: {where} = {value!r} differs from the library's {default!r}: say so " \
                           f"with '(library default: {default!r})'"
            assert ast.literal_eval(marker.group(1)) == default, \
                f"{path.stem}: {where}'s marker says {marker.group(1)}, the library's default is {default!r}"
        checked += 1
    assert checked, f"{path.stem}: no parameter with a library default read"


@pytest.mark.parametrize("notebook", ["04_gsm8k_run", "05_base_vs_trained", "07_referee_rl"])
@pytest.mark.parametrize("profile", config.PROFILES)
def test_the_command_line_reads_no_notebook_and_trains_what_the_notebook_runs(notebook, profile, monkeypatch,
                                                                              tmp_path):
    """`python -m azlib train` (04), `experiment` (05) and `referee` (07) build the parameters from the library's
    defaults and the profile; under every profile they equal what the runner gives the notebook (its parameters
    cell, then the profile)."""
    import papermill

    expected = config.resolve(config.NOTEBOOKS_DIR / f"{notebook}.ipynb", profile, tmp_path)[0]

    def no_notebook(*args, **kwargs):
        raise AssertionError("the command line opened a notebook")

    monkeypatch.setattr(papermill, "inspect_notebook", no_notebook)
    assert config.resolve_library(notebook, profile, tmp_path)[0] == expected


def test_the_command_lines_set_overrides_the_profile_field_by_field(tmp_path):
    """`azlib train --profile smoke --set train.steps=2 model=/m seeds='[0, 1]'`: each value read as YAML, a
    dotted name changes one field of its section and leaves the profile's others; a wrong name is named."""
    profile = config.resolve_library("04_gsm8k_run", "smoke", tmp_path)[0]
    params = config.resolve_library("04_gsm8k_run", "smoke", tmp_path, ["train.steps=2", "model=/m", "lora.r=8"])[0]
    assert (params.train.steps, params.model, params.lora.r) == (2, "/m", 8)
    assert params.train.problems_per_step == profile.train.problems_per_step and params.lora.alpha == profile.lora.alpha
    assert config.resolve_library("05_base_vs_trained", "smoke", tmp_path, ["seeds=[3, 4]"])[0].seeds == [3, 4]
    for wrong, named in [("train.stepz=2", r"unknown field\(s\) \['stepz'\] of TrainSettings"),
                         ("trian.steps=2", "no section 'trian'"), ("train.steps=many", "steps: Input should be"),
                         ("steps", "write NAME=VALUE")]:
        with pytest.raises(ParamsError, match=named):
            config.resolve_library("04_gsm8k_run", "smoke", tmp_path, [wrong])


def test_a_secret_in_a_teachers_options_is_refused_without_echoing_it():
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / "03_teacher_ensemble.ipynb"), "output_dir": "x"}
    teacher = {"name": "remote", "backend": "openai", "model": "m", "tier": "free",
               "base_url": "http://127.0.0.1:9/v1", "options": {"api_key": "sk-LIVE-SECRET"}}
    with pytest.raises(ParamsError) as err:
        config.validate("03_teacher_ensemble", {**values, "teachers": [teacher]})
    assert "options ['api_key'] would be written into the run's config.json" in str(err.value)
    assert "sk-LIVE-SECRET" not in str(err.value)


@pytest.mark.parametrize("notebook", ["05_base_vs_trained", "08_countdown_alphazero"])
def test_a_repeated_seed_or_arm_is_refused(notebook):
    values = {**config.notebook_defaults(config.NOTEBOOKS_DIR / f"{notebook}.ipynb"), "output_dir": "x"}
    assert config.validate(notebook, values).seeds == values["seeds"]
    for name in ("seeds", "arms"):
        with pytest.raises(ParamsError, match=f"{name}"):
            config.validate(notebook, {**values, name: values[name][:1] * 2})
