"""Logits of many completions of few prompts (a GRPO group is G completions of one prompt): each
distinct prompt goes through the model once and its keys/values are shared by its completions.

Exact, gradients included: the completions read the prompt's keys/values through a differentiable
index, so the prompt's part of the gradient is summed over its completions, as in separate rows.
Under gradient checkpointing the layers keep these caches (transformers drops caches there unless a
layer is marked `_can_checkpoint_with_cache`): both caches below may be replayed without harm.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer


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


@contextmanager
def _caches_kept_under_checkpointing(model):
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache  # back to the class's False


def completion_logits(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                      device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits [B, T, vocab] predicting each completion token, the tokens [B, T], mask [B, T]);
    completions right-padded to T, prompts left-padded, positions from the masks."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    which = torch.tensor([distinct.index(tuple(p)) for p in prompts], device=device)
    p_width, c_width = max(len(p) for p in distinct), max(len(c) for c in completions)
    prompt_ids = torch.tensor([[pad_id] * (p_width - len(p)) + list(p) for p in distinct], device=device)
    prompt_mask = torch.tensor([[0] * (p_width - len(p)) + [1] * len(p) for p in distinct], device=device)
    tokens = torch.tensor([list(c) + [pad_id] * (c_width - len(c)) for c in completions], device=device)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (c_width - len(c)) for c in completions], device=device)
    recorded = Cache(layer_class_to_replicate=_RecordingLayer)
    with _caches_kept_under_checkpointing(model):
        first = model(input_ids=prompt_ids, attention_mask=prompt_mask,
                      position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0), past_key_values=recorded,
                      use_cache=True, logits_to_keep=1).logits[:, -1]
        shared = Cache(layers=[_PrefixLayer(layer.keys[which], layer.values[which]) for layer in recorded.layers])
        positions = prompt_mask.sum(-1)[which, None] + torch.arange(c_width, device=device)
        rest = model(input_ids=tokens, attention_mask=torch.cat([prompt_mask[which], completion_mask], -1),
                     position_ids=positions, past_key_values=shared, use_cache=True).logits[:, :-1]
    logits = torch.cat([first[which, None], rest], 1)  # the prompt's last position predicts the first token
    return logits, tokens, completion_mask
