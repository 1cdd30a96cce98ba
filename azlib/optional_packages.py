"""Optional packages, the extras in pyproject.toml: `require` imports one, or fails with an error that names the
extra to install. Not an installer and not a version check (transformers' is azlib.models.hf_internals)."""

from __future__ import annotations

import importlib
from types import ModuleType

# Top-level module -> (the package that installs it, the extra that brings it); tests/test_optional_packages.py checks
# each against pyproject.toml.
EXTRAS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm", "gpu"),
    "bitsandbytes": ("bitsandbytes", "gpu"),
    "unsloth": ("unsloth", "unsloth"),
    "trl": ("trl", "dev"),
    "verifiers": ("verifiers", "verifiers"),
}


class MissingExtra(ImportError):
    """An optional package is not installed (or does not import); the message names the extra that brings it."""


def require(module: str, purpose: str, *, otherwise: str = "") -> ModuleType:
    """`import module` (dotted names too), or MissingExtra: "<purpose> needs <package> (<import error>):
    pip install -e '.[<extra>]'", then `otherwise`, what to do instead, when there is something."""
    package, extra = EXTRAS[module.split(".")[0]]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        instead = f"; {otherwise}" if otherwise else ""
        raise MissingExtra(f"{purpose} needs {package} ({err}): pip install -e '.[{extra}]'{instead}") from None
