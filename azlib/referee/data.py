"""A character-level corpus for notebook 07: GSM8K train problems and solutions as plain text
(azlib.data.load_gsm8k), or the embedded arithmetic problems when GSM8K is unavailable. Not a tokenizer library."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from azlib.data import task_problems

HELD_OUT_SHARE = 0.1  # the last tenth of the corpus's rows: the validation text


def _row_text(row) -> str:
    return f"Q: {row['prompt']}\nA: {row['info']['solution']}\n\n"


@dataclass
class CharCorpus:
    """Text split by rows into train and held-out validation, encoded one id per character."""

    source: str  # "gsm8k" or "arithmetic": say which in every output
    chars: list[str]
    train: torch.Tensor  # (N,) int64 ids
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        return _encoded(self.chars, text)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)

    def batch(self, step: int, batch_size: int, block_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The global batch of `step`: a function of (seed, step) only, so every process, every arm and a
        resumed run draw the same windows. x (B, T) inputs, y (B, T) next characters."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(len(self.train) - block_size - 1, (batch_size,), generator=g)
        return _windows(self.train, starts, block_size)

    def val_batches(self, num_batches: int, batch_size: int, block_size: int, seed: int):
        """Fixed held-out windows, the same for every model and every evaluation."""
        g = torch.Generator().manual_seed(seed + 7)
        for _ in range(num_batches):
            starts = torch.randint(len(self.val) - block_size - 1, (batch_size,), generator=g)
            yield _windows(self.val, starts, block_size)


def _windows(data: torch.Tensor, starts: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.stack([data[s:s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + block_size] for s in starts.tolist()])
    return x, y


def load_corpus(source: str = "auto", max_chars: int | None = None, max_rows: int = 20_000, *,
                fallback: bool) -> tuple[CharCorpus, str]:
    """GSM8K's train split as text (the last tenth of its rows held out; its 7,473 rows are under `max_rows`), from
    `source` ("auto": the kit's copy, a folder, or "hub": a download); with `fallback`, arithmetic problems' text
    when GSM8K cannot be read (azlib.data.task_problems). Returns the corpus and a note ("" when GSM8K)."""
    rows, note = task_problems("gsm8k", source, "train", max_rows, seed=0, fallback=fallback)
    name = "arithmetic" if note else "gsm8k"
    cut = int(len(rows) * (1 - HELD_OUT_SHARE))
    train_text = "".join(_row_text(r) for r in rows[:cut])
    val_text = "".join(_row_text(r) for r in rows[cut:])
    if max_chars is not None:
        train_text, val_text = train_text[:max_chars], val_text[:max(max_chars // 10, 4096)]
    chars = sorted(set(train_text) | set(val_text))
    return CharCorpus(name, chars, _encoded(chars, train_text), _encoded(chars, val_text)), note


def _encoded(chars: list[str], text: str) -> torch.Tensor:
    """`text` as ids, one per character: its index in `chars`."""
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long)
