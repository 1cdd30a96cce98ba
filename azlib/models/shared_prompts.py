"""Logits and log-probs of many completions of few prompts, each distinct prompt through the model once, its keys and
values shared by its completions; without gradient, in micro-batches. Not the sampler (azlib.models.decoding)."""

from __future__ import annotations

from typing import Sequence

import torch

from azlib.models.hf_internals import caches_kept_under_checkpointing, prefix_cache, recording_cache

# Bytes of fp32 logits one no-gradient forward may hold: rows x longest completion x vocabulary x 4 stays
# within it (Qwen2.5's vocabulary, 385-token completions: 9 rows). The forward's own logits and logsumexp's
# workspace come on top, about 3x this in all.
SCORING_MEMORY = 2 * 2**30


def completion_logits(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                      device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits [B, T, vocab] predicting each completion token, the tokens [B, T], mask [B, T]);
    completions right-padded to T, prompts left-padded, positions from the masks. Exact, gradients included: the
    completions read their prompt's keys/values through a differentiable index, so the prompt's part of the
    gradient is summed over its completions, as in separate rows."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    which = torch.tensor([distinct.index(tuple(p)) for p in prompts], device=device)
    p_width, c_width = max(len(p) for p in distinct), max(len(c) for c in completions)
    prompt_ids = torch.tensor([[pad_id] * (p_width - len(p)) + list(p) for p in distinct], device=device)
    prompt_mask = torch.tensor([[0] * (p_width - len(p)) + [1] * len(p) for p in distinct], device=device)
    tokens = torch.tensor([list(c) + [pad_id] * (c_width - len(c)) for c in completions], device=device)
    completion_mask = torch.tensor([[1] * len(c) + [0] * (c_width - len(c)) for c in completions], device=device)
    recorded = recording_cache()
    with caches_kept_under_checkpointing(model):
        first = model(input_ids=prompt_ids, attention_mask=prompt_mask,
                      position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0), past_key_values=recorded,
                      use_cache=True, logits_to_keep=1).logits[:, -1]
        shared = prefix_cache(recorded, which)
        positions = prompt_mask.sum(-1)[which, None] + torch.arange(c_width, device=device)
        rest = model(input_ids=tokens, attention_mask=torch.cat([prompt_mask[which], completion_mask], -1),
                     position_ids=positions, past_key_values=shared, use_cache=True).logits[:, :-1]
    logits = torch.cat([first[which, None], rest], 1)  # the prompt's last position predicts the first token
    return logits, tokens, completion_mask


def chosen_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits) at each target, as logit - logsumexp(logits): no [B, T, vocab] log-softmax is kept
    (for a backward pass or beside the logits)."""
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis: logsumexp(l) - sum(softmax(l) * l)."""
    return torch.logsumexp(logits, -1) - (torch.softmax(logits, -1) * logits).sum(-1)


def micro_batches(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], vocab_size: int,
                  memory: int) -> list[list[int]]:
    """Row indices per no-gradient forward: the completions of one prompt together (so its keys/values serve
    them all), shortest first; each batch's rows x longest completion x vocab_size x 4 bytes within `memory`
    (a row that alone exceeds it goes alone)."""
    first: dict[tuple[int, ...], int] = {}
    for i, p in enumerate(prompts):
        first.setdefault(tuple(p), i)
    order = sorted(range(len(prompts)), key=lambda i: (first[tuple(prompts[i])], len(completions[i])))
    batches: list[list[int]] = []
    width = 0
    for i in order:
        wider = max(width, len(completions[i]))
        if batches and (len(batches[-1]) + 1) * wider * vocab_size * 4 <= memory:
            batches[-1].append(i)
            width = wider
        else:
            batches.append([i])
            width = len(completions[i])
    return batches


@torch.no_grad()
def completion_logprobs(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
                        device, *, temperature: float = 1.0, entropy: bool = False, memory: int = SCORING_MEMORY
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """No gradient: (logp [B, T] of each completion token under softmax(logits / temperature), mask [B, T],
    entropy [B, T] or None), 0 on padding, rows in the given order. Computed in micro_batches, so fp32 logits
    exist for one micro-batch at a time."""
    width = max(len(c) for c in completions)
    logp = torch.zeros(len(completions), width, device=device)
    ent = torch.zeros_like(logp) if entropy else None
    for rows in micro_batches(prompts, completions, model.config.vocab_size, memory):
        logits, targets, mask = completion_logits(model, [prompts[i] for i in rows], [completions[i] for i in rows],
                                                  pad_id, device)
        logits = logits.float()  # the one fp32 copy (none for an fp32 model: the logits are this call's own)
        if temperature != 1.0:
            logits.div_(temperature)
        index, padding = torch.tensor(rows, device=device), mask == 0
        logp[index, : targets.shape[1]] = chosen_logprobs(logits, targets).masked_fill(padding, 0.0)
        if entropy:
            ent[index, : targets.shape[1]] = token_entropy(logits).masked_fill(padding, 0.0)
        del logits
    mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in completions], device=device)
    return logp, mask, ent
