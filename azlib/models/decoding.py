"""azlib's own decode loop over a transformers model: KV written in place into one buffer, finished
rows dropped from the batch, a shared prompt prefix computed once, raw log-probs, temperature/top-p."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from azlib.models.hf_internals import (
    Cache, buffer_cache, buffer_cache_from, grouped_attention_in, keep_rows, set_length, write_rows,
)

MIN_SHARED_PREFIX = 16  # tokens; below this a separate prefix pass costs more than it saves
PREFILL_TOKENS = 1024  # padded tokens per prefill forward: long prompts go alone, short ones together
COMPACT_AT = 0.25  # drop finished rows from the batch once this share of it has finished


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]
    logprobs: list[float]  # raw: log_softmax of the logits, before temperature and top-p
    finished: bool  # ended by an EOS token or `is_done`; False: cut at max_new_tokens


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens every row starts with (each row keeps at least one of its own); 0 when too few to pay."""
    if len(rows) < 2:
        return 0
    shared, shortest = 0, min(len(r) for r in rows) - 1
    while shared < shortest and all(r[shared] == rows[0][shared] for r in rows):
        shared += 1
    return shared if shared >= MIN_SHARED_PREFIX else 0


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering as transformers' TopPLogitsWarper: keep the most likely tokens whose
    probabilities sum to top_p (at least one), the rest to -inf."""
    ascending, order = logits.sort(-1)
    remove = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -1] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def choose(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> torch.Tensor:
    """Next token per row: argmax at temperature 0, else a sample from softmax(logits / T) after top-p."""
    if temperature == 0:
        return logits.argmax(-1)
    scaled = logits.float() / temperature
    if top_p < 1:
        scaled = top_p_filter(scaled, top_p)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator).squeeze(-1)


def _prefill_groups(lengths: Sequence[int]) -> list[range]:
    """Consecutive rows (sorted by length) in groups of at most PREFILL_TOKENS padded tokens."""
    groups, start = [], 0
    for end in range(1, len(lengths) + 1):
        if end == len(lengths) or (end + 1 - start) * max(lengths[start : end + 1]) > PREFILL_TOKENS:
            groups.append(range(start, end))
            start = end
    return groups


def _prompt_mask(real: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, 1, width, keys] for the last `width` key columns as queries: each sees the real keys
    up to itself, and a pad sees itself (no row of the softmax may be all -inf)."""
    keys = real.shape[1]
    columns = torch.arange(keys, device=real.device)
    queries = keys - width + torch.arange(width, device=real.device)
    causal = columns[None, :] <= queries[:, None]
    return ((real[:, None, :] & causal) | (columns[None, :] == queries[:, None]))[:, None]


def _prefill(model, prefix: Cache | None, shared: int, suffixes: list[list[int]], pad_id: int):
    """Forward prompt suffixes (after the shared prefix) together; returns their cache, key mask
    [rows, shared + width] and last logits. One unpadded row with no prefix takes the causal kernel."""
    device, width = model.device, max(len(s) for s in suffixes)
    real = torch.zeros(len(suffixes), shared + width, dtype=torch.bool, device=device)
    real[:, :shared] = True
    ids = torch.full((len(suffixes), width), pad_id, device=device)
    for r, s in enumerate(suffixes):
        ids[r, width - len(s) :] = torch.tensor(s, device=device)
        real[r, shared + width - len(s) :] = True
    cache = buffer_cache(width) if prefix is None else buffer_cache_from(prefix, shared, len(suffixes), shared + width)
    positions = (real.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    mask = None if prefix is None and len(suffixes) == 1 else _prompt_mask(real, width)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                   logits_to_keep=1).logits[:, -1]
    return cache, real, logits


@torch.no_grad()
def decode(
    model,
    rows: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    eos_ids: set[int],
    pad_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    is_done: Callable[[list[int]], bool] | None = None,
    generator: torch.Generator | None = None,
) -> list[Decoded]:
    """Continue every row (prompt token ids) until an EOS token, `is_done(new_tokens)` or
    max_new_tokens. The cache buffer holds [shared prefix | left-padded prompts | new tokens];
    a key mask says which columns are real. Prompts are prefilled in groups of similar length."""
    device = model.device
    shared = shared_prefix_length(rows)
    suffixes = [list(r[shared:]) for r in rows]
    width = max(len(s) for s in suffixes)
    capacity = shared + width + max_new_tokens
    with grouped_attention_in(model):
        prefix = None
        if shared:
            prefix = buffer_cache(shared)
            model(input_ids=torch.tensor([list(rows[0][:shared])], device=device), past_key_values=prefix,
                  use_cache=True, logits_to_keep=1)
        order = sorted(range(len(rows)), key=lambda r: len(suffixes[r]))
        cache, logits = None, torch.empty(0)
        real = torch.zeros(len(rows), capacity, dtype=torch.bool, device=device)  # which key columns hold tokens
        for group in _prefill_groups([len(suffixes[r]) for r in order]):
            members = [order[g] for g in group]
            part, part_real, part_logits = _prefill(model, prefix, shared, [suffixes[r] for r in members], pad_id)
            if cache is None:  # shapes are known now: one buffer for all rows, the prefix in front
                cache = buffer_cache_from(part, shared, len(rows), capacity)
                logits = part_logits.new_empty(len(rows), part_logits.shape[-1])
            index = torch.tensor(members, device=device)
            begin = shared + width - (part_real.shape[1] - shared)
            write_rows(cache, part, index, begin, shared + width, skip=shared)
            real[index, :shared] = True
            real[index, begin : shared + width] = part_real[:, shared:]
            logits[index] = part_logits
        set_length(cache, shared + width)
        position = real.sum(-1, keepdim=True)
        alive = list(range(len(rows)))  # batch slot -> row
        tokens: list[list[int]] = [[] for _ in rows]
        logprobs: list[list[float]] = [[] for _ in rows]
        finished = [False] * len(rows)
        for step in range(max_new_tokens):
            chosen = choose(logits, temperature, top_p, generator)
            chosen_logprobs = torch.log_softmax(logits.float(), -1).gather(-1, chosen[:, None]).squeeze(-1)
            for slot, (row, token, logprob) in enumerate(zip(alive, chosen.tolist(), chosen_logprobs.tolist())):
                if finished[row]:
                    continue
                tokens[row].append(token)
                logprobs[row].append(logprob)
                finished[row] = token in eos_ids or (is_done is not None and is_done(tokens[row]))
            column = shared + width + step
            if all(finished[row] for row in alive) or step == max_new_tokens - 1:
                break
            if sum(finished[row] for row in alive) >= COMPACT_AT * len(alive):
                keep = [slot for slot, row in enumerate(alive) if not finished[row]]
                index = torch.tensor(keep, device=device)
                keep_rows(cache, index)
                real, position, chosen = real[index], position[index], chosen[index]
                alive = [alive[slot] for slot in keep]
            real[:, column] = True
            logits = model(input_ids=chosen[:, None], attention_mask=real[:, None, None, : column + 1],
                           position_ids=position, past_key_values=cache, use_cache=True).logits[:, -1]
            position = position + 1
    return [Decoded(t, lp, f) for t, lp, f in zip(tokens, logprobs, finished)]
