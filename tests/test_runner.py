"""The papermill runner: validation before execution, failure handling, env overrides, CLI."""

import json
import re

import nbformat
import pytest

from azlib.lab import config, runner
from azlib.lab.cli import main
from azlib.lab.run_folder import write_page


def write_notebook(path, params_source, body_source):
    params = nbformat.v4.new_code_cell(params_source)
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(body_source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


class BudgetParams(config.NotebookParams):
    search: config.Search


@pytest.fixture
def fake_kit(tmp_path, monkeypatch):
    """A notebooks/ and params/ pair: 01 works, 02 fails after recording a metric, 03 must never run."""
    notebooks, params = tmp_path / "notebooks", tmp_path / "params"
    notebooks.mkdir()
    (params / "smoke").mkdir(parents=True)
    record = ("from azlib.lab.run_folder import RunFolder\n"
              "RunFolder(output_dir).record_metrics({name!r}, {{'max_tokens': search['max_tokens']}})\n")
    write_notebook(notebooks / "01_ok.ipynb", "seed = 0\nsearch = {'max_tokens': 16}\noutput_dir = 'x'",
                   record.format(name="01_ok"))
    write_notebook(notebooks / "02_broken.ipynb", "seed = 0\nsearch = {'max_tokens': 16}\noutput_dir = 'x'",
                   record.format(name="02_broken") + "raise RuntimeError('boom')")
    write_notebook(notebooks / "03_never.ipynb", "seed = 0\nsearch = {'max_tokens': 16}\noutput_dir = 'x'",
                   record.format(name="03_never"))
    for stem in ("01_ok", "02_broken", "03_never"):
        (params / "smoke" / f"{stem}.yaml").write_text("search: {max_tokens: 32}\n")
        monkeypatch.setitem(config.NOTEBOOK_PARAMS, stem, BudgetParams)
    monkeypatch.setattr(config, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(config, "PARAMS_DIR", params)
    return tmp_path


def test_a_failing_notebook_stops_the_run_and_keeps_its_partial_output(fake_kit, monkeypatch, capsys):
    monkeypatch.setenv("MAX_TOKENS", "48")
    out = fake_kit / "run"
    assert main(["run", "--profile", "smoke", "--out", str(out)]) == 1
    assert "02_broken.ipynb failed" in capsys.readouterr().err

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["status"]["01_ok"]["status"] == "ok"
    assert cfg["status"]["02_broken"]["status"] == "failed: RuntimeError: boom"
    assert "03_never" not in cfg["status"] and not (out / "03_never.ipynb").exists()
    assert cfg["env_overrides"]["01_ok"] == {"search.max_tokens": 48}
    assert cfg["notebooks"]["01_ok"]["search"]["max_tokens"] == 48, "env var beats the profile"
    assert cfg["versions"]["torch"].startswith("2.") and cfg["git_commit"]

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["01_ok"] == {"max_tokens": 48}, "the notebook received the overridden value"
    partial = nbformat.read(out / "02_broken.ipynb", as_version=4)
    assert any(o.get("ename") == "RuntimeError" for c in partial.cells for o in c.get("outputs", []))
    assert (out / "01_ok.ipynb").exists()
    page = (out / "index.md").read_text()
    assert "| [02_broken](#02_broken) | failed: RuntimeError: boom |" in page and "03_never" not in page


def test_a_run_into_a_folder_of_the_same_profile_keeps_its_other_notebooks(fake_kit):
    out = fake_kit / "run"
    assert runner.run("smoke", only=["01"], out=out) == 0
    first = json.loads((out / "config.json").read_text())
    assert runner.run("smoke", only=["03"], out=out) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert list(cfg["status"]) == ["01_ok", "03_never"] and cfg["status"]["01_ok"] == first["status"]["01_ok"]
    assert set(cfg["notebooks"]) == {"01_ok", "03_never"} and cfg["status"]["03_never"]["git_commit"]
    assert json.loads((out / "metrics.json").read_text()).keys() == {"01_ok", "03_never"}
    assert "| [01_ok](#01_ok) | ok |" in (out / "index.md").read_text()
    assert " at commit " not in (out / "index.md").read_text(), "one commit: the page's header says it"
    cfg["status"]["01_ok"]["git_commit"] = "0123abc"  # 01 ran at an earlier commit than the page's
    (out / "config.json").write_text(json.dumps(cfg))
    assert "minutes at commit `0123abc`:" in write_page(out).read_text()
    with pytest.raises(config.ParamsError, match="holds a run of profile smoke with --set nothing"):
        runner.run(None, only=["01"], out=out)
    with pytest.raises(config.ParamsError, match="holds a run of profile smoke"):
        runner.run("smoke", only=["01"], out=out, assignments=["search.max_tokens=8"])


class ResumableParams(BudgetParams):
    resume: bool = False


def test_a_run_resumed_in_its_folder_joins_it_and_a_jupyterlab_folder_is_replaced(fake_kit, monkeypatch):
    monkeypatch.setitem(config.NOTEBOOK_PARAMS, "01_ok", ResumableParams)
    write_notebook(fake_kit / "notebooks" / "01_ok.ipynb",
                   "seed = 0\nsearch = {'max_tokens': 16}\nresume = False\noutput_dir = 'x'", "print(resume)")
    out = fake_kit / "run"
    assert runner.run("smoke", only=["01"], out=out) == 0
    assert runner.run("smoke", only=["01"], out=out, assignments=["resume=true"]) == 0, "--set resume continues it"
    assert json.loads((out / "config.json").read_text())["set"] == {"resume": True}
    lab = fake_kit / "lab"
    lab.mkdir()
    (lab / "config.json").write_text(json.dumps({"launched_by": "notebook", "notebooks": {"02_more": {}},
                                                 "status": {"02_more": {"status": "ok", "seconds": 1.0}}}))
    assert runner.run("smoke", only=["01"], out=lab) == 0
    assert list(json.loads((lab / "config.json").read_text())["status"]) == ["01_ok"], "not read as one run"
    (lab / "config.json").write_text("{not json")
    with pytest.raises(config.ParamsError, match="the run folder's record is damaged"):
        runner.run("smoke", only=["01"], out=lab)


def test_the_run_ends_with_a_page_of_its_numbers_figures_and_notebooks(fake_kit, monkeypatch, capsys):
    """index.md: per notebook its status, a link to the executed copy, its verdict once and its other numbers, and
    every figure it showed with a caption: a saved one from figures/ under its name and title, one only shown taken
    out of its outputs into index_files/ under the heading above its cell."""
    body = ("import matplotlib.pyplot as plt\n"
            "from azlib.lab.run_folder import RunFolder\n"
            "run = RunFolder(output_dir)\n"
            "run.record_metrics('04_plots', {'verdict': 'a | b', 'share': 0.123456, 'none': None})\n"
            "fig, ax = plt.subplots()\n"
            "ax.plot([0, 1])\n"
            "fig.suptitle('Reward against step')\n"
            "run.save_figure(fig, '04_reward')\n"
            "plt.show()\n"
            "plt.plot([0, 2])\n"
            "plt.show()\n")
    path = config.NOTEBOOKS_DIR / "04_plots.ipynb"
    write_notebook(path, "seed = 0\nsearch = {'max_tokens': 16}\noutput_dir = 'x'", body)
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell("Some words.\n\n## Two curves\n\nMore words."))
    nbformat.write(nb, path)
    (config.PARAMS_DIR / "smoke" / "04_plots.yaml").write_text("{}\n")
    monkeypatch.setitem(config.NOTEBOOK_PARAMS, "04_plots", BudgetParams)
    out = fake_kit / "run"
    assert main(["run", "--profile", "smoke", "--only", "01,04", "--out", str(out)]) == 0
    assert f"the run's page (numbers, figures and executed notebooks): {out / 'index.md'}" in capsys.readouterr().out
    page = (out / "index.md").read_text()
    first, plots = page.split("\n## 01_ok\n")[1].split("\n## 04_plots\n")
    assert "[the executed notebook](01_ok.ipynb)" in first and "| max_tokens | 32 |" in first
    assert "![" not in first, "01_ok showed no figure"
    assert "[the executed notebook](04_plots.ipynb)" in plots and "| share | 0.1235 |" in plots
    assert plots.count("a | b") + plots.count("a \\| b") == 1 and "> a | b" in plots, "the verdict once, quoted"
    assert "| none | null |" in plots and "| verdict |" not in plots
    assert "![04_reward](figures/04_reward.png)\n\n*Figure 04_reward: Reward against step*" in plots
    shown = "![04_plots-cell3-2](index_files/04_plots-cell3-2.png)\n\n*Cell 3, under “Two curves”*"
    assert shown in plots, "a figure only shown: the heading above its cell (the executed copy's cell 3)"
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", plots)
    assert figures == ["figures/04_reward.png", "index_files/04_plots-cell3-2.png"]
    assert all((out / f).read_bytes().startswith(b"\x89PNG") for f in figures)
    assert [p.name for p in (out / "index_files").iterdir()] == ["04_plots-cell3-2.png"]


def test_the_page_shows_the_command_lines_set_and_the_environments_overrides(fake_kit, monkeypatch):
    """config.json records `--set` (beside env_overrides); the page shows both."""
    monkeypatch.setenv("MAX_TOKENS", "48")
    out = fake_kit / "run"
    assert main(["run", "--profile", "smoke", "--only", "01", "--out", str(out), "--set", "search.max_tokens=64",
                 "seed=3"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["set"] == {"search.max_tokens": 64, "seed": 3} and cfg["launched_by"] == "azlib run"
    assert cfg["env_overrides"] == {"01_ok": {"search.max_tokens": 48}}
    page = (out / "index.md").read_text()
    assert "Set on the command line (`--set`, over the profile, for every notebook): `search.max_tokens=64`, " \
           "`seed=3`." in page
    assert "Environment overrides (over the profile): `search.max_tokens=48`." in page.split("\n## 01_ok\n")[1]


def test_an_interactive_notebooks_last_cell_gives_its_folder_a_page(tmp_path, capsys):
    """finish_notebook: config.json gets the notebook's parameters, status, minutes and commit, and the folder its
    page, with the figures it saved (no executed copy: figures/ and their titles); a second notebook in the same
    folder adds its section. In a folder of `azlib run`, it writes nothing: the runner writes the page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from azlib.lab.run_folder import RunFolder, finish_notebook

    run = RunFolder(tmp_path / "interactive")
    fig, axes = plt.subplots(1, 2)
    axes[0].set_title("Loss")
    axes[1].set_title("Accuracy")
    run.save_figure(fig, "01_curves")
    run.record_metrics("01_ok", {"verdict": "it learns", "accuracy": 0.5})
    params = BudgetParams(output_dir=str(run.path), search={"max_tokens": 16})
    finish_notebook(run, "01_ok", params)
    page = run.path / "index.md"
    assert f"this run's page (parameters, numbers, figures): {page}" in capsys.readouterr().out
    cfg = json.loads(run.config_path.read_text())
    assert cfg["launched_by"] == "notebook" and cfg["git_commit"] and cfg["versions"]["python"]
    assert cfg["notebooks"]["01_ok"]["search"]["max_tokens"] == 16
    assert cfg["status"]["01_ok"]["status"] == "ok" and cfg["status"]["01_ok"]["seconds"] >= 0
    text = page.read_text()
    assert "Run in JupyterLab" in text and "| [01_ok](#01_ok) | ok |" in text
    assert "run interactively from notebooks/01_ok.ipynb" in text and text.count("it learns") == 1
    assert "![01_curves](figures/01_curves.png)\n\n*Figure 01_curves: Loss; Accuracy*" in text

    finish_notebook(RunFolder(run.path), "02_more", BudgetParams(output_dir=str(run.path), search={"max_tokens": 8}))
    assert set(json.loads(run.config_path.read_text())["status"]) == {"01_ok", "02_more"}
    assert "\n## 01_ok\n" in page.read_text() and "\n## 02_more\n" in page.read_text()

    batch = RunFolder(tmp_path / "batch")
    runner.write_json(batch.config_path, {"launched_by": "azlib run", "status": {}})
    finish_notebook(batch, "01_ok", params)
    assert not (batch.path / "index.md").exists()
    assert "written by `azlib run` when its notebooks end" in capsys.readouterr().out


def test_no_profile_runs_the_parameters_cells_defaults(fake_kit):
    """benchmarks/notebook_minutes.py: profile None is what a learner's Run All gets, only output_dir set."""
    out = fake_kit / "run"
    assert runner.run(None, only=["01"], out=out) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["profile"] is None and cfg["notebooks"]["01_ok"]["output_dir"] == str(out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["01_ok"] == {"max_tokens": 16}, "the cell's value, not the smoke profile's 32"


def test_set_on_the_command_line_beats_the_profile_and_the_environment(fake_kit, monkeypatch, capsys):
    """`azlib run --set search.max_tokens=64`: the notebook receives it over the profile's 32 and MAX_TOKENS; a name
    no notebook of the run has stops the run before anything executes."""
    monkeypatch.setenv("MAX_TOKENS", "48")
    out = fake_kit / "run"
    assert main(["run", "--profile", "smoke", "--only", "01", "--out", str(out), "--set", "search.max_tokens=64"]) == 0
    assert json.loads((out / "metrics.json").read_text())["01_ok"] == {"max_tokens": 64}
    assert main(["run", "--profile", "smoke", "--only", "01", "--out", str(fake_kit / "run2"),
                 "--set", "modle=/m"]) == 2
    assert "modle: unknown parameter" in capsys.readouterr().err and not (fake_kit / "run2").exists()


def test_invalid_params_stop_everything_before_execution(fake_kit, capsys):
    (config.PARAMS_DIR / "smoke" / "03_never.yaml").write_text("search: {max_tokens: '32'}\n")
    out = fake_kit / "run"
    assert main(["run", "--profile", "smoke", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "notebook 03_never: invalid parameters" in err and "search: Value error, max_tokens: Input should be a valid integer" in err
    assert not list(out.glob("*.ipynb")), "nothing may run when any notebook's params are bad"


def test_only_selects_by_prefix(fake_kit):
    assert [p.name for p in config.list_notebooks(["01", "03"])] == ["01_ok.ipynb", "03_never.ipynb"]
    with pytest.raises(SystemExit, match="--only 09 matches no notebook"):
        config.list_notebooks(["09"])


def test_bad_env_override_is_reported(fake_kit, monkeypatch, capsys):
    monkeypatch.setenv("MAX_TOKENS", "lots")
    assert main(["run", "--profile", "smoke", "--out", str(fake_kit / "run")]) == 2
    assert "MAX_TOKENS='lots' is not an integer" in capsys.readouterr().err


def test_two_kernels_started_at_once_from_one_folder_answer_each_for_itself(tmp_path, monkeypatch):
    """Two runs at once from one working directory (two `azlib run`s, or the tests on two workers): each runner
    talks to its own kernel. (On jupyter_client's default IPC sockets, kernel-ipc-1 to -5 in the working
    directory, both runners reached whichever kernel bound them last, and the other run waited forever.)"""
    import asyncio

    monkeypatch.chdir(tmp_path)

    async def pid_of(manager) -> str:
        client = manager.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        out = []
        await client.execute_interactive("import os; print(os.getpid(), end='')", timeout=60, output_hook=lambda m:
                                         out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
        client.stop_channels()
        return "".join(out)

    async def both():
        managers = [runner._IPCKernelManager(kernel_name="python3") for _ in range(2)]
        await asyncio.gather(*(m.start_kernel() for m in managers))
        try:
            pids = await asyncio.gather(*(pid_of(m) for m in managers))
            return pids, [str(m.provisioner.process.pid) for m in managers]
        finally:
            await asyncio.gather(*(m.shutdown_kernel(now=True) for m in managers))

    answered, started = asyncio.run(asyncio.wait_for(both(), timeout=120))
    assert answered == started and len(set(started)) == 2
    assert not list(tmp_path.iterdir()), "no sockets left in the working directory"


def test_a_reply_whose_wake_up_never_comes_is_still_read():
    """The runner's kernel channels do not depend on the socket's wake-up: here the event loop stops watching the
    socket, as if a wake-up were missed, before the reply arrives. jupyter_client's own channel, which nbclient
    asks to wait without a timeout, never returns (what can hang notebook 01 on busy cores);
    the runner's returns the reply within its one-second wait."""
    import asyncio

    import zmq
    import zmq.asyncio
    from jupyter_client.channels import AsyncZMQSocketChannel
    from jupyter_client.session import Session

    async def reply_read(channel_class) -> bool:
        context, session = zmq.asyncio.Context(), Session(key=b"test")
        kernel = context.socket(zmq.ROUTER)
        port = kernel.bind_to_random_port("tcp://127.0.0.1")
        client_socket = context.socket(zmq.DEALER)
        client_socket.connect(f"tcp://127.0.0.1:{port}")
        channel = channel_class(client_socket, session)
        try:
            session.send(client_socket, "kernel_info_request", {})
            identity, *_ = await kernel.recv_multipart()
            waiting = asyncio.ensure_future(channel.get_msg(timeout=None))
            await asyncio.sleep(0.2)  # the channel waits on the socket's file descriptor
            asyncio.get_running_loop().remove_reader(client_socket.FD)  # its wake-up will never come
            session.send(kernel, "kernel_info_reply", {}, ident=identity)
            try:
                reply = await asyncio.wait_for(waiting, timeout=5)
            except asyncio.TimeoutError:
                assert client_socket.get(zmq.EVENTS) & zmq.POLLIN, "the reply is there, unread"
                return False
            return reply["msg_type"] == "kernel_info_reply"
        finally:
            client_socket.close(linger=0)
            kernel.close(linger=0)
            context.term()

    client = runner._IPCKernelManager(kernel_name="python3").client()  # the runner's kernels talk through it
    assert client.shell_channel_class is client.iopub_channel_class is runner._WakefulChannel
    assert asyncio.run(reply_read(runner._WakefulChannel))
    assert not asyncio.run(reply_read(AsyncZMQSocketChannel)), "the simulated missed wake-up hangs jupyter_client's"


def test_a_run_on_cuda_gives_its_kernels_pytorchs_expandable_segments(fake_kit, monkeypatch):
    """A profile whose notebooks run on device cuda: the kernels start with PYTORCH_CUDA_ALLOC_CONF set to
    expandable segments (unless the user set it); a CPU run leaves the environment as it is."""
    class DeviceParams(config.NotebookParams):
        device: str = "cpu"

    write_notebook(fake_kit / "notebooks" / "01_ok.ipynb", "seed = 0\ndevice = 'cpu'\noutput_dir = 'x'",
                   "import os\nfrom azlib.lab.run_folder import RunFolder\n"
                   "alloc = os.environ.get('PYTORCH_CUDA_ALLOC_CONF')\n"
                   "RunFolder(output_dir).record_metrics('01_ok', {'alloc': alloc})")
    monkeypatch.setitem(config.NOTEBOOK_PARAMS, "01_ok", DeviceParams)
    (fake_kit / "params" / "h100").mkdir()
    (fake_kit / "params" / "h100" / "01_ok.yaml").write_text("device: cuda\n")
    (fake_kit / "params" / "smoke" / "01_ok.yaml").write_text("device: cpu\n")
    monkeypatch.setattr(runner, "require", lambda *args: [])  # this machine has no CUDA: the preflight passes here
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")  # absent, and absent again after the test
    alloc = {}
    for profile in ("smoke", "h100"):
        out = fake_kit / profile
        assert main(["run", "--profile", profile, "--only", "01", "--out", str(out)]) == 0
        alloc[profile] = json.loads((out / "metrics.json").read_text())["01_ok"]["alloc"]
    assert alloc == {"smoke": None, "h100": "expandable_segments:True"}
