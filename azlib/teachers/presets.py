"""Teacher presets: the original system's teacher tiers and the kit's own, as TeacherSpecs (which models, on
which backend, with what memory). Data only; azlib.teachers.ensemble runs teachers."""

from __future__ import annotations

from typing import Sequence

from azlib.models import DEFAULT_MODEL
from azlib.teachers.spec import TeacherSpec

_OPENROUTER = {"backend": "openai", "base_url": "https://openrouter.ai/api/v1", "api_key_env": "OPENROUTER_API_KEY"}
TIERS: dict[str, list[dict]] = {
    # Remote tiers of the original system (OpenAI-compatible endpoints; key from OPENROUTER_API_KEY).
    "free": [
        {"name": "r1-distill-qwen-32b", "model": "deepseek/deepseek-r1-distill-qwen-32b:free"},
        {"name": "nemotron-nano-9b", "model": "nvidia/nemotron-nano-9b-v2:free"},
    ],
    "production": [
        {"name": "qwen2.5-72b", "model": "qwen/qwen-2.5-72b-instruct"},
        {"name": "llama-3.3-70b", "model": "meta-llama/llama-3.3-70b-instruct"},
    ],
    # One 80 GB GPU beside a training 1.5B student: two ungated teachers, each engine with its own budget
    # (vLLM's gpu_memory_utilization is the share of the GPU one engine may take: weights + KV cache). A
    # forward of at most 4096 tokens (max_num_batched_tokens, as TRL pins for colocated engines) keeps vLLM's
    # own activations and CUDA graphs small beside the weights in these small shares.
    "vllm": [
        {"name": "qwen2.5-7b", "model": "Qwen/Qwen2.5-7B-Instruct",  # 15.2 GB bf16 weights
         "options": {"gpu_memory_utilization": 0.25, "max_model_len": 4096, "max_num_batched_tokens": 4096}},
        {"name": "phi-3.5-mini", "model": "microsoft/Phi-3.5-mini-instruct",  # 7.6 GB
         "options": {"gpu_memory_utilization": 0.14, "max_model_len": 4096, "max_num_batched_tokens": 4096}},
    ],
    # The original system's published run: four 7-9B models on vLLM. Three are gated on the hub (accept
    # the licences, set HF_TOKEN); their ~63 GB of bf16 weights need a GPU of their own (0.2 of an 80 GB
    # H100 each, 16 GB, holds the weights of a 7-8B model with a little KV cache; Gemma 2 9B needs 0.25).
    "vllm-original": [
        {"name": "qwen2.5-7b", "model": "Qwen/Qwen2.5-7B-Instruct"},
        {"name": "llama-3.1-8b", "model": "meta-llama/Llama-3.1-8B-Instruct"},
        {"name": "mistral-7b", "model": "mistralai/Mistral-7B-Instruct-v0.3"},
        {"name": "gemma-2-9b", "model": "google/gemma-2-9b-it", "options": {"gpu_memory_utilization": 0.25,
                                                                         "max_model_len": 4096}},
    ],
    # Offline on 2 CPU cores: the embedded model under two personas (notebook 03 adds a third behind a
    # loopback HTTP server it starts, so the remote path runs too).
    "cpu": [
        {"name": "tutor", "backend": "hf", "model": DEFAULT_MODEL, "persona": "tutor", "temperature": 0.7},
        {"name": "terse", "backend": "hf", "model": DEFAULT_MODEL, "persona": "terse", "temperature": 1.0},
    ],
}
_TIER_DEFAULTS = {
    "free": _OPENROUTER,
    "production": _OPENROUTER,
    "vllm": {"backend": "vllm"},
    "vllm-original": {"backend": "vllm", "options": {"gpu_memory_utilization": 0.2, "max_model_len": 4096}},
    "cpu": {},
}


def tier_teachers(tier: str) -> list[TeacherSpec]:
    if tier not in TIERS:
        raise ValueError(f"unknown teacher tier {tier!r}; choose one of {sorted(TIERS)}")
    return [TeacherSpec(tier=tier, **{**_TIER_DEFAULTS[tier], **entry}) for entry in TIERS[tier]]


def chosen_teachers(teachers: Sequence[TeacherSpec], tier: str) -> list[TeacherSpec]:
    """A run's teachers: the explicit specs when there are any (e.g. each behind its own server), else the tier's
    preset; none for tier 'none'."""
    return list(teachers) or ([] if tier == "none" else tier_teachers(tier))


def loopback_teacher(url: str, model: str = DEFAULT_MODEL, api_key_env: str | None = None) -> TeacherSpec:
    """"http-tutor": a model under the tutor persona behind an OpenAI-compatible server on 127.0.0.1 that its
    caller started (notebook 03; azlib.models.serve.BatchingServer), so the remote path runs offline."""
    return TeacherSpec(name="http-tutor", backend="openai", model=model, tier="cpu", base_url=url,
                       api_key_env=api_key_env)
