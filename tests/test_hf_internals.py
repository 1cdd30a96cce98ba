"""azlib.models.hf_internals, the one module that uses transformers' internals: the installed transformers is
in its supported range, every internal it relies on is there with the parameters it passes (an upgrade fails
here, loudly), and its caches give a tiny random model's own logits."""

import tomllib

import pytest
import torch
import transformers
from packaging.requirements import Requirement

from azlib.models import hf_internals
from azlib.paths import REPO_ROOT


def test_the_installed_transformers_is_supported_and_has_every_internal_azlib_uses():
    assert transformers.__version__ in hf_internals.SUPPORTED, (
        f"transformers {transformers.__version__} is outside {hf_internals.SUPPORTED}")
    assert hf_internals.problems() == []


def test_the_supported_range_is_pyprojects_pin():
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [Requirement(d) for d in dependencies if Requirement(d).name == "transformers"]
    assert pin.specifier == hf_internals.SUPPORTED


def test_a_changed_transformers_is_reported_by_name(monkeypatch):
    monkeypatch.setattr(hf_internals.transformers, "__version__", "5.20.0")  # the module it reads
    monkeypatch.setattr(transformers.cache_utils.DynamicLayer, "batch_select_indices", lambda self, rows: None)
    monkeypatch.delattr(transformers.modeling_layers.GradientCheckpointingLayer, "_can_checkpoint_with_cache")
    monkeypatch.setattr(transformers.cache_utils.Cache, "__init__", lambda self, layer_list=None: None)
    found = "\n".join(hf_internals.problems())
    assert "transformers 5.20.0 is outside the supported range" in found
    assert "DynamicLayer.batch_select_indices(self, rows): azlib expects it to start with ['self', 'indices']" in found
    assert "GradientCheckpointingLayer._can_checkpoint_with_cache is gone" in found
    assert "Cache.__init__" in found and "missing ['layers', 'layer_class_to_replicate']" in found


@pytest.fixture(scope="module")
def tiny():
    """A random two-layer Llama in memory (grouped heads: 4 query heads on 2 key/value heads)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config).eval()


@torch.no_grad()
def test_buffer_and_prefix_caches_give_the_models_own_logits(tiny):
    ids = torch.randint(64, (3, 10), generator=torch.Generator().manual_seed(1))
    full = tiny(input_ids=ids).logits
    cache = hf_internals.buffer_cache(capacity=12)
    head = tiny(input_ids=ids[:, :6], past_key_values=cache, use_cache=True).logits
    step = tiny(input_ids=ids[:, 6:], position_ids=torch.arange(6, 10).expand(3, -1), past_key_values=cache,
                use_cache=True).logits
    assert torch.allclose(torch.cat([head, step], 1), full, atol=1e-5)
    assert cache.get_seq_length() == 10 and cache.layers[0].keys.shape[2] == 12, "written in place, not grown"
    hf_internals.keep_rows(cache, torch.tensor([2, 0]))
    assert cache.layers[0].keys.shape[0] == 2

    recorded = hf_internals.recording_cache()
    tiny(input_ids=ids[:1, :6], past_key_values=recorded, use_cache=True)
    shared = hf_internals.prefix_cache(recorded, torch.tensor([0, 0]))  # one prompt, two continuations
    rest = tiny(input_ids=ids[:1, 6:].expand(2, -1), position_ids=torch.arange(6, 10).expand(2, -1),
                past_key_values=shared, use_cache=True).logits
    assert torch.allclose(rest, full[:1, 6:].expand(2, -1, -1), atol=1e-5)
    assert shared.get_seq_length() == 6, "a read-only prefix: nothing stored"


def test_grouped_attention_and_the_checkpointing_flag_are_set_only_inside_their_blocks(tiny):
    before = tiny.config._attn_implementation
    with hf_internals.grouped_attention_in(tiny):
        assert tiny.config._attn_implementation == hf_internals.GROUPED_ATTENTION
        with torch.no_grad():
            tiny(input_ids=torch.tensor([[1, 2, 3]]))
    assert tiny.config._attn_implementation == before
    layers = list(tiny.model.layers)
    with hf_internals.caches_kept_under_checkpointing(tiny):
        assert all(layer._can_checkpoint_with_cache for layer in layers)
    assert not any(layer._can_checkpoint_with_cache for layer in layers)
    assert all("_can_checkpoint_with_cache" not in vars(layer) for layer in layers), "back to the class's value"
