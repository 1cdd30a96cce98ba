"""Models: one loader (embedded GGUF, hub names, local folders) and one generation interface
with three backends: hf (transformers, CPU default), vllm (offline engine), openai (HTTP servers)."""

from azlib.models.generation import Backend, BackendError, Prompt, Sample
from azlib.models.loading import EMBEDDED_MODELS, ModelLoadError, cache_dir, load_model, resolve_model_path

DEFAULT_MODEL = "embedded:smollm2-135m-instruct"
BACKENDS = ("hf", "vllm", "openai")


def make_backend(kind: str, model: str = DEFAULT_MODEL, **options) -> Backend:
    """A backend by name; options go to its constructor (e.g. batch_size for hf, base_url for openai)."""
    if kind == "hf":
        from azlib.models.hf import HFBackend

        return HFBackend(model, **options)
    if kind == "vllm":
        from azlib.models.vllm import VLLMBackend

        return VLLMBackend(model, **options)
    if kind == "openai":
        from azlib.models.openai import OpenAIBackend

        return OpenAIBackend(model, **options)
    raise ValueError(f"unknown backend {kind!r}; choose one of {BACKENDS}")


__all__ = [
    "BACKENDS", "DEFAULT_MODEL", "EMBEDDED_MODELS", "Backend", "BackendError", "ModelLoadError", "Prompt", "Sample",
    "cache_dir", "load_model", "make_backend", "resolve_model_path",
]
