"""Countdown's policy and value, AlphaZero's f(s) -> (p, v) over text: a character-level GPT with a value head. Not the
search (azlib.games.countdown.play) nor the losses (azlib.games.countdown.arms)."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from azlib.games.countdown.rules import MAX_MOVE_CHARS, MOVE_END
from azlib.models.gpt import GPT
from azlib.settings import GPTShape

# Every character the rules and the model write; one more id pads a batch's rows on the left (never read).
VOCAB = "\n ()*+-/0123456789=>"
PAD = len(VOCAB)
_IDS = {c: i for i, c in enumerate(VOCAB)}


def encode(text: str) -> list[int]:
    try:
        return [_IDS[c] for c in text]
    except KeyError as bad:
        raise ValueError(f"{bad.args[0]!r} is not a character of Countdown's text (VOCAB: {VOCAB!r})") from None


def _no_pad(logits: torch.Tensor) -> torch.Tensor:
    """The padding id is never written: its logit is taken out of every distribution."""
    return logits.index_fill(-1, torch.tensor([PAD], device=logits.device), -torch.inf)


@lru_cache(maxsize=1 << 16)
def _continuations(lines: tuple[str, ...]) -> dict[str, list[int]]:
    """Prefix -> the ids of the characters that continue it towards one of `lines` (a trie, flattened)."""
    out: dict[str, set[int]] = {}
    for line in lines:
        for t, c in enumerate(line):
            out.setdefault(line[:t], set()).add(_IDS[c])
    return {prefix: sorted(ids) for prefix, ids in out.items()}


def _only(logits: torch.Tensor, allowed: Sequence[list[int] | None]) -> torch.Tensor:
    """Each row's logits with every character but its `allowed` ones taken out (None: the row left as it is)."""
    keep = torch.zeros_like(logits, dtype=torch.bool)
    rows = [r for r, ids in enumerate(allowed) for _ in (ids if ids is not None else range(logits.shape[1]))]
    ids = [i for ids in allowed for i in (ids if ids is not None else range(logits.shape[1]))]
    keep[rows, ids] = True
    return logits.masked_fill(~keep, -torch.inf)


def _rows_with_room(caches: list[list[torch.Tensor]], index: torch.Tensor, room: int) -> None:
    """Each block's prefilled cache made into one row per entry of `index` (the context it continues), with `room`
    empty positions after the context for what the rows append (Block.forward's [keys, values, length] form)."""
    for cache in caches:
        keys, values = (t[index] for t in cache)
        empty = keys.new_zeros(len(index), keys.shape[1], room, keys.shape[3])
        cache[:] = [torch.cat([keys, empty], 2), torch.cat([values, empty], 2), keys.shape[2]]


class Line(NamedTuple):
    """One line the policy wrote: its text without the end mark (what the rules parse), the log-probability of
    the text and its end under the model at temperature 1 (renormalised over the legal characters where the engine
    masks), the characters generated, and whether it ended."""

    text: str
    logprob: float
    tokens: int
    ended: bool  # closed by MOVE_END; False: a line end or the length cap came first (the rules refuse it)


class PolicyValueNet(nn.Module):
    """f(text) -> (next-character logits at every position, value logit at every position). The value of a state
    is read at its text's last character: P(the episode from here is solved), as a logit. The shape's block_size
    (128 by default) holds a 4-number episode of numbers up to 99: at most 101 characters."""

    def __init__(self, shape: GPTShape = GPTShape()):
        super().__init__()
        self.gpt = GPT(shape.gpt(len(VOCAB) + 1))  # Countdown's characters and the pad
        self.value = nn.Linear(shape.n_embd, 1)

    def forward(self, idx: torch.Tensor, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.gpt.hidden(idx, **kwargs)
        return self.gpt.head(h), self.value(h).squeeze(-1)


class Batch(NamedTuple):
    """Texts left-padded into one batch: ids [B, T], each row's positions [B, T] (its first character at 0), and
    the attention mask [B, 1, T, T] (causal, pads never read)."""

    ids: torch.Tensor
    positions: torch.Tensor
    real: torch.Tensor  # [B, T] True at characters, False at pads

    @property
    def mask(self) -> torch.Tensor:
        T = self.ids.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=self.ids.device).tril()
        # a pad's own row reads itself, so that no softmax is over nothing
        return (causal & self.real[:, None, :] | torch.eye(T, dtype=torch.bool, device=self.ids.device))[:, None]


def left_padded(texts: Sequence[str], block_size: int, device: str | torch.device = "cpu") -> Batch:
    rows = [encode(t) for t in texts]
    T = max(map(len, rows))
    if T > block_size:
        raise ValueError(f"a text of {T} characters is longer than the policy's block_size {block_size}")
    ids = torch.full((len(rows), T), PAD, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, T - len(row):] = torch.tensor(row, dtype=torch.long)
    real = ids != PAD
    positions = (real.cumsum(1) - 1).clamp(min=0)
    return Batch(ids.to(device), positions.to(device), real.to(device))


class Extended(NamedTuple):
    """Contexts and the suffixes that follow them, through the net (Policy._extend): each context's last logits and
    value logit; per suffix (flattened, context by context) its context's index, its ids [S, L] right-padded with
    PAD, and its logits [S, L, V] and value logits [S, L] at each of its characters (None where no suffix)."""

    context_logits: torch.Tensor
    context_values: torch.Tensor
    owner: list[int]
    ids: torch.Tensor | None
    logits: torch.Tensor | None
    values: torch.Tensor | None


class Policy:
    """The net behind the calls the search, the arms and the evaluation make: `lines` (sample what the model writes
    next, with the state's value), `values`, and `transcript_logprobs` (differentiable, for the updates, under the
    same legal-line mask the lines were sampled with)."""

    def __init__(self, net: PolicyValueNet, device: str = "cpu", legal_only: bool = True):
        self.net, self.device = net.to(device), device
        # Whether the game engine offers only legal lines (AlphaZero masks illegal moves), or the model may write
        # anything and the rules refuse what is illegal (a loss). The callers pass the legal lines (`lines`).
        self.legal_only = legal_only
        self.block_size = net.gpt.config.block_size

    @torch.no_grad()
    def values(self, texts: Sequence[str], contexts: Sequence[str] | None = None) -> list[float]:
        """P(solved from here) of each state's text, by the value head. With `contexts` (per text, a shorter prefix
        of it, which texts may share: a search's children their parent), each distinct context is computed once and
        its texts' remaining characters read its cached keys: the same values, less computed."""
        if contexts is None:
            self.net.eval()
            batch = left_padded(texts, self.block_size, self.device)
            _, value = self.net(batch.ids, positions=batch.positions, mask=batch.mask)
            return torch.sigmoid(value[:, -1]).tolist()
        groups: dict[str, list[int]] = {}
        for i, (text, context) in enumerate(zip(texts, contexts, strict=True)):
            if not (context and text.startswith(context) and len(text) > len(context)):
                raise ValueError(f"context {context!r} is not a shorter, non-empty prefix of {text!r}")
            groups.setdefault(context, []).append(i)
        order = [i for members in groups.values() for i in members]
        extended = self._extend(list(groups), [[texts[i][len(c):] for i in members] for c, members in groups.items()])
        ends = torch.tensor([len(texts[i]) - len(contexts[i]) - 1 for i in order], device=self.device)
        last = extended.values[torch.arange(len(order), device=self.device), ends]
        read = dict(zip(order, torch.sigmoid(last).tolist()))
        return [read[i] for i in range(len(texts))]

    @torch.no_grad()
    def lines(self, contexts: Sequence[str], n: int, temperature: float, generator: torch.Generator | None = None,
              legal: Sequence[Sequence[str]] | None = None) -> tuple[list[list[Line]], list[float]]:
        """`n` lines sampled after each context (temperature 0: greedy, the n lines equal), and each context's value.
        With `legal` (per context, the lines the rules accept, each with its end mark), every character is drawn
        from those that continue a legal line, the model's probabilities renormalised over them: AlphaZero's masking
        of illegal moves, one character at a time. One prefill of the distinct contexts (episodes that played the
        same lines share theirs), then one cached forward per character for every row at once."""
        self.net.eval()
        distinct = {context: i for i, context in enumerate(dict.fromkeys(contexts))}
        batch = left_padded(list(distinct), self.block_size, self.device)
        caches: list[list[torch.Tensor]] = [[] for _ in self.net.gpt.blocks]
        logits, value = self.net(batch.ids, positions=batch.positions, mask=batch.mask, caches=caches)
        rows = len(contexts) * n
        prefilled = torch.tensor([distinct[c] for c in contexts], device=self.device)
        row_context = prefilled.repeat_interleave(n)  # the prefilled context each row continues
        logits = logits[row_context, -1]
        _rows_with_room(caches, row_context, MAX_MOVE_CHARS)
        real = batch.real[row_context]
        position = batch.positions[row_context, -1]
        written = torch.full((rows, MAX_MOVE_CHARS), PAD, dtype=torch.long, device=self.device)
        logprob = torch.zeros(rows, device=self.device)
        open_rows = torch.ones(rows, dtype=torch.bool, device=self.device)
        ended = torch.zeros(rows, dtype=torch.bool, device=self.device)
        continuations = None if legal is None else [_continuations(tuple(lines)) for lines in legal]
        prefixes = [""] * rows
        for t in range(MAX_MOVE_CHARS):
            logits = _no_pad(logits)
            if continuations is not None:
                logits = _only(logits, [continuations[r // n].get(prefixes[r]) for r in range(rows)])
            logp = F.log_softmax(logits, -1)
            if temperature == 0:
                chosen = logp.argmax(-1)
            else:
                chosen = torch.multinomial(F.softmax(logp / temperature, -1), 1, generator=generator).squeeze(1)
            logprob += torch.where(open_rows, logp.gather(1, chosen[:, None]).squeeze(1), 0.0)
            written[:, t] = torch.where(open_rows, chosen, PAD)
            ended |= open_rows & (chosen == _IDS[MOVE_END])
            open_rows &= (chosen != _IDS[MOVE_END]) & (chosen != _IDS["\n"])
            if continuations is not None:
                prefixes = [p + VOCAB[c] for p, c in zip(prefixes, chosen.tolist())]
            if not open_rows.any() or t + 1 == MAX_MOVE_CHARS:
                break
            real = torch.cat([real, torch.ones(rows, 1, dtype=torch.bool, device=self.device)], 1)
            position = position + 1
            if position.max().item() >= self.block_size:
                break
            mask = real[:, None, None, :]  # one query per row, reading every real key so far
            logits, _ = self.net(chosen[:, None], positions=position[:, None], mask=mask, caches=caches)
            logits = logits[:, -1]
        out = []
        for ids, end, lp in zip(written.tolist(), ended.tolist(), logprob.tolist()):
            text = "".join(VOCAB[c] for c in ids if c != PAD)
            out.append(Line(text[:-1] if end else text, lp, len(text), end))
        return [out[i * n:(i + 1) * n] for i in range(len(contexts))], torch.sigmoid(value[prefilled, -1]).tolist()

    @torch.no_grad()
    def score_lines(self, contexts: Sequence[str], lines: Sequence[Sequence[str]]) -> tuple[list[list[float]],
                                                                                                list[float]]:
        """Each context's given lines (each with its end mark, as legal_lines writes them) scored, and each context's
        value: the log-probability of a line with every character renormalised over those that continue one of its
        context's lines (the mask `lines` samples under), so that a context's lines' probabilities sum to 1: the
        priors of AlphaZero's listed moves. One forward over every line at once, reading its context's cached keys
        (`_extend`)."""
        extended = self._extend(contexts, lines)
        context_values = torch.sigmoid(extended.context_values).tolist()
        if not extended.owner:
            return [[] for _ in contexts], context_values
        flat = [line for group in lines for line in group]
        index, ids, L = torch.tensor(extended.owner, device=self.device), extended.ids, extended.ids.shape[1]
        # character t of a line is drawn from the logits after its context (t = 0) or after its character t - 1
        step_logits = _no_pad(torch.cat([extended.context_logits[index][:, None], extended.logits[:, :-1]], 1))
        continuations = [_continuations(tuple(group)) for group in lines]
        allowed = [continuations[c].get(line[:t]) for c, line in zip(extended.owner, flat) for t in range(L)]
        step_logits = _only(step_logits.reshape(len(flat) * L, -1), allowed).reshape(len(flat), L, -1)
        logp = F.log_softmax(step_logits, -1).gather(2, ids[:, :, None]).squeeze(2)
        logp = logp.masked_fill(ids == PAD, 0.0).sum(1).tolist()
        out: list[list[float]] = [[] for _ in contexts]
        for c, lp in zip(extended.owner, logp):
            out[c].append(lp)
        return out, context_values

    def _extend(self, contexts: Sequence[str], suffixes: Sequence[Sequence[str]]) -> Extended:
        """One prefill of the contexts, then one forward over every suffix at once (`suffixes[c]`: those that follow
        context c, right-padded), each reading its context's cached keys and values: a context is computed once,
        however many suffixes follow it."""
        self.net.eval()
        batch = left_padded(contexts, self.block_size, self.device)
        caches: list[list[torch.Tensor]] = [[] for _ in self.net.gpt.blocks]
        logits, value = self.net(batch.ids, positions=batch.positions, mask=batch.mask, caches=caches)
        owner = [c for c, group in enumerate(suffixes) for _ in group]
        flat = [suffix for group in suffixes for suffix in group]
        if not flat:
            return Extended(logits[:, -1], value[:, -1], owner, None, None, None)
        index = torch.tensor(owner, device=self.device)
        L = max(map(len, flat))
        if batch.ids.shape[1] + L > self.block_size:
            raise ValueError(f"a context and what follows it exceed the policy's block_size {self.block_size}")
        _rows_with_room(caches, index, L)  # each suffix reads its context's keys and values
        ids = torch.full((len(flat), L), PAD, dtype=torch.long)
        for r, suffix in enumerate(flat):
            ids[r, :len(suffix)] = torch.tensor(encode(suffix))
        ids = ids.to(self.device)
        positions = batch.positions[index, -1:] + 1 + torch.arange(L, device=self.device)
        causal = torch.ones(L, L, dtype=torch.bool, device=self.device).tril()
        mask = torch.cat([batch.real[index][:, None, :].expand(-1, L, -1), causal.expand(len(flat), -1, -1)], 2)
        suffix_logits, suffix_values = self.net(ids, positions=positions, mask=mask[:, None], caches=caches)
        return Extended(logits[:, -1], value[:, -1], owner, ids, suffix_logits, suffix_values)

    def transcript_logprobs(self, texts: Sequence[str], written: Sequence[Sequence[bool]],
                            legal: Sequence[Sequence[tuple[int, Sequence[str]]]] | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Differentiable, for the updates: the log-probability [B, T-1] of each text's every character after the
        first, the mask [B, T-1] of the characters the model wrote (`written[b][t]` for character t of text b), and
        the value logits [B, T] (read where a state's text ends). Rows right-padded. With `legal` (per text, each
        model-written line's first character index and the legal lines there), a line's characters are scored
        under the distribution they were sampled from: renormalised over the characters that continue a legal
        line (as `lines` samples them)."""
        self.net.train()
        rows = [encode(t) for t in texts]
        T = max(map(len, rows))
        if T > self.block_size:
            raise ValueError(f"a text of {T} characters is longer than the policy's block_size {self.block_size}")
        ids = torch.full((len(rows), T), PAD, dtype=torch.long)
        model_wrote = torch.zeros(len(rows), T, dtype=torch.bool)
        for r, row in enumerate(rows):
            ids[r, :len(row)] = torch.tensor(row)
            model_wrote[r, :len(row)] = torch.tensor(list(written[r]), dtype=torch.bool)
        ids, model_wrote = ids.to(self.device), model_wrote.to(self.device)
        logits, value = self.net(ids)
        logits = _no_pad(logits[:, :-1])
        if legal is not None:
            logits = logits.masked_fill(~_legal_mask(texts, written, legal, logits.shape).to(logits.device), -torch.inf)
        logp = F.log_softmax(logits, -1).gather(2, ids[:, 1:, None]).squeeze(2)
        logp = logp.masked_fill(ids[:, 1:] == PAD, 0.0)  # the right padding: -inf, never read
        return logp, model_wrote[:, 1:], value


def _legal_mask(texts, written, legal, shape) -> torch.Tensor:
    """[B, T-1, V]: True where a character may follow position t (every character, except inside a model-written
    line, where only those that continue one of its legal lines)."""
    keep = torch.ones(shape, dtype=torch.bool)
    rows, positions, ids = [], [], []
    for b, (text, wrote, spans) in enumerate(zip(texts, written, legal)):
        for start, lines in spans:
            continuations = _continuations(tuple(lines))
            j = start
            while j < len(text) and wrote[j]:
                allowed = continuations.get(text[start:j])
                if allowed is not None:  # a line that left the legal ones (written without the mask): unmasked
                    rows += [b] * len(allowed)
                    positions += [j - 1] * len(allowed)
                    ids += allowed
                    keep[b, j - 1] = False
                j += 1
    keep[rows, positions, ids] = True
    return keep
