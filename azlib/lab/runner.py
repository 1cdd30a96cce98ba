"""Batch runs: the ordered notebooks executed with papermill under a profile (or their defaults) into one run folder,
ending with its page (index.md); parameters validated and the preflight run first; stops at the first failure."""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty

import psutil
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from tqdm.auto import tqdm
from traitlets import Type

from azlib.lab import stored_notebooks
from azlib.lab.config import (NOTEBOOKS_DIR, REPO_ROOT, NotebookParams, ParamsError, list_notebooks, parse_assignments,
                              resolve)
from azlib.paths import repo_path
from azlib.lab.preflight import gpu_notebooks, require
from azlib.lab.run_folder import RUNNER, RunFolder, git_commit, read_json, versions, write_json, write_page


def run(profile: str | None, only: list[str] | None = None, out: Path | None = None,
        assignments: Sequence[str] = ()) -> int:
    """Execute the notebooks; return a process exit code (0 = all succeeded). Profile None runs each
    notebook with its parameters cell's defaults (benchmarks/notebook_minutes.py). assignments: NAME=VALUE over
    the profile, for every notebook of the run (`--set`; a name one of them lacks is an error)."""
    label = profile or "defaults"
    path = repo_path(out or REPO_ROOT / "outputs" / f"{datetime.now():%Y%m%d-%H%M%S}-{label}")
    notebooks = list_notebooks(only)

    # Validate everything first: a typo in notebook 05's params must not cost a 04 run.
    resolved: dict[str, tuple[NotebookParams, dict[str, int]]] = {
        nb.stem: resolve(nb, profile, path, assignments) for nb in notebooks
    }
    assigned = parse_assignments(assignments)
    earlier = _earlier_run(path, profile, assigned)
    # Then what this machine must hold for them (a GPU, packages, models, the memory plan, disk): a missing one
    # stops the run before any notebook starts.
    require(profile, {stem: params for stem, (params, _) in resolved.items()}, path)
    if gpu_notebooks({stem: params for stem, (params, _) in resolved.items()}):
        # the kernels inherit it: PyTorch's allocator grows segments in place instead of keeping blocks of every
        # size it met, so the memory one phase freed (a micro-batch's logits) serves the next phase's sizes
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    run_dir = RunFolder(path)  # made only now: a rejected run leaves no empty folder behind
    config = {
        "launched_by": RUNNER,
        "profile": profile,
        "run_dir": str(run_dir.path),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "versions": versions(),
        "argv": sys.argv,
        "env_overrides": {stem: o for stem, o in earlier.get("env_overrides", {}).items() if stem not in resolved}
        | {stem: overrides for stem, (_, overrides) in resolved.items() if overrides},
        "set": assigned,  # --set, over the profile and the environment, in every notebook
        "notebooks": earlier.get("notebooks", {}) | {stem: p.model_dump() for stem, (p, _) in resolved.items()},
        "status": {stem: s for stem, s in earlier.get("status", {}).items() if stem not in resolved},
    }
    write_json(run_dir.config_path, config)

    import papermill  # slow import; only once the params are known to be good

    failed = None
    for nb in tqdm(notebooks, desc=f"notebooks ({label})", unit="nb"):
        params, _ = resolved[nb.stem]
        run_dir.clear_metrics(nb.stem)
        start = time.perf_counter()
        try:
            with PeakMemory() as memory:
                papermill.execute_notebook(
                    str(nb),
                    str(run_dir.path / nb.name),
                    parameters=params.model_dump(),
                    kernel_name="python3",
                    cwd=str(REPO_ROOT),
                    # cell by cell under the notebook bar, so a long notebook (05: over half an hour) shows where
                    # it is
                    progress_bar={"desc": f"  {nb.stem} cells", "leave": False, "position": 1},
                    kernel_manager_class=_IPCKernelManager,
                )
            status = "ok"
        except papermill.PapermillExecutionError as err:
            status = f"failed: {err.ename}: {err.evalue}"
            failed = nb.name
        except Exception as err:  # the kernel died (out of memory, killed): recorded, the run's page still written
            status = f"failed: {type(err).__name__}: {err}"
            failed = nb.name
        config["status"][nb.stem] = {"status": status, "seconds": round(time.perf_counter() - start, 1),
                                     "peak_rss_mb": round(memory.peak / 2**20), "git_commit": config["git_commit"]}
        write_json(run_dir.config_path, config)
        if failed:
            break

    print(summary(run_dir, config["status"]))
    print(f"\nthe run's page (numbers, figures and executed notebooks): {write_page(run_dir.path)}")
    if failed:
        print(f"\n{failed} failed; its partial output is {run_dir.path / failed}", file=sys.stderr)
        return 1
    return 0


def _earlier_run(path: Path, profile: str | None, assigned: dict) -> dict:
    """The config.json of an earlier `azlib run` into `path`, whose other notebooks this run keeps ({} for none, or
    for a folder a JupyterLab run wrote, which this run replaces). Only a run of the same profile and --set joins
    them (resume aside: --set resume=true continues a training), so that the page reads as one run."""
    if not (path / "config.json").is_file():
        return {}
    try:
        earlier = read_json(path / "config.json")
    except ValueError as err:
        raise ParamsError(f"{err}; the run folder's record is damaged: run into another folder (--out)") from None
    if earlier.get("launched_by") != RUNNER:
        return {}
    before = {k: v for k, v in (earlier.get("set") or {}).items() if k != "resume"}
    if (earlier.get("profile"), before) != (profile, {k: v for k, v in assigned.items() if k != "resume"}):
        raise ParamsError(f"{path} holds a run of profile {earlier.get('profile') or 'defaults'} with --set "
                          f"{before or 'nothing'}: its notebooks and these would read as one run; run into another "
                          "folder (--out), or with that profile and --set")
    return earlier


def store_notebooks(only: list[str] | None = None) -> int:
    """`make notebooks`: run the notebooks at their parameters cells' defaults into outputs/<time>-notebooks and
    put each one that ran to its end, outputs and all, back into notebooks/ (azlib.lab.stored_notebooks), with its commit,
    minutes and peak memory. Returns run()'s exit code."""
    out = REPO_ROOT / "outputs" / f"{datetime.now():%Y%m%d-%H%M%S}-notebooks"
    code = run(None, only=only, out=out)
    ran = read_json(out / "config.json")
    for stem, status in ran["status"].items():
        if status["status"] != "ok":
            continue
        if overrides := ran["env_overrides"].get(stem):
            print(f"not stored {stem}: environment variables changed its defaults ({overrides})", file=sys.stderr)
            code = 1
            continue
        try:
            stored_notebooks.store(out / f"{stem}.ipynb", NOTEBOOKS_DIR / f"{stem}.ipynb", {
                "commit": ran["git_commit"], "profile": "defaults", "date": ran["created"][:10],
                "minutes": round(status["seconds"] / 60, 1), "peak_rss_mb": status["peak_rss_mb"],
                "cores": len(os.sched_getaffinity(0))})
        except ValueError as err:  # its code changed while it ran: the others are stored all the same
            print(f"not stored {stem}: {err}", file=sys.stderr)
            code = 1
            continue
        print(f"stored {stem}: {status['seconds'] / 60:.1f} min, peak {status['peak_rss_mb']} MiB")
    return code


class PeakMemory:
    """The most resident memory this process's children held at once (the kernel and every process it started):
    `peak`, in bytes, sampled twice a second while the block runs, and at least any one child's own high-water mark
    (Linux's VmHWM while it lives, its ru_maxrss once it ended), so that a spike between two samples still counts."""

    def __init__(self, interval: float = 0.5):
        self.interval, self.peak = interval, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(self.interval):
            total = 0
            for child in psutil.Process().children(recursive=True):
                try:
                    rss = child.memory_info().rss
                    total += rss
                    self.peak = max(self.peak, _high_water(child.pid, rss))
                except psutil.Error:  # ended between the listing and the reading
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> PeakMemory:
        self._reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        # a child that ended inside the block larger than any before it (its last half second unsampled): Linux's
        # ru_maxrss of the ended children, in KiB
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if reaped > self._reaped:
            self.peak = max(self.peak, reaped * 1024)


def _high_water(pid: int, rss: int) -> int:
    """A process's peak resident memory so far (VmHWM in /proc/<pid>/status), or `rss` where there is none."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return rss


class _WakefulChannel(AsyncZMQSocketChannel):
    """A kernel channel whose endless wait is a series of one-second waits. An asyncio zmq socket learns of a
    message through its file descriptor's wake-up, and a send on the same socket can consume that wake-up: nbclient
    sends comm messages on the shell socket while it waits there for a cell's reply (its stand-in for an Output
    widget, which notebook 01's sliders use), and with no timeout it would wait forever for a reply that sits
    unread in the socket (notebook 01 on busy cores can hang so). Each new wait first asks the socket itself
    whether a message is there, so a missed wake-up costs at most a second."""

    async def get_msg(self, timeout: float | None = None) -> dict:
        if timeout is not None:
            return await super().get_msg(timeout)
        while True:
            try:
                return await super().get_msg(1.0)
            except Empty:
                continue


class _WakefulKernelClient(AsyncKernelClient):
    shell_channel_class = Type(_WakefulChannel)
    iopub_channel_class = Type(_WakefulChannel)
    control_channel_class = Type(_WakefulChannel)


class _IPCKernelManager(AsyncKernelManager):
    """Kernels talk to the runner over local IPC sockets, not TCP (no plain-text network transport,
    and no per-notebook warning about it), through _WakefulKernelClient. Each kernel's sockets live in a folder
    of its own: jupyter_client's default, kernel-ipc-1 to -5 in the working directory, is the same for every run
    started there, so two runs at once (two `azlib run`s, or the tests on two workers) bound each other's sockets
    and waited forever."""

    client_factory = Type(_WakefulKernelClient, klass=AsyncKernelClient)

    def __init__(self, **kwargs):
        folder = tempfile.mkdtemp(prefix="azlib-kernel-")
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        super().__init__(transport="ipc", ip=os.path.join(folder, "kernel"), **kwargs)


def summary(run_dir: RunFolder, status: dict[str, dict]) -> str:
    metrics = run_dir.metrics()
    rows = [("notebook", "status", "seconds", "metrics")]
    for stem, s in status.items():
        rows.append((stem, s["status"][:60], f"{s['seconds']:.1f}", str(len(metrics.get(stem, {})))))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return f"\nrun folder: {run_dir.path}\n" + "\n".join(lines)
