"""The shipped every-arm experiment (benchmarks/results/tree-vs-sampling-all) read back with its provenance, and
azlib.viz.plot_experiment's figure of it: a bar and an interval per model, a difference per comparison, Holm marked."""

import json
import shutil

import matplotlib
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from azlib.experiment import comparison_pairs
from azlib.settings import ARMS
from azlib.shipped import TREE_VS_SAMPLING, provenance, shipped_experiment
from azlib.viz import plot_experiment

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def shipped():
    return shipped_experiment()


def test_every_arm_and_seed_reads_back_with_what_wrote_it(shipped):
    experiment, made = shipped
    assert sorted(experiment.runs) == sorted((arm, seed) for arm in ARMS for seed in (0, 1, 2))
    assert set(experiment.base) == set(experiment.eval_sets) == {"heldout", "transfer"}
    assert all(len(rows) == 200 for rows in experiment.eval_sets.values())
    assert made.label.startswith("shipped: python benchmarks/tree_vs_sampling.py --mode all") and "commit " in made.label


def test_the_figure_has_a_bar_and_an_interval_per_model_and_marks_what_holm_keeps(shipped):
    experiment, made = shipped
    fig = plot_experiment(experiment, made.label)
    accuracy, differences = fig.axes[:2], fig.axes[2:4]
    models = ["base", *experiment.params.arms]
    for ax in accuracy:
        assert [t.get_text() for t in ax.get_yticklabels()] == models
        assert sum(len(c) for c in ax.containers if isinstance(c, BarContainer)) == len(models)
        assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == len(models)
        assert 5 <= ax.get_xlim()[1] <= 30, "accuracies near 10%: the axis is in percent and ends near them"
    pairs = comparison_pairs(experiment.params.arms)
    marked = {}
    for ax, name in zip(differences, ("heldout", "transfer")):
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert [label.removesuffix(" *") for label in labels] == [f"{b} - {a}" for a, b in pairs]
        assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == len(pairs), "3 seeds: every interval"
        marked[name] = [label for label in labels if label.endswith(" *")]
    # of the 38 comparisons, one is significant after Holm (README): rationalize below the base on transfer
    assert marked == {"heldout": [], "transfer": ["rationalize - base *"]}
    assert "Holm p 0.045" in [t.get_text() for t in differences[1].texts]


def test_a_folder_without_its_provenance_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="provenance.json is missing"):
        provenance(tmp_path)
    recorded = json.loads((TREE_VS_SAMPLING / "provenance.json").read_text())
    (tmp_path / "provenance.json").write_text(json.dumps({k: v for k, v in recorded.items() if k != "commit"}))
    with pytest.raises(ValueError, match=r"lacks \['commit'\]"):
        provenance(tmp_path)


def test_answers_to_other_problems_than_the_settings_draw_are_refused(tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(TREE_VS_SAMPLING, folder)
    ids = folder / "experiment" / "eval_sets.json"
    drawn = json.loads(ids.read_text())
    ids.write_text(json.dumps({**drawn, "heldout": drawn["heldout"][::-1]}))
    with pytest.raises(ValueError, match="holds answers to other held-out problems"):
        shipped_experiment(folder)
