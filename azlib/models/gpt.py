"""A small decoder-only GPT (nanoGPT style) and nanoGPT's learning-rate schedule. The network only: notebook 07's
losses and loop are in azlib.referee, notebook 08's policy and value heads in azlib.games.countdown.policy."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from azlib.settings import GPTSettings


class Block(nn.Module):
    def __init__(self, c: GPTSettings):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd), nn.LayerNorm(c.n_embd)
        # no qkv bias: the key bias has an exactly zero gradient (softmax ignores a shift shared by a row), and
        # Adam turns its rounding noise into full-size steps, so DDP and one process would drift apart
        self.qkv, self.proj = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False), nn.Linear(c.n_embd, c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd))
        self.n_head, self.dropout = c.n_head, c.dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                cache: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Causal self-attention and MLP. With `mask` ([B, 1, T, keys], True where a query may read a key) the
        caller's mask replaces the causal one; with `cache` the keys and values of earlier calls are read and this
        call's are kept, for decoding one position at a time: [] at first (filled with this call's keys and values),
        then [keys, values, length] with room after `length` (written in place; the caller makes the room)."""
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None and len(cache) == 3:  # [keys, values, length]: buffers with room, written in place
            keys, values, length = cache
            keys[:, :, length:length + T], values[:, :, length:length + T] = k, v
            k, v = keys[:, :, :length + T], values[:, :, :length + T]
            cache[2] = length + T
        elif cache is not None:  # the first call: its keys and values kept
            cache[:] = [k, v]
        # causal by default only where the queries are all the keys (SDPA aligns a causal mask with the first key)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and k.shape[2] == T,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """logits = GPT(idx): (B, T) token ids -> (B, T, vocab) next-token logits."""

    def __init__(self, config: GPTSettings):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # weight tying, as nanoGPT
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith(("proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

    def hidden(self, idx: torch.Tensor, positions: torch.Tensor | None = None, mask: torch.Tensor | None = None,
               caches: list[list[torch.Tensor]] | None = None) -> torch.Tensor:
        """The last layer's normed states [B, T, n_embd]. `positions` [B, T] (default 0..T-1), `mask` and one cache
        per block (see Block.forward) serve a batch of left-padded rows decoded a position at a time."""
        if positions is None:
            positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if caches is None else caches[i])
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(idx))

    @torch.no_grad()
    def sample(self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Append `new_tokens` sampled tokens to each row of idx (the context is cropped to block_size)."""
        for _ in range(new_tokens):
            logits = self(idx[:, -self.config.block_size:])[:, -1] / temperature
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def cosine_schedule(step: int, steps: int, warmup_steps: int, peak: float) -> float:
    """nanoGPT's learning rate at `step` of `steps`: a linear warmup over `warmup_steps`, then cosine decay to 10% of
    `peak`."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
