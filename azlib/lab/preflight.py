"""The preflight (`python -m azlib check`, and the first thing `azlib run` does): what this machine lacks for a
profile's notebooks, each with its fix, in seconds. Not a test that they work: nothing is loaded or downloaded."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from azlib.lab.config import REPO_ROOT, NotebookParams, ParamsError, list_notebooks, resolve
from azlib.optional_packages import EXTRAS
from azlib.models.loading import EMBEDDED_MODELS, EMBEDDED_PREFIX, ModelLoadError, cache_dir, embedded_gguf
from azlib.paths import repo_path
from azlib.lab.run_folder import trainings_in
from azlib.teachers import chosen_teachers

GIB = 2**30
# The GPU each GPU profile is written for (the profiles' YAML comments; `python -m azlib plan` checks the memory).
PROFILE_GPU = {"h100": "one H100 80 GB", "h100-original": "one H100 80 GB, and an H200 141 GB for notebooks 03-05"}
# Hub organisations and models whose repos are gated: the licence is accepted on the model's page, and the download
# needs a token of that account. The profiles' gated models are these (azlib.teachers.presets: "vllm-original").
GATED = ("meta-llama/", "mistralai/", "google/gemma")
# Free disk a run needs: its folder (executed notebooks, figures, trees, eval records: tens of MB in a smoke or cpu
# run) with a wide margin, and per training that keeps checkpoints (04's student, each of 05's arms x seeds, 06's
# teacher) azlib.training.KEEP_CHECKPOINTS = 2 of them, a third while one is written, and the trained adapter. A
# checkpoint is the LoRA adapter in fp32 and AdamW's two fp32 moments, 12 bytes a parameter (8-bit AdamW's fewer):
# LoRA r 32 on the profiles' 1.5B-3B students holds 37M-49M parameters (azlib.lab.plan.ModelShape.lora_parameters),
# 0.44-0.58 GB a checkpoint, at most 1.9 GB a training: 2 GiB on a GPU. On the CPU the embedded 135M model's
# adapters (r <= 16: 4.9M parameters, 59 MB a checkpoint) take at most 0.2 GB: 0.25 GiB a training.
RUN_FOLDER_GIB = 1.0
TRAINING_GIB = {"cuda": 2.0, "cpu": 0.25}
# peft is a main dependency (`pip install -e .`); the others are extras (azlib.optional_packages.EXTRAS).
MAIN_DEPENDENCIES = {"peft"}


class PreflightError(ParamsError):
    """This machine lacks something a profile's notebooks need; the message names each thing and its fix."""


@dataclass(frozen=True)
class Check:
    """One line of the preflight: `what` was checked; `missing` says what is not there (empty: ok), `fix` how to
    get it."""

    what: str
    detail: str = ""
    missing: str = ""
    fix: str = ""

    @property
    def ok(self) -> bool:
        return not self.missing

    def line(self) -> str:
        if self.ok:
            return f"ok       {self.what}" + (f": {self.detail}" if self.detail else "")
        return f"missing  {self.what}: {self.missing}" + (f"; fix: {self.fix}" if self.fix else "")


def gpu_memory() -> tuple[float, float] | None:
    """(free, total) bytes of CUDA device 0, or None without one. Asked in a child process, so the runner holds no
    CUDA context of its own while the notebooks run."""
    if shutil.which("nvidia-smi") is None:  # no NVIDIA driver: no need to start Python and torch to know
        return None
    code = "import torch; print(*torch.cuda.mem_get_info()) if torch.cuda.is_available() else None"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    if out.returncode or not out.stdout.strip():
        return None
    free, total = map(float, out.stdout.split())
    return free, total


def checks(profile: str | None, resolved: dict[str, NotebookParams], out: Path) -> list[Check]:
    """Every check of a run of these notebooks (stem -> resolved params) into the folder `out`."""
    gpu = gpu_notebooks(resolved)
    memory = gpu_memory() if gpu else None
    return [_cuda_check(profile, gpu, memory), *_package_checks(resolved), *_model_checks(resolved),
            *_data_checks(resolved), *_shipped_checks(resolved), _plan_check(resolved, gpu, memory),
            _disk_check(resolved, out)]


def require(profile: str | None, resolved: dict[str, NotebookParams], out: Path) -> list[Check]:
    """The checks, or PreflightError naming every one that failed (the runner calls this before it makes a folder)."""
    done = checks(profile, resolved, out)
    if failed := [c for c in done if not c.ok]:
        raise PreflightError(f"preflight of profile {profile or 'defaults'}: {len(failed)} check(s) failed "
                             "(python -m azlib check shows them all)\n  " + "\n  ".join(c.line() for c in failed))
    return done


def check_profile(profile: str, only: list[str] | None = None, assignments: Sequence[str] = ()) -> int:
    """`python -m azlib check`: one line per check; 0 when all pass, else 2 (azlib's exit status for a refusal)."""
    out = REPO_ROOT / "outputs"
    resolved = {nb.stem: resolve(nb, profile, out / "preflight", assignments)[0] for nb in list_notebooks(only)}
    done = checks(profile, resolved, out)
    for c in done:
        print(c.line())
    failed = sum(not c.ok for c in done)
    print(f"preflight of profile {profile}: " + (f"{failed} check(s) failed" if failed else "every check passed"))
    return 2 if failed else 0


# -- the checks -------------------------------------------------------------------------------------------------

def _names(stems) -> str:
    return ", ".join(stem[:2] for stem in stems)


def _grouped(reasons: list[tuple[str, str]]) -> str:
    """[(why, notebook stem), ...] as "why in 02, 03; other in 06"."""
    by_why: dict[str, list[str]] = {}
    for why, stem in reasons:
        by_why.setdefault(why, []).append(stem)
    return "; ".join(f"{why} in {_names(stems)}" for why, stems in by_why.items())


def gpu_notebooks(resolved: dict[str, NotebookParams]) -> list[str]:
    """The notebooks that run on CUDA: device cuda, or a teacher placed on a CUDA device."""
    return [stem for stem, p in resolved.items() if getattr(p, "device", "cpu") == "cuda"
            or any(str(t.options.get("device", "")).startswith("cuda") for t in _teachers(p))]


def _cuda_check(profile: str | None, gpu: list[str], memory: tuple[float, float] | None) -> Check:
    if not gpu:
        return Check("CUDA", "not needed (every notebook runs on the CPU)")
    if memory is not None:
        return Check("CUDA", f"a GPU of {memory[1] / GIB:.1f} GiB, {memory[0] / GIB:.1f} GiB free, for notebooks "
                             f"{_names(gpu)}")
    expected = PROFILE_GPU.get(profile or "", "an NVIDIA GPU")
    if shutil.which("nvidia-smi") is None:
        why = "no NVIDIA driver here (nvidia-smi is not on PATH)"
        fix = f"run profile {profile or 'defaults'} on a machine with {expected}, or --profile cpu here"
    else:
        why = "torch.cuda finds no GPU beside the NVIDIA driver (a CPU build of torch?)"
        fix = ("install torch's CUDA build: make setup TORCH_INDEX=<a CUDA index> (docs/running.md#set-up), "
               "then pip install -e '.[gpu,dev]'")
    return Check("CUDA", missing=f"notebooks {_names(gpu)} of profile {profile or 'defaults'} run on CUDA (device cuda; "
                                 f"{expected}) and {why}", fix=fix)


def _teachers(params: NotebookParams) -> list:
    if not hasattr(params, "teacher_tier"):
        return []
    return chosen_teachers(getattr(params, "teachers", ()), params.teacher_tier)


def _packages(p: NotebookParams) -> dict[str, str]:
    """The optional packages this notebook imports under these settings: module -> what asks for it."""
    wanted = [("vllm", "generation vllm", getattr(p, "generation", None) == "vllm"),
              ("vllm", "vLLM teachers", any(t.backend == "vllm" for t in _teachers(p))),
              ("bitsandbytes", "optimizer adamw_8bit",
               getattr(getattr(p, "grpo", None), "optimizer", None) == "adamw_8bit"),
              ("trl", "the trl arm", "trl" in getattr(p, "arms", ())),
              ("unsloth", "use_unsloth", getattr(p, "use_unsloth", False)),
              ("peft", "the LoRA adapter", hasattr(p, "lora"))]
    out: dict[str, str] = {}
    for module, why, asked in wanted:
        if asked:
            out[module] = f"{out[module]} and {why}" if module in out else why
    return out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken package: as good as missing
        return False


def _package_checks(resolved: dict[str, NotebookParams]) -> list[Check]:
    asked: dict[str, list[tuple[str, str]]] = {}
    for stem, p in resolved.items():
        for module, why in _packages(p).items():
            asked.setdefault(module, []).append((why, stem))
    out = []
    for module, reasons in sorted(asked.items()):
        whys = _grouped(reasons)
        if _installed(module):
            out.append(Check(f"package {module}", whys))
            continue
        if module in MAIN_DEPENDENCIES:
            fix = "pip install -e ."
        else:
            extra = EXTRAS[module][1]
            fix = "pip install -e '.[gpu,dev]'" if extra in ("gpu", "dev") else f"pip install -e '.[{extra}]'"
        out.append(Check(f"package {module}", missing=f"not installed, needed for {whys}", fix=fix))
    return out


def _models(p: NotebookParams) -> dict[str, str]:
    """The models this notebook loads or asks: name -> role (a teacher served elsewhere as openai:<its name>)."""
    models = {}
    if isinstance(model := getattr(p, "model", None), str) and model:  # 07's `model` is a GPT's shape
        models[model] = "student"
    if teacher := getattr(p, "teacher_model", None):
        models.setdefault(teacher, "teacher")
    for t in _teachers(p):
        models.setdefault(t.model if t.backend != "openai" else f"openai:{t.name}", f"teacher {t.name}")
    return models


def _model_checks(resolved: dict[str, NotebookParams]) -> list[Check]:
    asked: dict[str, list[tuple[str, str]]] = {}
    remote = {}
    for stem, p in resolved.items():
        for name, role in _models(p).items():
            asked.setdefault(name, []).append((role, stem))
        remote.update({t.name: t for t in _teachers(p) if t.backend == "openai"})
    out = [_model_check(name, _grouped(roles)) for name, roles in asked.items() if not name.startswith("openai:")]
    for name, t in remote.items():  # served elsewhere: nothing on disk, only its key where it needs one
        if t.api_key_env and not os.environ.get(t.api_key_env):
            out.append(Check(f"teacher {name}", missing=f"served at {t.base_url}, its key variable {t.api_key_env} "
                                                        "is not set", fix=f"export {t.api_key_env}=..."))
        else:
            out.append(Check(f"teacher {name}", f"served at {t.base_url}"))
    return out


def _model_check(name: str, roles: str) -> Check:
    what = f"model {name}"
    if name.startswith(EMBEDDED_PREFIX):
        key = name.removeprefix(EMBEDDED_PREFIX)
        if key not in EMBEDDED_MODELS:
            return Check(what, missing=f"no embedded model {key!r} ({roles})",
                         fix=f"one of {[EMBEDDED_PREFIX + k for k in EMBEDDED_MODELS]}")
        if (cache_dir() / "models" / key / "config.json").is_file():
            return Check(what, f"{roles}, converted in {cache_dir() / 'models' / key}")
        try:
            return Check(what, f"{roles}, from {embedded_gguf(key).name} (converted on first use)")
        except ModelLoadError as err:
            return Check(what, missing=f"{roles}: {err}", fix=EMBEDDED_MODELS[key].install)
    path = repo_path(name)
    if path.exists():
        return Check(what, f"{roles}, the folder {path}")
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        return Check(what, missing=f"{roles}: no folder {path}, and not a hub name like 'org/model'",
                     fix="a folder that exists, a hub name, or embedded:smollm2-135m-instruct")
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return Check(what, f"{roles}, in the Hugging Face cache")
    fix = f"huggingface-cli download {name} (on a machine with network; HF_HOME picks the cache)"
    if name.startswith(GATED):
        fix = (f"a gated repo: accept its licence at https://huggingface.co/{name} and `huggingface-cli login` "
               f"(or set HF_TOKEN), then {fix}")
    return Check(what, missing=f"{roles}: not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and not a "
                               "folder here", fix=fix)


def _data_checks(resolved: dict[str, NotebookParams]) -> list[Check]:
    """GSM8K from the hub (gsm8k "hub", the one source that downloads): both splits in the Hugging Face cache."""
    hub = [stem for stem, p in resolved.items() if getattr(p, "gsm8k", None) == "hub"]
    if not hub:
        return []
    from huggingface_hub import constants, try_to_load_from_cache

    from azlib.data.gsm8k import HUB_CONFIG, HUB_FILES, HUB_NAME

    what = f"data {HUB_NAME}"
    absent = [f for f in HUB_FILES.values()
              if not isinstance(try_to_load_from_cache(HUB_NAME, f, repo_type="dataset"), str)]
    if not absent:
        return [Check(what, f"GSM8K for {_names(hub)}, in the Hugging Face cache")]
    return [Check(what, missing=f"GSM8K for {_names(hub)} (gsm8k: hub): {', '.join(absent)} not in the Hugging Face "
                                f"cache ({constants.HF_HUB_CACHE})",
                  fix=f"python -c \"import datasets; datasets.load_dataset('{HUB_NAME}', '{HUB_CONFIG}')\" on a "
                      "machine with network (HF_HOME picks the cache), or --set gsm8k=<a folder holding train.jsonl "
                      "and test.jsonl>")]


def _shipped_checks(resolved: dict[str, NotebookParams]) -> list[Check]:
    """The shipped results each notebook draws beside its own (benchmarks/results/) read back whole."""
    from azlib.lab.shipped_results import read_back

    found = [(folder, why, stem) for stem in resolved for folder, why in read_back(stem)]
    damaged: dict[Path, list[tuple[str, str]]] = {}
    for folder, why, stem in found:
        if why:
            damaged.setdefault(folder, []).append((why, stem))
    if not found:
        return []
    if not damaged:
        return [Check("shipped results", f"read back for {_names(dict.fromkeys(stem for *_, stem in found))}")]
    return [Check(f"shipped results {folder.name}", missing=_grouped(reasons),
                  fix=f"git checkout -- benchmarks/results/{folder.name} (the repository's copy)")
            for folder, reasons in damaged.items()]


def _plan_check(resolved: dict[str, NotebookParams], gpu: list[str],
                memory: tuple[float, float] | None) -> Check:
    if not gpu:
        return Check("GPU memory plan", "no notebook on the GPU")
    if memory is None:
        return Check("GPU memory plan", "not checked without a GPU (python -m azlib plan predicts it)")
    from azlib.lab.plan import PlanError, check, notebook_plan

    free, total = memory
    try:
        check([notebook_plan(stem, p) for stem, p in resolved.items()], total, free)
    except PlanError as err:
        return Check("GPU memory plan", missing=str(err).replace("\n", " "),
                     fix="free the GPU, use a larger one, or lower the profile's sizes with --set")
    return Check("GPU memory plan", f"every notebook fits {total / GIB:.1f} GiB ({free / GIB:.1f} GiB free)")


def _trainings(stem: str, p: NotebookParams) -> int:
    """Trainings that keep checkpoints: 04's student, each of 05's arms x seeds, 06's teacher."""
    if stem == "05_base_vs_trained":
        return len(p.arms) * len(p.seeds)
    return 1 if stem in ("04_gsm8k_run", "06_rlt_teachers") else 0


def _disk_check(resolved: dict[str, NotebookParams], out: Path) -> Check:
    """A folder that already holds trainings (`azlib experiment` wrote 05's arms there) needs room for the rest."""
    sizes = sorted(TRAINING_GIB[getattr(p, "device", "cpu")] for stem, p in resolved.items()
                   for _ in range(_trainings(stem, p)))
    done = len(trainings_in(out)) if out.is_dir() else 0
    need = RUN_FOLDER_GIB + sum(sizes[done:])  # the trainings there counted as the smallest: never too little
    existing = next(folder for folder in (out, *out.parents) if folder.exists())
    free = shutil.disk_usage(existing).free / GIB
    what = f"disk under {existing}"
    if free < need:
        return Check(what, missing=f"{free:.1f} GiB free, the run needs {need:.1f} GiB (azlib.lab.preflight."
                                   "RUN_FOLDER_GIB and TRAINING_GIB: the run folder and its checkpoints)",
                     fix="free some space, or run into a folder on a larger disk (azlib run --out)")
    return Check(what, f"{free:.1f} GiB free of the {need:.1f} GiB the run needs")
