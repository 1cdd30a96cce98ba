"""The optional extras: they resolve together with the main dependencies (pip's own resolver, a dry run
against the package registry, nothing installed: the GPU install's through scripts/gpu_resolve.py, whose check of
pip's report is tested here on hand-written reports), a missing one is an error that names it, and `make run` with a
GPU profile installs the gpu extra first or, without nvidia-smi, refuses before anything runs."""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement

from azlib.optional_packages import EXTRAS, MissingExtra, require
from azlib.paths import REPO_ROOT


def resolve(*requirements: str) -> dict[str, str]:
    """name -> version of everything pip would install for the requirements, in a fresh environment."""
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", "-", *requirements], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"pip could not resolve {requirements}:\n{out.stderr[-3000:]}"
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(out.stdout)["install"]}


@pytest.mark.registry
def test_unsloth_extra_resolves_with_the_main_dependencies():
    versions = resolve(f"{REPO_ROOT}[unsloth]", "torch==2.13.0")
    assert {name: versions.get(name) for name in ("unsloth", "bitsandbytes")} == {
        "unsloth": "2026.10.9", "bitsandbytes": "0.50.2"}
    assert versions["torch"].startswith("2.13.0") and versions["azlib"] == "0.1.0"


GPU_RESOLVE = REPO_ROOT / "scripts" / "gpu_resolve.py"
_spec = importlib.util.spec_from_file_location("gpu_resolve", GPU_RESOLVE)
gpu_resolve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_resolve)


@pytest.mark.registry
def test_the_gpu_install_resolves_with_its_pins():
    """The script users run before installing on a GPU box: pip resolves .[gpu,dev] with torch, every pin holds."""
    out = subprocess.run([sys.executable, str(GPU_RESOLVE), "--no-require-cuda"], capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    for name, version in {"vllm": "0.32.0", "bitsandbytes": "0.50.2", "trl": "1.16.0"}.items():
        assert f"ok    {name} {version}" in lines, out.stdout
    assert any(line.startswith("ok    torch 2.13.0") for line in lines), out.stdout
    assert lines[-1].startswith("resolves: 0 failed"), out.stdout


def test_the_gpu_pins_are_the_extras_pins_and_the_makefiles_torch():
    pyproject, makefile = (REPO_ROOT / "pyproject.toml").read_text(), (REPO_ROOT / "Makefile").read_text()
    extras = tomllib.loads(pyproject)["project"]["optional-dependencies"]
    expected = {}
    for requirement in map(Requirement, extras["gpu"] + extras["dev"]):  # packaging's parser as the reference
        if [s.operator for s in requirement.specifier] == ["=="]:
            expected[requirement.name] = next(iter(requirement.specifier)).version
    pins = gpu_resolve.read_pins(pyproject, makefile)
    assert pins == {**expected, "torch": "2.13.0"}
    assert {"vllm", "bitsandbytes", "trl"} <= set(pins)


def _package(name, version, *requires):
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires)}}


PINS = {"vllm": "0.32.0", "bitsandbytes": "0.50.2", "trl": "1.16.0", "torch": "2.13.0"}
CUDA_TORCH = _package("torch", "2.13.0", "filelock", 'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"')


def _report(*packages):
    """A pip report of the GPU install as pip writes it for PyPI on Linux x86-64, packages replaced by name."""
    base = {p["metadata"]["name"]: p for p in [
        _package("vllm", "0.32.0", "torch==2.13.0", "torchaudio==2.11.0", "torchvision==0.28.0", "torchcodec>=0.14"),
        _package("bitsandbytes", "0.50.2", "torch<3,>=2.4"), _package("trl", "1.16.0", 'torchvision; extra == "vlm"'),
        CUDA_TORCH, _package("nvidia-cuda-runtime", "13.0.96"),
        _package("torchvision", "0.28.0", "numpy", "torch (==2.13.0)", "scipy ; extra == 'scipy'"),
        _package("torchaudio", "2.11.0")]}
    base.update({p["metadata"]["name"]: p for p in packages})
    return {"install": list(base.values())}


def _levels(findings):
    return {f.level for f in findings}


def _said(findings, level, *words):
    return [f.text for f in findings if f.level == level and all(w in f.text for w in words)]


def test_a_matching_report_passes_and_says_the_driver_the_cuda_wheels_need():
    findings = gpu_resolve.check(_report(), PINS, require_cuda=True)
    assert _levels(findings) == {"ok", "note"}, findings
    assert {f.text for f in findings if f.level == "ok"} >= {
        "vllm 0.32.0", "bitsandbytes 0.50.2", "trl 1.16.0", "torch 2.13.0", "torch 2.13.0: the CUDA build (CUDA 13)"}
    assert _said(findings, "note", "CUDA 13 runtime (nvidia-cuda-runtime 13.0.96)", "driver >= 580", "no driver")
    assert _said(findings, "ok", "torchaudio 2.11.0", ">= 2.11") and _said(findings, "ok", "torchvision 0.28.0")
    assert _said(gpu_resolve.check(_report(), PINS, require_cuda=True, driver="580.65.06"), "ok", ">= 580", "580.65.06")
    old_driver = gpu_resolve.check(_report(), PINS, require_cuda=True, driver="575.57.08")
    assert _said(old_driver, "fail", "needs NVIDIA driver >= 580", "575.57.08")


def test_a_cuda_12_runtime_needs_driver_525_and_a_cu128_torch_is_a_cuda_build():
    findings = gpu_resolve.check(_report(_package("torch", "2.13.0+cu128"), _package("nvidia-cuda-runtime", "13.0.96"),
                                         _package("nvidia-cuda-runtime-cu12", "12.8.90")),
                                 PINS, require_cuda=True, driver="570.1")
    assert "torch 2.13.0+cu128: the CUDA build (CUDA 12)" in {f.text for f in findings}
    assert _said(findings, "ok", "CUDA 12 runtime", ">= 525")
    assert _said(findings, "fail", "CUDA 13 runtime", ">= 580")


def test_a_wrong_or_missing_pin_fails():
    findings = gpu_resolve.check(_report(_package("vllm", "0.31.1", "torch==2.13.0")), PINS, require_cuda=True)
    assert [f.text for f in findings if f.level == "fail"] == ["vllm 0.31.1: pinned 0.32.0"]
    report = _report()
    report["install"] = [p for p in report["install"] if p["metadata"]["name"] != "bitsandbytes"]
    findings = gpu_resolve.check(report, PINS, require_cuda=True)
    assert [f.text for f in findings if f.level == "fail"] == [
        "bitsandbytes: pinned 0.50.2, not among what pip would install"]
    assert gpu_resolve.same_version("0.32", "0.32.0") and not gpu_resolve.same_version("0.32.1", "0.32.0")


def test_a_cpu_torch_fails_where_cuda_is_required_and_warns_elsewhere():
    report = _report(_package("torch", "2.13.0+cpu", "filelock"))
    required = gpu_resolve.check(report, PINS, require_cuda=True)
    assert _said(required, "fail", "torch 2.13.0+cpu: the CPU build")
    assert _said(required, "ok", "torch 2.13.0+cpu") == ["torch 2.13.0+cpu"]  # the pin itself holds
    assert "fail" not in _levels(gpu_resolve.check(report, PINS, require_cuda=False))
    plain = _report(_package("torch", "2.13.0", "filelock"))  # no local label and no CUDA runtime: a CPU build
    assert _said(gpu_resolve.check(plain, PINS, require_cuda=True), "fail", "torch 2.13.0: the CPU build")


def test_a_companion_built_for_another_torch_is_a_warning_naming_what_the_makefile_does():
    report = _report(_package("torchvision", "0.27.0", "torch==2.12.0"), _package("torchaudio", "2.10.0"),
                     _package("torchcodec", "0.17.0", 'pytest; extra == "dev"'))
    findings = gpu_resolve.check(report, PINS, require_cuda=True)
    assert "fail" not in _levels(findings)
    warned = [f.text for f in findings if f.level == "warn"]
    assert len(warned) == 3 and all("make setup-gpu" in t and "uninstall" in t for t in warned), warned
    assert _said(findings, "warn", "torchvision 0.27.0: built for torch == 2.12", "Requires-Dist pins torch==2.12.0",
                 "pip would install torch 2.13.0")
    assert _said(findings, "warn", "torchaudio 2.10.0: built for torch == 2.10", "compatibility matrix")
    assert _said(findings, "warn", "torchcodec 0.17.0: declares no torch version")
    # A torchvision that declares no torch: its release number says which (0.28 is torch 2.13's).
    assert _said(gpu_resolve.check(_report(_package("torchvision", "0.28.1")), PINS, require_cuda=True), "ok",
                 "torchvision 0.28.1: for torch == 2.13")


@pytest.mark.parametrize("torch, required, status, last", [
    (CUDA_TORCH, "--require-cuda", 0, "resolves: 0 failed, 0 warnings; torch's CUDA build required"),
    (_package("torch", "2.13.0+cpu"), "--require-cuda", 1, "FAILED: 1 failed, 0 warnings; torch's CUDA build required"),
    (_package("torch", "2.13.0+cpu"), "--no-require-cuda", 0, "resolves: 0 failed, 1 warnings; torch's CUDA build not "
                                                             "required"),
])
def test_the_script_checks_a_report_and_exits_non_zero_on_a_failure(tmp_path, torch, required, status, last):
    pins = gpu_resolve.read_pins((REPO_ROOT / "pyproject.toml").read_text(), (REPO_ROOT / "Makefile").read_text())
    report = _report(*[_package(name, version) for name, version in pins.items() if name != "torch"], torch)
    report.update(pip_version="26.3", environment={"python_full_version": "3.11.7", "sys_platform": "linux",
                                                   "platform_machine": "x86_64"})
    (tmp_path / "report.json").write_text(json.dumps(report))
    out = subprocess.run([sys.executable, str(GPU_RESOLVE), "--report", str(tmp_path / "report.json"), required],
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert (out.returncode, lines[0], lines[-1]) == (
        status, f"{len(report['install'])} packages for Python 3.11.7 on linux x86_64 (pip 26.3)", last), out.stdout


def _make(*args, nvidia_smi, tmp_path):
    """make in the repository with PATH holding a stand-in nvidia-smi or none."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "nvidia-smi").exists()]
    if nvidia_smi:
        (tmp_path / "bin").mkdir(exist_ok=True)
        (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho 580.65.06\n")
        (tmp_path / "bin" / "nvidia-smi").chmod(0o755)
        path.insert(0, str(tmp_path / "bin"))
    return subprocess.run(["make", "--no-print-directory", *args, f"VENV={tmp_path / 'venv'}"], cwd=REPO_ROOT,
                          env={**os.environ, "PATH": os.pathsep.join(path)}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("profile", ["h100", "h100-original"])
def test_make_run_refuses_a_gpu_profile_at_once_without_nvidia_smi(tmp_path, profile):
    out = _make("run", f"PROFILE={profile}", nvidia_smi=False, tmp_path=tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    assert f"profile {profile} runs on CUDA, and no nvidia-smi is on PATH" in out.stderr
    assert "python3 scripts/gpu_resolve.py" in out.stderr and f"make run PROFILE={profile}" in out.stderr
    assert not (tmp_path / "venv").exists(), "nothing was installed"
    assert _make("setup-gpu", nvidia_smi=False, tmp_path=tmp_path).returncode != 0


def test_make_run_installs_the_gpu_extra_before_a_gpu_profiles_run(tmp_path):
    planned = _make("-n", "run", "PROFILE=h100", nvidia_smi=True, tmp_path=tmp_path)
    assert planned.returncode == 0, planned.stderr
    lines, venv = planned.stdout.splitlines(), tmp_path / "venv"
    gpu = lines.index(f"{venv}/bin/python -m pip install --quiet torch==2.13.0 -e '.[gpu,dev]'")
    assert lines.index(f"touch {venv}/.installed") < gpu < lines.index(f"touch {venv}/.installed-gpu")
    assert f"{venv}/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec" in lines[gpu:]
    assert lines[-1] == f"{venv}/bin/python -m azlib run --profile h100"


@pytest.mark.parametrize("nvidia_smi", [False, True])
def test_make_run_with_a_cpu_profile_installs_no_gpu_extra(tmp_path, nvidia_smi):
    for profile in ([], ["PROFILE=smoke"]):
        planned = _make("-n", "run", *profile, nvidia_smi=nvidia_smi, tmp_path=tmp_path)
        assert planned.returncode == 0, planned.stderr
        assert "[gpu" not in planned.stdout and ".installed-gpu" not in planned.stdout
        assert planned.stdout.splitlines()[-1] == (
            f"{tmp_path / 'venv'}/bin/python -m azlib run --profile {profile[0][8:] if profile else 'cpu'}")


def test_each_optional_package_is_in_the_extra_its_error_names():
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (package, extra) in EXTRAS.items():
        assert package in {Requirement(r).name for r in extras[extra]}, (module, extra)


def vllm_backend(tmp_path):
    from azlib.models.vllm import VLLMBackend

    VLLMBackend("embedded:smollm2-135m-instruct")


def adamw_8bit(tmp_path):
    from azlib.grpo import GRPOSettings, make_optimizer

    make_optimizer([torch.nn.Parameter(torch.zeros(1))], GRPOSettings(optimizer="adamw_8bit"))


def unsloth_student(tmp_path):
    from azlib.models.student import Student

    Student("embedded:smollm2-135m-instruct", use_unsloth=True)


def trl_arm(tmp_path):
    from azlib.lab.trl_arm import train_with_trl

    train_with_trl(None, [], tmp_path, token_budget=0)


def verifiers_taskset(tmp_path):
    importlib.import_module("azlib_gsm8k")


@pytest.mark.parametrize("module, use, says, extra", [
    ("vllm", vllm_backend, "the vllm backend needs vllm", "gpu"),
    ("bitsandbytes", adamw_8bit, "optimizer adamw_8bit needs bitsandbytes", "gpu"),
    ("unsloth", unsloth_student, r"use_unsloth \(a CUDA machine\) needs unsloth", "unsloth"),
    ("trl", trl_arm, "the TRL arm needs trl", "dev"),
    ("verifiers", verifiers_taskset, "the azlib-gsm8k taskset needs verifiers", "verifiers"),
])
def test_a_missing_optional_package_is_an_error_naming_its_extra(monkeypatch, tmp_path, module, use, says, extra):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails as if it were not installed
    for name in ("azlib_gsm8k", "azlib_gsm8k.taskset"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtra, match=says) as err:
        use(tmp_path)
    assert f"pip install -e '.[{extra}]'" in str(err.value) and isinstance(err.value, ImportError)


def test_require_returns_the_module_and_says_what_to_do_instead(monkeypatch):
    installed = types.ModuleType("vllm")
    monkeypatch.setitem(sys.modules, "vllm", installed)
    assert require("vllm", "x") is installed
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(MissingExtra, match=r"^x needs vllm \(.*\): pip install -e '\.\[gpu\]'; or use backend 'hf'$"):
        require("vllm.inputs", "x", otherwise="or use backend 'hf'")
