"""The notebooks as committed: each shows the outputs of its own code at its defaults (make notebooks), within the
size budget; storing an executed copy keeps the markdown of the moment, drops live widget views for their still
pictures, and refuses a copy whose code is not the notebook's."""

import copy
import json
import subprocess
import sys

import nbformat
import pytest

from azlib.lab import config, stored_notebooks
from azlib.lab.runner import PeakMemory

NOTEBOOKS = sorted(config.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shows_the_outputs_of_its_code(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert set(config.notebook_defaults(path)) == set(config.params_model(path.stem).model_fields)
    assert stored_notebooks.drift(path) == []
    record = nb.metadata[stored_notebooks.RECORD]["executed"]
    assert record["profile"] == "defaults" and record["minutes"] > 0 and record["peak_rss_mb"] > 0
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in shown), "a notebook shows at least one figure"
    assert not any(stored_notebooks.WIDGET_VIEW in o.get("data", {}) for o in shown), "live views need a kernel"


MARKDOWN_WORDS = 400  # at most, in one markdown cell: a reader meets an idea, then the code that shows it


PROSE_08 = 1808  # words of markdown in notebook 08 at most: its longest notebook, kept to a read of minutes


def test_notebook_08s_prose_stays_within_its_budget():
    nb = nbformat.read(config.NOTEBOOKS_DIR / "08_countdown_alphazero.ipynb", as_version=4)
    assert sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown") <= PROSE_08


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_markdown_cell_is_a_wall_of_text(path):
    nb = nbformat.read(path, as_version=4)
    words = {c.get("id"): len(c.source.split()) for c in nb.cells if c.cell_type == "markdown"}
    assert max(words.values()) <= MARKDOWN_WORDS, {i: w for i, w in words.items() if w > MARKDOWN_WORDS}


def test_notebooks_fit_the_size_budget():
    sizes = {p.name: p.stat().st_size for p in NOTEBOOKS}
    assert sum(sizes.values()) <= stored_notebooks.SIZE_BUDGET, sizes
    assert max(sizes.values()) <= 2_000_000, sizes


def _notebook(*codes, markdown="# a notebook"):
    cells = [nbformat.v4.new_markdown_cell(markdown)] + [nbformat.v4.new_code_cell(c) for c in codes]
    cells[1].metadata["tags"] = ["parameters"]
    return json.loads(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))


def _executed(notebook):
    ran = copy.deepcopy(notebook)
    injected = nbformat.v4.new_code_cell("x = 2")
    injected.metadata["tags"] = ["injected-parameters"]
    injected.outputs, injected.execution_count = [], 2
    ran["cells"].insert(2, json.loads(json.dumps(injected)))
    count = 1
    for cell in ran["cells"]:
        if cell["cell_type"] == "code" and "injected-parameters" not in cell["metadata"].get("tags", []):
            cell["execution_count"] = count
            cell["metadata"]["papermill"] = {"duration": 0.1}
            cell["metadata"]["execution"] = {"iopub.status.idle": "2026-12-05T00:00:00Z"}
            count += 2 if count == 1 else 1
    ran["cells"][-1]["outputs"] = [
        {"output_type": "display_data", "metadata": {},
         "data": {stored_notebooks.WIDGET_VIEW: {"model_id": "m"}, "image/svg+xml": "<svg/>", "text/plain": "TreeWidget()"}},
        {"output_type": "display_data", "metadata": {},  # a progress bar: its text is its first state
         "data": {stored_notebooks.WIDGET_VIEW: {"model_id": "p"}, "text/plain": "steps:   0%|          | 0/3"}},
        {"output_type": "stream", "name": "stdout", "text": "4\n"}]
    ran["metadata"]["widgets"] = {"state": {"m": {}}}
    ran["metadata"]["papermill"] = {"input_path": "x"}
    return ran


def test_store_grafts_the_outputs_and_the_record_onto_the_notebook_as_it_is_now(tmp_path):
    shown = _notebook("x = 1", "print(x * 2)")
    (tmp_path / "ran.ipynb").write_text(json.dumps(_executed(shown)))
    shown["cells"][0]["source"] = "# edited while it ran"  # markdown may change during a run
    target = tmp_path / "nb.ipynb"
    target.write_text(json.dumps(shown))
    stored_notebooks.store(tmp_path / "ran.ipynb", target, {"commit": "abc", "profile": "defaults"})
    stored = json.loads(target.read_text())
    nbformat.validate(nbformat.reads(target.read_text(), as_version=4))
    assert stored["cells"][0]["source"] == "# edited while it ran"
    assert [c.get("execution_count") for c in stored["cells"]] == [None, 1, 3], "the counts as they ran (2: papermill's)"
    last = stored["cells"][-1]
    assert [o["output_type"] for o in last["outputs"]] == ["display_data", "stream"], "a widget without a still goes"
    assert set(last["outputs"][0]["data"]) == {"image/svg+xml", "text/plain"}
    assert "papermill" not in last["metadata"] and "execution" not in last["metadata"]
    assert "widgets" not in stored["metadata"]
    assert stored["metadata"]["azlib"]["executed"]["commit"] == "abc"
    assert stored_notebooks.drift(target) == []

    stored["cells"][0]["source"] = "# reworded later"
    target.write_text(json.dumps(stored))
    assert stored_notebooks.drift(target) == [], "markdown does not decide the outputs"
    stored["cells"].append(json.loads(json.dumps(nbformat.v4.new_code_cell(""))))  # a blank cell never runs
    target.write_text(json.dumps(stored))
    assert stored_notebooks.drift(target) == [], "an empty code cell is not the notebook's code"
    for counts in ([1, None], [3, 1]):
        stored["cells"][1]["execution_count"], stored["cells"][2]["execution_count"] = counts
        target.write_text(json.dumps(stored))
        assert stored_notebooks.drift(target) == [f"nb.ipynb: code cells not all run, in order (execution counts {counts})"]
    stored["cells"][1]["execution_count"], stored["cells"][2]["execution_count"] = 1, 3
    stored["cells"][2]["source"] = "print(x * 3)"
    target.write_text(json.dumps(stored))
    assert "code differs" in stored_notebooks.drift(target)[0]


def test_store_refuses_a_copy_whose_code_changed_and_drift_names_what_is_wrong(tmp_path):
    shown = _notebook("x = 1", "print(x)")
    ran = _executed(shown)
    shown["cells"][2]["source"] = "print(x + 1)"
    (tmp_path / "ran.ipynb").write_text(json.dumps(ran))
    target = tmp_path / "nb.ipynb"
    target.write_text(json.dumps(shown))
    before = target.read_text()
    with pytest.raises(ValueError, match="code changed"):
        stored_notebooks.store(tmp_path / "ran.ipynb", target, {})
    assert target.read_text() == before
    assert "no record" in stored_notebooks.drift(target)[0]

    ran["cells"][-1]["outputs"].append({"output_type": "error", "ename": "E", "evalue": "", "traceback": []})
    ran["cells"][-1]["source"] = "print(x + 1)"
    (tmp_path / "ran.ipynb").write_text(json.dumps(ran))
    stored_notebooks.store(tmp_path / "ran.ipynb", target, {})
    assert "show an error" in stored_notebooks.drift(target)[0]


def test_peak_memory_counts_the_children():
    with PeakMemory(interval=0.05) as memory:
        subprocess.run([sys.executable, "-c", "import time; b = bytearray(300 * 2**20); time.sleep(1.0)"], check=True)
    assert 300 * 2**20 < memory.peak < 2 * 300 * 2**20


def test_peak_memory_counts_a_spike_between_its_samples():
    """300 MB held for a moment and freed, a second before the first sample: the child's own high-water mark."""
    spike = "import time; b = bytearray(300 * 2**20); del b; time.sleep(1.5)"
    with PeakMemory(interval=1.0) as memory:
        subprocess.run([sys.executable, "-c", spike], check=True)
    assert 300 * 2**20 < memory.peak < 2 * 300 * 2**20
    # a spike just before the child ends, no sample at all: its ru_maxrss, read in a fresh process (this one's
    # earlier children set the bar it must pass)
    ended = ("import subprocess, sys\nfrom azlib.lab.runner import PeakMemory\nwith PeakMemory(interval=60) as m:\n"
             "    subprocess.run([sys.executable, '-c', 'b = bytearray(300 * 2**20)'], check=True)\nprint(m.peak)")
    peak = int(subprocess.run([sys.executable, "-c", ended], check=True, capture_output=True, text=True).stdout)
    assert 300 * 2**20 < peak < 2 * 300 * 2**20


def test_a_stored_figure_is_a_smaller_png_of_the_same_picture(tmp_path):
    import base64
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from PIL import Image

    fig, ax = plt.subplots(figsize=(8, 3))
    for k in range(5):
        ax.plot(np.sin(np.linspace(0, 9, 200) + k), label=f"run {k}")
    ax.legend()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    shown = _notebook("x = 1", "plot()")
    ran = _executed(shown)
    ran["cells"][-1]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                    "data": {"image/png": base64.b64encode(buffer.getvalue()).decode()}}]
    (tmp_path / "ran.ipynb").write_text(json.dumps(ran))
    target = tmp_path / "nb.ipynb"
    target.write_text(json.dumps(shown))
    stored_notebooks.store(tmp_path / "ran.ipynb", target, {})
    stored = base64.b64decode(json.loads(target.read_text())["cells"][-1]["outputs"][0]["data"]["image/png"])
    before = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    after = Image.open(io.BytesIO(stored)).convert("RGB")
    assert after.size == before.size and len(stored) < 0.6 * len(buffer.getvalue())
    difference = np.abs(np.asarray(before, dtype=int) - np.asarray(after, dtype=int))
    assert difference.mean() < 2 and np.percentile(difference, 99) < 40


def test_make_notebooks_stores_every_notebook_it_can_and_says_which_it_cannot(tmp_path, monkeypatch, capsys):
    from azlib.lab import runner

    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shown = {stem: _notebook("x = 1", f"print({k})") for k, stem in enumerate(["01_a", "02_b", "03_c", "04_d"])}
    for stem, nb in shown.items():
        (notebooks / f"{stem}.ipynb").write_text(json.dumps(nb))

    def fake_run(profile, only=None, out=None):  # what azlib.lab.runner.run leaves in its folder
        out.mkdir(parents=True)
        for stem, nb in shown.items():
            (out / f"{stem}.ipynb").write_text(json.dumps(_executed(nb)))
        (notebooks / "02_b.ipynb").write_text(json.dumps(_notebook("x = 1", "print('edited while it ran')")))
        status = {stem: {"status": "ok", "seconds": 6.0, "peak_rss_mb": 100} for stem in shown}
        status["04_d"]["status"] = "failed: DeadKernelError: Kernel died"
        (out / "config.json").write_text(json.dumps({
            "git_commit": "abc", "created": "2026-12-05T00:00:00+00:00", "status": status,
            "env_overrides": {"03_c": {"search.num_simulations": 3}}}))
        return 1

    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(runner, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(runner, "run", fake_run)
    assert runner.store_notebooks() == 1
    said = capsys.readouterr()
    assert stored_notebooks.drift(notebooks / "01_a.ipynb") == [] and "stored 01_a" in said.out
    assert "not stored 02_b" in said.err and "code changed" in said.err
    assert "not stored 03_c: environment variables changed its defaults" in said.err
    for stem in ("02_b", "03_c", "04_d"):
        assert "no record" in stored_notebooks.drift(notebooks / f"{stem}.ipynb")[0], stem


def test_a_widgets_still_form_reads_as_text_not_as_its_repr():
    """A widget whose still form is a picture says in text what it is; the object's repr never reaches a reader."""
    from azlib.mcts.search import search
    from azlib.games import tictactoe as ttt
    from azlib.settings import SearchSettings
    from azlib.viz import TreeWidget

    import random

    (result,) = search(ttt.TicTacToe(), [ttt.EMPTY], SearchSettings(num_simulations=8), random.Random(0))
    data, _ = TreeWidget(result.tree)._repr_mimebundle_()
    assert "image/svg+xml" in data and data["text/plain"].startswith("TreeWidget: a still picture")
    assert " object at 0x" not in data["text/plain"]
