"""Every use of transformers' internals in azlib: cache layers, the grouped-attention kernel, the checkpointing flag.
Not public API: SUPPORTED and `problems()` (tests/test_hf_internals.py) make an upgrade fail here, in one place."""

from __future__ import annotations

import inspect
import pkgutil
from contextlib import contextmanager

import torch
import torch.nn.functional as F
import transformers
from packaging.specifiers import SpecifierSet
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_layers import GradientCheckpointingLayer

SUPPORTED = SpecifierSet(">=5.16.1,<5.20")  # the same range as pyproject's dependency (a test keeps them equal)

# What azlib calls, overrides or sets, with the parameters it passes: the names before "*" open the signature in
# this order (passed by position, or overridden), those after it are passed by keyword and only need to exist.
RELIED_ON: dict[str, tuple[str, ...]] = {
    "transformers.cache_utils.Cache.__init__": ("self", "*", "layers", "layer_class_to_replicate"),
    "transformers.cache_utils.Cache.batch_select_indices": ("self", "indices"),
    "transformers.cache_utils.DynamicLayer.__init__": ("self",),
    "transformers.cache_utils.DynamicLayer.lazy_initialization": ("self", "key_states", "value_states"),
    "transformers.cache_utils.DynamicLayer.update": ("self", "key_states", "value_states"),
    "transformers.cache_utils.DynamicLayer.get_seq_length": ("self",),
    "transformers.cache_utils.DynamicLayer.batch_select_indices": ("self", "indices"),
    "transformers.integrations.sdpa_attention.sdpa_attention_forward": (
        "module", "query", "key", "value", "attention_mask", "*", "dropout", "scaling"),
    "transformers.AttentionInterface.register": ("key", "value"),
    "transformers.PreTrainedModel.set_attn_implementation": ("self", "attn_implementation"),
    # forward keywords the decode loop and the scoring pass
    "transformers.LlamaForCausalLM.forward": (
        "self", "*", "input_ids", "attention_mask", "position_ids", "past_key_values", "use_cache", "logits_to_keep"),
    "transformers.Qwen2ForCausalLM.forward": (
        "self", "*", "input_ids", "attention_mask", "position_ids", "past_key_values", "use_cache", "logits_to_keep"),
}
# Attributes read or set: the config's active attention kernel, and the checkpointing layers' cache flag.
ATTRIBUTES = ("transformers.PretrainedConfig._attn_implementation",
              "transformers.modeling_layers.GradientCheckpointingLayer._can_checkpoint_with_cache")


# -- grouped attention: a decode step reads each KV head once ----------------------------------------

GROUPED_ATTENTION = "azlib_grouped"


def grouped_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A decode step (one query per row): the query heads sharing a key/value head attend together,
    so the cache is read once per KV head. transformers' sdpa path copies it per query head under a mask."""
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    if length > 1 or heads == kv_heads or kwargs.get("softcap") or getattr(module, "sliding_window", None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, 1, heads, dim), None


AttentionInterface.register(GROUPED_ATTENTION, grouped_attention)


@contextmanager
def grouped_attention_in(model):
    """The model (or a peft wrapper's base model) attends with `grouped_attention` inside the block."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    before = base.config._attn_implementation
    base.set_attn_implementation(GROUPED_ATTENTION)
    try:
        yield
    finally:
        base.set_attn_implementation(before)


# -- the decode loop's cache: one buffer per layer, written in place --------------------------------

class BufferLayer(DynamicLayer):
    """One layer's keys and values, written in place into a buffer sized for the whole decode
    (a DynamicLayer concatenates, copying the whole cache every step)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        # zeros, not empty memory: masked columns still meet the attention weights (0 x NaN is NaN)
        self.keys = key_states.new_zeros((*key_states.shape[:2], self.capacity, key_states.shape[-1]))
        self.values = value_states.new_zeros((*value_states.shape[:2], self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    @classmethod
    def starting_with(cls, keys: torch.Tensor, values: torch.Tensor, rows: int, capacity: int) -> BufferLayer:
        """A layer of `rows` rows whose buffers begin with `keys`/`values` (one row, broadcast)."""
        layer = cls(capacity)
        layer.lazy_initialization(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1))
        layer.keys[:, :, : keys.shape[2]] = keys
        layer.values[:, :, : values.shape[2]] = values
        layer.length = keys.shape[2]
        return layer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        self.keys[:, :, self.length : end] = key_states
        self.values[:, :, self.length : end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.keys, self.values = self.keys[indices], self.values[indices]


def buffer_cache(capacity: int) -> Cache:
    """An empty cache whose layers, made on first use, hold `capacity` positions each."""
    return Cache(layer_class_to_replicate=lambda: BufferLayer(capacity))


def buffer_cache_from(source: Cache, columns: int, rows: int, capacity: int) -> Cache:
    """A cache of `rows` rows and `capacity` positions per layer, each row starting with the first
    `columns` keys/values of `source`'s first row."""
    return Cache(layers=[BufferLayer.starting_with(p.keys[:1, :, :columns], p.values[:1, :, :columns], rows, capacity)
                         for p in source.layers])


def write_rows(cache: Cache, part: Cache, rows: torch.Tensor, begin: int, end: int, skip: int) -> None:
    """Copy `part`'s keys/values from position `skip` to its end into `cache`'s rows `rows`, at positions begin:end."""
    for layer, p in zip(cache.layers, part.layers):
        layer.keys[rows, :, begin:end] = p.keys[:, :, skip : p.length]
        layer.values[rows, :, begin:end] = p.values[:, :, skip : p.length]


def set_length(cache: Cache, length: int) -> None:
    """Every layer holds `length` positions (the next token is written after them)."""
    for layer in cache.layers:
        layer.length = length


def keep_rows(cache: Cache, rows: torch.Tensor) -> None:
    """Drop every row of the cache but `rows`, in their order."""
    cache.batch_select_indices(rows)


# -- the scoring's caches: a prompt's keys/values shared by its completions ------------------------

class _RecordingLayer(DynamicLayer):
    """Keeps the keys/values of the last forward (overwrites: a checkpoint replay writes the same)."""

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys, self.values, self.is_initialized = key_states, value_states, True
        return key_states, value_states


class _PrefixLayer(DynamicLayer):
    """Read-only: every forward sees [prefix | its own keys]; nothing is stored (a replay is harmless)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.is_initialized = keys, values, True

    def update(self, key_states, value_states, *args, **kwargs):
        return torch.cat([self.keys, key_states], -2), torch.cat([self.values, value_states], -2)

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]


def recording_cache() -> Cache:
    """A cache that keeps, per layer, the keys/values of the last forward through it."""
    return Cache(layer_class_to_replicate=_RecordingLayer)


def prefix_cache(recorded: Cache, rows: torch.Tensor) -> Cache:
    """A read-only cache whose row i is row rows[i] of `recorded`: a forward through it sees that prefix."""
    return Cache(layers=[_PrefixLayer(layer.keys[rows], layer.values[rows]) for layer in recorded.layers])


@contextmanager
def caches_kept_under_checkpointing(model):
    """Inside the block the model's checkpointed layers keep the caches passed to them (transformers drops
    them unless a layer is marked `_can_checkpoint_with_cache`): for the two caches above, which a replay
    of the forward leaves as they were."""
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's False


# -- the check -------------------------------------------------------------------------------------

def _signature_problem(dotted: str, expected: tuple[str, ...]) -> str | None:
    try:
        signature = inspect.signature(pkgutil.resolve_name(dotted))
    except (ImportError, AttributeError) as err:
        return f"{dotted} is gone ({type(err).__name__}: {err})"
    params = list(signature.parameters)
    cut = expected.index("*") if "*" in expected else len(expected)
    positional, keywords = list(expected[:cut]), expected[cut + 1 :]
    missing = [k for k in keywords if k not in params]
    if params[: len(positional)] == positional and not missing:
        return None
    return f"{dotted}{signature}: azlib expects it to start with {positional}" + (
        f" and to take {list(keywords)} (missing {missing})" if keywords else "")


def problems() -> list[str]:
    """What does not hold in the installed transformers: a version outside SUPPORTED, a name in RELIED_ON or
    ATTRIBUTES missing or with other parameters, a cache layer defined here that cannot be constructed (an
    abstract method it lacks). Empty when everything is as this module expects."""
    found = []
    if transformers.__version__ not in SUPPORTED:
        found.append(f"transformers {transformers.__version__} is outside the supported range {SUPPORTED} "
                     "(azlib.models.hf_internals): install a supported version, or check and update that module")
    found += [p for dotted, expected in RELIED_ON.items() if (p := _signature_problem(dotted, expected))]
    for dotted in ATTRIBUTES:
        try:
            pkgutil.resolve_name(dotted)
        except (ImportError, AttributeError):
            found.append(f"{dotted} is gone")
    keys = torch.zeros(1, 1, 2, 4)
    for make in (lambda: BufferLayer(4), _RecordingLayer, lambda: _PrefixLayer(keys, keys)):
        try:
            layer = make()
            Cache(layers=[layer]).layers[0].keys  # noqa: B018 (the attribute the copies read)
        except (TypeError, AttributeError) as err:
            found.append(f"a cache layer azlib defines does not work with transformers' Cache: {err}")
    return found
