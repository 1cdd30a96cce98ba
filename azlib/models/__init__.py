"""Models: one loader for the embedded model, hub names and local folders.
Generation backends (hf, vllm, openai) sit beside it, behind one interface."""

from azlib.models.loading import EMBEDDED_MODELS, ModelLoadError, cache_dir, load_model, resolve_model_path

DEFAULT_MODEL = "embedded:smollm2-135m-instruct"

__all__ = ["DEFAULT_MODEL", "EMBEDDED_MODELS", "ModelLoadError", "cache_dir", "load_model", "resolve_model_path"]
