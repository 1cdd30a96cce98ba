"""The optional extras: they resolve together with the main dependencies (pip's own resolver, a dry run
against the package registry, nothing installed), and a missing one is an error that names it."""

import importlib
import json
import subprocess
import sys
import tomllib
import types

import pytest
import torch
from packaging.requirements import Requirement

from azlib.extras import EXTRAS, MissingExtra, require
from azlib.paths import REPO_ROOT


def resolve(*requirements: str) -> dict[str, str]:
    """name -> version of everything pip would install for the requirements, in a fresh environment."""
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", "-", *requirements], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"pip could not resolve {requirements}:\n{out.stderr[-3000:]}"
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(out.stdout)["install"]}


@pytest.mark.registry
@pytest.mark.parametrize("extras, pinned", [
    ("gpu,dev", {"vllm": "0.32.0", "bitsandbytes": "0.50.2", "trl": "1.16.0"}),
    ("unsloth", {"unsloth": "2026.10.9", "bitsandbytes": "0.50.2"}),
])
def test_extra_resolves_with_the_main_dependencies(extras, pinned):
    versions = resolve(f"{REPO_ROOT}[{extras}]", "torch==2.13.0")
    assert {name: versions.get(name) for name in pinned} == pinned
    assert versions["torch"].startswith("2.13.0") and versions["azlib"] == "0.1.0"


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
    from azlib.peers import train_with_trl

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
