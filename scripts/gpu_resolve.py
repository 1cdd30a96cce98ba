#!/usr/bin/env python3
"""Resolve azlib's GPU install for this machine's Python and check it, before anything is installed.

    python3 scripts/gpu_resolve.py [--python PYTHON] [--report FILE] [--require-cuda | --no-require-cuda]
                                   [-- PIP_OPTION ...]

It asks pip what it would install for `.[gpu,dev]` and torch (`pip install --dry-run --ignore-installed --report`,
in a fresh environment's terms: nothing installed is reused, nothing is installed), then compares pip's report with
the pins: every `==` pin of the gpu and dev extras in pyproject.toml, and the Makefile's TORCH_VERSION. It prints
one line per check: each pinned package's resolved version, torch's build (CUDA or CPU), the CUDA runtime the
nvidia-* wheels bring and the NVIDIA driver that runtime needs (against this machine's driver where nvidia-smi is
on PATH), and the torch companion packages (torchaudio, torchvision, torchcodec) built for another torch.

A CPU build of torch fails the check where CUDA is required: by default where nvidia-smi is on PATH (the machine
the GPU install is for). Exit status: 0 when no check fails (warnings included), 1 when one fails, 2 when pip cannot
resolve the set. Standard library only, Python 3.11+ (the version azlib requires)."""

from __future__ import annotations

import sys

if sys.version_info < (3, 11):
    sys.exit(f"azlib needs Python 3.11+; this is {sys.version.split()[0]}")

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ("gpu", "dev")

# The oldest NVIDIA driver (Linux) that runs a CUDA major release's runtime, every minor release of it included:
# NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility" (the same table: NVIDIA's CUDA Compatibility guide, "Minor Version Compatibility").
MIN_DRIVER = {13: 580, 12: 525}

COMPANIONS = ("torchaudio", "torchvision", "torchcodec")
# What the Makefile does about the companions: azlib imports none of them.
COMPANIONS_DONE = ("the Makefile's GPU install (make setup-gpu) and .venv-vllm uninstall torchvision, torchaudio "
                   "and torchcodec: azlib imports none of them")
# From torchaudio 2.11 on, torchaudio is built on PyTorch's stable ABI and works with its own torch release and every
# later one; before, a torchaudio release works with the one torch release of its number (torchaudio's installation
# page, "Compatibility Matrix").
TORCHAUDIO_STABLE_ABI = (2, 11)
# torchvision 0.N is torchvision's release for torch 2.(N - 15) (torchvision's README, its installation table).
TORCHVISION_MINOR_OFFSET = 15


class Finding(NamedTuple):
    level: str  # "ok", "note", "warn" or "fail"; only "fail" makes the exit status non-zero
    text: str


class Requirement(NamedTuple):
    name: str
    specifiers: tuple[tuple[str, str], ...]  # (operator, version), e.g. (("==", "2.13.0"),)
    marker: str


REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;()]*)\)?\s*(?:;\s*(.*))?$")
SPECIFIER = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+?)\s*$")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): lower case, runs of - _ . as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(text: str) -> Requirement:
    """A Requires-Dist or pyproject requirement: name, version specifiers and marker (no URL requirements)."""
    m = REQUIREMENT.match(text)
    if not m:
        raise ValueError(f"not a requirement: {text!r}")
    specifiers = []
    for part in filter(str.strip, m.group(2).split(",")):
        s = SPECIFIER.match(part)
        if not s:
            raise ValueError(f"not a version specifier: {part!r} in {text!r}")
        specifiers.append((s.group(1), s.group(2)))
    return Requirement(canonical(m.group(1)), tuple(specifiers), (m.group(3) or "").strip())


def release(version: str) -> tuple[int, ...]:
    """The numeric release segment of a version, trailing zeros dropped: '2.13.0+cpu' -> (2, 13)."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
        if digits.group() != piece:
            break
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def same_version(resolved: str, pinned: str) -> bool:
    """`==pinned` holds for the resolved version: the public versions agree (a local label such as +cpu aside;
    numeric releases compared with trailing zeros dropped, as PEP 440 does)."""
    public = resolved.split("+")[0]
    if re.fullmatch(r"[\d.]+", public) and re.fullmatch(r"[\d.]+", pinned):
        return release(public) == release(pinned)
    return public == pinned


def read_pins(pyproject: str, makefile: str) -> dict[str, str]:
    """The `==` pins of the gpu and dev extras (pyproject.toml's text), and torch's version (the Makefile's text)."""
    optional = tomllib.loads(pyproject)["project"]["optional-dependencies"]
    pins = {}
    for extra in EXTRAS:
        for text in optional[extra]:
            requirement = parse_requirement(text)
            if len(requirement.specifiers) == 1 and requirement.specifiers[0][0] == "==":
                pins[requirement.name] = requirement.specifiers[0][1]
    torch = re.search(r"^TORCH_VERSION\s*:?=\s*(\S+)\s*$", makefile, re.M)
    if not torch:
        raise ValueError("the Makefile sets no TORCH_VERSION")
    pins["torch"] = torch.group(1)
    return pins


def _requires(metadata: dict) -> list[Requirement]:
    """The unconditional and platform-conditional requirements of a package (those of its extras, and those this
    parser does not read such as URL requirements, left out)."""
    requirements = []
    for text in metadata.get("requires_dist") or []:
        try:
            requirements.append(parse_requirement(text))
        except ValueError:
            continue
    return [r for r in requirements if "extra" not in r.marker]


def torch_build(metadata: dict) -> tuple[str, int | None]:
    """('cpu', None) or ('cuda', its CUDA major release, None where it says none) for torch's metadata: the local
    label (+cpu, +cu130) where there is one, else the nvidia-cuda-runtime requirement that a CUDA build declares."""
    local = metadata["version"].partition("+")[2]
    if local == "cpu":
        return "cpu", None
    if m := re.fullmatch(r"cu(\d+)(\d)", local):
        return "cuda", int(m.group(1))
    for requirement in _requires(metadata):
        if m := re.fullmatch(r"nvidia-cuda-runtime(?:-cu(\d+))?", requirement.name):
            pinned = [v for op, v in requirement.specifiers if op == "=="]
            major = m.group(1) or (pinned[0].split(".")[0] if pinned else None)
            return "cuda", int(major) if major else None
    return "cpu", None


def cuda_runtimes(packages: dict[str, dict]) -> list[tuple[str, str, int]]:
    """(name, version, CUDA major) of each CUDA runtime wheel among the packages (nvidia-cuda-runtime[-cuNN])."""
    return [(name, meta["version"], int(meta["version"].split(".")[0])) for name, meta in sorted(packages.items())
            if re.fullmatch(r"nvidia-cuda-runtime(?:-cu\d+)?", name)]


def companion_torch(name: str, metadata: dict) -> tuple[str, tuple[int, ...], str] | None:
    """The torch versions a companion package is built for: (how, release, why) where how is '==' (that torch
    release only) or '>=' (that release and later), or None where neither its metadata nor its release tells."""
    for requirement in _requires(metadata):
        if requirement.name == "torch":
            for op, version in requirement.specifiers:
                if op == "==":
                    return "==", release(version.rstrip(".*")), f"its Requires-Dist pins torch=={version}"
    own = release(metadata["version"])
    if name == "torchaudio" and len(own) >= 2:
        if own[:2] >= TORCHAUDIO_STABLE_ABI:
            return ">=", own[:2], "torchaudio's compatibility matrix: built on torch's stable ABI"
        return "==", own[:2], "torchaudio's compatibility matrix"
    if name == "torchvision" and len(own) >= 2 and own[0] == 0:
        return "==", (2, own[1] - TORCHVISION_MINOR_OFFSET), "torchvision's compatibility table"
    return None


def check(report: dict, pins: dict[str, str], *, require_cuda: bool, driver: str | None = None) -> list[Finding]:
    """Compare pip's installation report (`pip install --dry-run --report`) with the pins (name -> version).

    require_cuda: a CPU build of torch fails (else it is a warning). driver: this machine's NVIDIA driver version
    (nvidia-smi's, e.g. '580.65.06'), checked against the CUDA runtime's minimum; None where it has none."""
    packages = {canonical(item["metadata"]["name"]): item["metadata"] for item in report["install"]}
    findings = []
    for name, pinned in pins.items():
        meta = packages.get(name)
        if meta is None:
            findings.append(Finding("fail", f"{name}: pinned {pinned}, not among what pip would install"))
        elif same_version(meta["version"], pinned):
            findings.append(Finding("ok", f"{name} {meta['version']}"))
        else:
            findings.append(Finding("fail", f"{name} {meta['version']}: pinned {pinned}"))

    torch = packages.get("torch")
    if torch is not None:
        build, major = torch_build(torch)
        if build == "cuda":
            findings.append(Finding("ok", f"torch {torch['version']}: the CUDA build"
                                          + (f" (CUDA {major})" if major else "")))
        else:
            text = (f"torch {torch['version']}: the CPU build (vLLM's CUDA kernels need the CUDA build: PyPI's Linux "
                    "x86-64 torch, or the index https://download.pytorch.org/whl/cu130)")
            findings.append(Finding("fail" if require_cuda else "warn", text))

    runtimes = cuda_runtimes(packages)
    if not runtimes:
        findings.append(Finding("fail" if require_cuda else "note", "no CUDA runtime wheel (nvidia-cuda-runtime)"))
    driver_major = int(driver.split(".")[0]) if driver else None
    for name, version, major in runtimes:
        needed = MIN_DRIVER.get(major)
        head = f"CUDA {major} runtime ({name} {version})"
        if needed is None:
            findings.append(Finding("warn", f"{head}: no driver minimum known (MIN_DRIVER)"))
        elif driver_major is None:
            findings.append(Finding("note", f"{head}: needs NVIDIA driver >= {needed}; no driver here"))
        elif driver_major >= needed:
            findings.append(Finding("ok", f"{head}: needs NVIDIA driver >= {needed}; this machine's is {driver}"))
        else:
            findings.append(Finding("fail", f"{head}: needs NVIDIA driver >= {needed}; this machine's is {driver}"))

    torch_release = release(torch["version"])[:2] if torch is not None else None
    for name in COMPANIONS:
        meta = packages.get(name)
        if meta is None or torch_release is None:
            continue
        head = f"{name} {meta['version']}"
        built = companion_torch(name, meta)
        if built is None:
            findings.append(Finding("warn", f"{head}: declares no torch version, so not checked; {COMPANIONS_DONE}"))
            continue
        how, wanted, why = built
        fits = torch_release >= wanted if how == ">=" else torch_release == wanted[:2]
        wants = f"torch {how} {'.'.join(map(str, wanted))}"
        if fits:
            findings.append(Finding("ok", f"{head}: for {wants} ({why})"))
        else:
            findings.append(Finding("warn", f"{head}: built for {wants} ({why}), pip would install torch "
                                            f"{torch['version']}; {COMPANIONS_DONE}"))
    return findings


def nvidia_driver() -> str | None:
    """This machine's NVIDIA driver version, from nvidia-smi; None where nvidia-smi is not on PATH or fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=60)
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


class ResolveError(Exception):
    """pip could not resolve the set (its message is the error's)."""


def resolve(python: str, torch: str, options: list[str]) -> dict:
    """pip's installation report for `.[gpu,dev]` and torch==<torch> under the given Python (options: pip's)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
                   str(path), *options, f".[{','.join(EXTRAS)}]", f"torch=={torch}"]
        print("$ " + " ".join(command[:8] + ["REPORT.json"] + command[9:]), flush=True)
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if out.returncode != 0 or not path.exists():
            raise ResolveError(f"{out.stderr[-4000:]}\npip could not resolve .[{','.join(EXTRAS)}] torch=={torch} "
                               f"(exit {out.returncode})")
        return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the Python whose pip resolves, for its version (default: this one, %(default)s)")
    parser.add_argument("--report", type=Path, help="check this pip report (pip install --dry-run --report FILE) "
                                                    "instead of resolving")
    parser.add_argument("--require-cuda", action=argparse.BooleanOptionalAction, default=None,
                        help="fail on torch's CPU build (default: where nvidia-smi is on PATH)")
    parser.add_argument("pip_options", nargs="*", metavar="-- PIP_OPTION",
                        help="more options for pip, after --: e.g. -- --extra-index-url URL")
    args = parser.parse_args(argv)

    pins = read_pins((REPO / "pyproject.toml").read_text(), (REPO / "Makefile").read_text())
    driver = nvidia_driver()
    require_cuda = shutil.which("nvidia-smi") is not None if args.require_cuda is None else args.require_cuda
    start = time.monotonic()
    try:
        report = json.loads(args.report.read_text()) if args.report else resolve(args.python, pins["torch"], args.pip_options)
    except ResolveError as error:
        print(error, file=sys.stderr)
        return 2
    took = "" if args.report else f", {time.monotonic() - start:.0f} s"
    env = report.get("environment", {})
    print(f"{len(report['install'])} packages for Python {env.get('python_full_version', '?')} on "
          f"{env.get('sys_platform', '?')} {env.get('platform_machine', '?')} (pip {report.get('pip_version', '?')}"
          f"{took})")
    findings = check(report, pins, require_cuda=require_cuda, driver=driver)
    for finding in findings:
        print(f"{finding.level:<5} {finding.text}")
    failed = sum(f.level == "fail" for f in findings)
    warned = sum(f.level == "warn" for f in findings)
    cuda = "torch's CUDA build required" if require_cuda else "torch's CUDA build not required"
    if args.require_cuda is None:
        cuda += " (nvidia-smi is on PATH)" if require_cuda else " (no nvidia-smi on PATH)"
    print(f"{'FAILED' if failed else 'resolves'}: {failed} failed, {warned} warnings; {cuda}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
