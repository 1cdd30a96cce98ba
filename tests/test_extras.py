"""The optional extras resolve together with the main dependencies: pip's own resolver, a dry run
against the package registry (nothing is installed)."""

import json
import subprocess
import sys

import pytest

from azlib.paths import REPO_ROOT

pytestmark = pytest.mark.registry


def resolve(*requirements: str) -> dict[str, str]:
    """name -> version of everything pip would install for the requirements, in a fresh environment."""
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", "-", *requirements], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"pip could not resolve {requirements}:\n{out.stderr[-3000:]}"
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(out.stdout)["install"]}


@pytest.mark.parametrize("extras, pinned", [
    ("gpu,dev", {"vllm": "0.32.0", "bitsandbytes": "0.50.2", "trl": "1.16.0"}),
    ("unsloth", {"unsloth": "2026.10.9", "bitsandbytes": "0.50.2"}),
])
def test_extra_resolves_with_the_main_dependencies(extras, pinned):
    versions = resolve(f"{REPO_ROOT}[{extras}]", "torch==2.13.0")
    assert {name: versions.get(name) for name in pinned} == pinned
    assert versions["torch"].startswith("2.13.0") and versions["azlib"] == "0.1.0"
