"""azlib.lab.tree_vs_sampling on a hand-written run folder (no model): what it reads back, the comparisons across
seeds (per-seed McNemar, seeds where b is above a, over the seeds both arms finished), the mechanism; and
one real run of two arms on the embedded model: each arm's engine closed once its result is on disk."""

import json
from types import SimpleNamespace

import pytest

from azlib.lab.tree_vs_sampling import Experiment, comparison_pairs


def write_run(folder, correct: dict[str, list[int]], log=None):
    folder.mkdir(parents=True, exist_ok=True)
    for name, flags in correct.items():
        records = [{"id": f"p{i}", "correct": bool(c), "tokens": 10 + i} for i, c in enumerate(flags)]
        (folder / f"records-{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if log is not None:
        (folder / "result.json").write_text(json.dumps({"tokens": sum(r["tokens"] for r in log), "log": log}))


def step(tokens, verified, solved):
    return {"tokens": tokens, "verified": verified, "solved": solved, "truncated": 0.5, "prefill_tokens": tokens // 2}


@pytest.fixture
def experiment(tmp_path):
    write_run(tmp_path / "base", {"heldout": [1, 0, 0, 0, 0, 0]})
    tree = {0: [1, 1, 1, 0, 0, 0], 1: [1, 1, 1, 1, 0, 0], 2: [1, 1, 0, 0, 0, 0]}
    rft = {0: [1, 1, 0, 0, 0, 0], 1: [1, 0, 0, 0, 0, 0]}  # seed 2 not finished yet
    for seed, flags in tree.items():
        write_run(tmp_path / f"seed-{seed}" / "tree", {"heldout": flags}, [step(1000, 2, 1), step(1000, 1, 1)])
    for seed, flags in rft.items():
        write_run(tmp_path / f"seed-{seed}" / "rft", {"heldout": flags}, [step(2000, 1, 1)])
    write_run(tmp_path / "seed-2" / "rft", {"heldout": [1] * 6})  # records but no result.json: unfinished
    params = SimpleNamespace(seeds=[0, 1, 2], arms=["tree", "rft"], seed=0, eval_max_new_tokens=8)
    return Experiment(params, [], {"heldout": [{"info": {"id": f"p{i}"}} for i in range(6)]}, tmp_path).load()


def test_load_reads_only_finished_runs(experiment):
    assert sorted(experiment.runs) == [("rft", 0), ("rft", 1), ("tree", 0), ("tree", 1), ("tree", 2)]
    assert experiment.runs[("tree", 1)].accuracy("heldout") == pytest.approx(4 / 6)
    row = next(r for r in experiment.accuracies() if (r["model"], r["seed"], r["set"]) == ("tree", 1, "heldout"))
    assert (row["correct"], row["problems"]) == (4, 6), "the counts behind the accuracy, for its Wilson interval"


def test_comparisons_over_the_seeds_both_finished(experiment):
    rows = {(r["a"], r["b"]): r for r in experiment.comparisons([("rft", "tree"), ("base", "tree")])}
    tree_vs_rft = rows[("rft", "tree")]
    assert tree_vs_rft["seeds"] == 2, "rft's seed 2 is not finished: compared over seeds 0 and 1"
    assert tree_vs_rft["difference"] == pytest.approx((1 / 6 + 3 / 6) / 2)
    assert tree_vs_rft["b_above_a_in"] == 2
    assert tree_vs_rft["mcnemar_p"] == pytest.approx([1.0, 0.25]), "seed 0: 1 discordant pair; seed 1: 3, all one way"
    base = rows[("base", "tree")]
    assert base["seeds"] == 3 and base["difference"] == pytest.approx((2 + 3 + 1) / 3 / 6)
    assert base["p_holm"] >= base["p"], "Holm never lowers a p-value"


def test_mechanism_counts_per_thousand_tokens(experiment):
    by_run = {(m["arm"], m["seed"]): m for m in experiment.mechanism()}
    assert by_run[("tree", 0)]["verified_per_1k"] == pytest.approx(1.5)
    assert by_run[("tree", 0)]["solved_per_1k"] == pytest.approx(1.0)
    assert by_run[("rft", 1)]["verified_per_1k"] == pytest.approx(0.5)
    assert by_run[("rft", 1)]["prefill_per_generated"] == pytest.approx(0.5)


def test_answers_on_disk_are_only_compared_with_the_same_problems(experiment):
    rows = [{"info": {"id": f"p{i}"}} for i in range(6)]
    Experiment(experiment.params, [], {"heldout": rows}, experiment.folder).load()  # writes the ids
    other = [{"info": {"id": f"q{i}"}} for i in range(6)]
    with pytest.raises(ValueError, match="other held-out problems"):
        Experiment(experiment.params, [], {"heldout": other}, experiment.folder).load()


def test_task_sets_hold_out_chains_and_reword_the_same_problems():
    from azlib.lab.tree_vs_sampling import task_sets

    params = SimpleNamespace(task="arithmetic", gsm8k="auto", gsm8k_fallback=False, num_train_problems=300, seed=0,
                             arithmetic_steps=[1, 2], eval_problems=50, eval_gsm8k_problems=0)
    problems, sets, note = task_sets(params)
    trained = {r["info"]["solution"] for r in problems}
    assert note == "" and len(sets["heldout"]) == len(sets["transfer"]) == 50
    assert not trained & {r["info"]["solution"] for r in sets["heldout"]}, "no held-out chain was trained on"
    for held, reworded in zip(sets["heldout"], sets["transfer"]):
        assert held["info"]["solution"] == reworded["info"]["solution"] and held["prompt"] != reworded["prompt"]
        assert (held["info"]["wording"], reworded["info"]["wording"]) == ("train", "transfer")


def test_gsm8k_held_out_sets_have_the_configured_sizes(gsm8k_dir):
    from azlib.data import load_gsm8k, solution_steps
    from azlib.lab.tree_vs_sampling import task_sets

    params = SimpleNamespace(task="gsm8k", gsm8k=str(gsm8k_dir), gsm8k_fallback=False, num_train_problems=8, seed=0,
                             arithmetic_steps=[1], eval_problems=5, eval_gsm8k_problems=7)
    problems, sets, note = task_sets(params)
    assert note == "" and [r["info"]["id"] for r in problems] == [f"gsm8k-train-{i}" for i in range(8)]
    assert sorted(sets) == ["gsm8k", "heldout"], "GSM8K has no reworded transfer set"
    assert [r["info"]["id"] for r in sets["heldout"]] == [f"gsm8k-test-{i}" for i in range(5)]
    chosen = {r["info"]["id"] for r in sets["gsm8k"]}
    left_out = [solution_steps(r) for r in load_gsm8k(str(gsm8k_dir), "test") if r["info"]["id"] not in chosen]
    assert len(chosen) == 7 and max(r["info"]["steps"] for r in sets["gsm8k"]) <= min(left_out), "the easiest 7"


def test_an_unreadable_gsm8k_is_an_error_unless_the_fallback_is_allowed(tmp_path):
    from azlib.data import DataUnavailable
    from azlib.lab.tree_vs_sampling import task_sets

    missing = tmp_path / "no-gsm8k"
    strict = SimpleNamespace(task="gsm8k", gsm8k=str(missing), gsm8k_fallback=False, num_train_problems=8, seed=0,
                             arithmetic_steps=[1], eval_problems=5, eval_gsm8k_problems=0)
    with pytest.raises(DataUnavailable, match=r"train split not found: .*no-gsm8k/train.jsonl .*gsm8k_fallback is off"):
        task_sets(strict)
    problems, sets, note = task_sets(SimpleNamespace(**{**vars(strict), "gsm8k_fallback": True}))
    assert problems[0]["info"]["source"] == "arithmetic" and len(sets["heldout"]) == 5
    assert note.startswith("GSM8K unavailable, using arithmetic problems: GSM8K train split not found")
    # arithmetic training with GSM8K's easiest test problems as a transfer set: the same rule
    transfer = SimpleNamespace(**{**vars(strict), "task": "arithmetic", "eval_gsm8k_problems": 7})
    with pytest.raises(DataUnavailable, match=r"test split not found: .*no-gsm8k/test.jsonl"):
        task_sets(transfer)
    _, sets, note = task_sets(SimpleNamespace(**{**vars(transfer), "gsm8k_fallback": True}))
    assert "gsm8k" not in sets and note.startswith("GSM8K test unavailable, not evaluated")


@pytest.mark.model
def test_every_model_answers_through_one_instrument_opened_after_the_training(tmp_path, monkeypatch):
    """The base, an azlib arm and the TRL arm are evaluated by one backend (hf here: generation "hf"), each
    arm's saved adapter put on the base weights in turn: one instrument for every model compared. Each arm's
    student is closed before the next trains, and the instrument after every result is on disk."""
    from azlib.lab import tree_vs_sampling as experiment_module
    from azlib.lab import config
    from azlib.lab.tree_vs_sampling import task_sets
    from azlib.models.hf import HFBackend
    from azlib.models.student import Student

    params, _ = config.resolve(config.NOTEBOOKS_DIR / "05_base_vs_trained.ipynb", "smoke", tmp_path)
    params = params.model_copy(update={"seeds": [0], "arms": ["rft", "trl"], "eval_problems": 2})
    problems, sets, _ = task_sets(params)
    closed = []  # per close: the owner and the arms whose result was on disk then
    answered = []  # per evaluation (the base, rft, trl): the backend and the weights it answered with

    def spy(cls):
        original = cls.close

        def close(self):
            closed.append((cls.__name__, sorted(p.parent.name for p in tmp_path.glob("seed-0/*/result.json"))))
            original(self)
        monkeypatch.setattr(cls, "close", close)

    spy(Student)
    spy(HFBackend)
    evaluate = experiment_module.evaluate

    def recorded(backend, rows, *args, **kwargs):
        answered.append((backend, type(backend.model).__name__))
        return evaluate(backend, rows, *args, **kwargs)

    monkeypatch.setattr(experiment_module, "evaluate", recorded)
    experiment = Experiment(params, problems, {"heldout": sets["heldout"]}, tmp_path).run(progress=False)
    assert closed == [("Student", []), ("HFBackend", []),  # rft's student and its generator, once trained
                      ("HFBackend", ["rft", "trl"])], "each student closed after its training, the instrument last"
    assert len({id(backend) for backend, _ in answered}) == 1, "one backend answered for every model"
    assert [weights for _, weights in answered] == ["LlamaForCausalLM", "PeftModelForCausalLM", "PeftModelForCausalLM"]
    assert set(experiment.runs) == {("rft", 0), ("trl", 0)}
    assert all((tmp_path / "seed-0" / arm / "train" / "adapter" / "adapter_config.json").is_file() for arm in ("rft", "trl"))


def test_an_arm_stops_at_train_steps_when_its_budget_is_not_reached(tmp_path, tiny_model_dir):
    """train.steps bounds every arm: with a token budget that two steps do not reach, an arm of train.steps = 2
    (a tiny random student) trains two steps and stops, its tokens short of the budget."""
    from azlib.lab.config import resolve_library
    from azlib.lab.tree_vs_sampling import Engines, task_sets

    budget = 10**6
    params, _ = resolve_library("05_base_vs_trained", "smoke", tmp_path, [
        f"model={tiny_model_dir}", "arms=[rft]", "seeds=[0]", "train.steps=2", f"train.token_budget={budget}"])
    problems, sets, _ = task_sets(params)
    with Engines(params) as engines:
        Experiment(params, problems, {"heldout": sets["heldout"]}, tmp_path)._train("rft", 0, engines)
    trained = json.loads((tmp_path / "seed-0" / "rft" / "trained.json").read_text())
    assert [record["step"] for record in trained["log"]] == [1, 2]
    assert 0 < trained["tokens"] < budget


@pytest.mark.model
def test_a_problem_in_several_sets_is_answered_once(tmp_path, monkeypatch, hf):
    """GSM8K's held-out problems are among its test problems: the base answers the union once (one evaluation,
    each problem once), and each set's records are its own problems' answers in its order."""
    from azlib.lab import tree_vs_sampling as experiment_module
    from azlib.data import arithmetic_problems

    rows = arithmetic_problems(4, seed=5, steps=(1,))
    sets = {"heldout": rows[:2], "gsm8k": rows[::-1]}
    evaluated = []
    evaluate = experiment_module.evaluate
    monkeypatch.setattr(experiment_module, "evaluate",
                        lambda backend, problems, *a, **k: evaluated.append(len(problems)) or evaluate(backend, problems, *a, **k))
    params = SimpleNamespace(seeds=[0], arms=[], seed=0, eval_max_new_tokens=8)
    records = Experiment(params, [], sets, tmp_path)._evaluate(hf, tmp_path / "base")
    assert evaluated == [4]
    assert {name: [r["prompt"] for r in recs] for name, recs in records.items()} == {
        name: [r["prompt"] for r in rows] for name, rows in sets.items()}
    assert records["heldout"] == records["gsm8k"][:-3:-1], "the same answer in both sets"


def test_the_reported_comparisons_are_each_arm_against_the_tree_then_against_the_base():
    assert comparison_pairs(["tree", "rft", "grpo"]) == [("rft", "tree"), ("grpo", "tree"), ("base", "tree"),
                                                         ("base", "rft"), ("base", "grpo")]
    assert comparison_pairs(["rft", "grpo"]) == [("base", "rft"), ("base", "grpo")], "no tree: nothing against it"


def test_the_verdict_gives_no_interval_below_three_seeds_and_no_gap_for_a_tie():
    from azlib.statistics import comparison_table
    from azlib.lab.tree_vs_sampling import verdict

    def rows(seeds):
        table = comparison_table({"base": [0.5] * seeds, "tree": [0.5] * seeds, "rft": [0.4 + 0.01 * s for s in
                                                                                          range(seeds)]},
                                 [("base", "tree"), ("rft", "tree")], {("base", "tree"): [1] * seeds,
                                                                       ("rft", "tree"): [1] * seeds})
        return [r | {"set": "heldout", "b_above_a_in": 0} for r in table]

    two, three = verdict(rows(2), 100), verdict(rows(3), 100)
    assert "tree is level with base (" in two and "by 0.0 points" not in two
    assert two.count("no interval: it needs 3 seeds or more") == 2 and "95% CI" not in two
    assert three.count("95% CI") == 2 and "tree is above rft by 9.0 points" in three
