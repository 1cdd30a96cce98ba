"""azlib's decode loop: the same greedy tokens as transformers' generate, log-probs equal to
score(), and its speed-ups (shared prefix, dropped rows, grouped attention) change nothing."""

import pytest
import torch
from transformers import TopPLogitsWarper

from azlib.models import decoding
from azlib.models.decoding import decode, top_p_filter
from azlib.models.hf_internals import grouped_attention, sdpa_attention_forward

CHATS = [[{"role": "user", "content": q}] for q in
         ["What is 12 + 7?", "Say hi.", "Tom has 3 apples and buys 5 more. How many apples does he have?",
          "Name three colours.", "What is the capital of France?"]]
SHOTS = "Question: What is 1 + 1?\nAnswer: 1 + 1 = 2\n#### 2\n\n" * 4
FEWSHOT = [f"{SHOTS}Question: What is {a} + {b}?\nAnswer:" for a, b in [(2, 3), (10, 7), (4, 40)]]




def _decode(hf, prompts, **kwargs):
    rows = [hf.encode_prompt(p) for p in prompts]
    return decode(hf.model, rows, eos_ids=hf.eos_ids, pad_id=hf.tokenizer.pad_token_id, **kwargs)


def test_greedy_tokens_equal_transformers_generate_and_logprobs_equal_score(hf):
    decoded = _decode(hf, CHATS, max_new_tokens=32)
    rows = [hf.encode_prompt(c) for c in CHATS]
    width, pad = max(map(len, rows)), hf.tokenizer.pad_token_id
    inputs = {"input_ids": torch.tensor([[pad] * (width - len(r)) + r for r in rows]),
              "attention_mask": torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])}
    reference = hf.model.generate(**inputs, max_new_tokens=32, do_sample=False, top_k=None, top_p=None,
                                  temperature=None, eos_token_id=sorted(hf.eos_ids),
                                  pad_token_id=hf.tokenizer.pad_token_id)[:, inputs["input_ids"].shape[1]:]
    for d, ref in zip(decoded, reference.tolist()):
        end = next((i + 1 for i, t in enumerate(ref) if t in hf.eos_ids), len(ref))
        assert d.tokens == ref[:end]
        assert d.finished == (end < len(ref) or ref[end - 1] in hf.eos_ids)
    assert len({len(d.tokens) for d in decoded}) > 1, "rows end at different steps (some are dropped early)"
    scores = hf.score(CHATS, [d.tokens for d in decoded])
    for d, s in zip(decoded, scores):
        assert max(abs(a - b) for a, b in zip(d.logprobs, s)) < 1e-4


def test_shared_prefix_prefill_groups_and_dropping_rows_change_nothing(hf, monkeypatch):
    rows = [hf.encode_prompt(p) for p in FEWSHOT]
    assert decoding.shared_prefix_length(rows) > 40
    prompts = [FEWSHOT, CHATS + FEWSHOT]  # with a shared prefix; without one, rows of mixed lengths
    fast = [_decode(hf, p, max_new_tokens=20) for p in prompts]
    monkeypatch.setattr(decoding, "MIN_SHARED_PREFIX", 10**9)
    monkeypatch.setattr(decoding, "COMPACT_AT", 2.0)  # never drop a row
    for prefill_tokens in (1, 10**9):  # every prompt prefilled alone; all in one padded forward
        monkeypatch.setattr(decoding, "PREFILL_TOKENS", prefill_tokens)
        plain = [_decode(hf, p, max_new_tokens=20) for p in prompts]
        for a, b in zip(sum(fast, []), sum(plain, [])):
            assert a.tokens == b.tokens
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_sampled_logprobs_are_raw_and_the_generator_makes_them_repeatable(hf):
    def sample(seed):
        return _decode(hf, CHATS[:2] * 2, max_new_tokens=16, temperature=0.8, top_p=0.9,
                       generator=torch.Generator().manual_seed(seed))

    first, again, other = sample(5), sample(5), sample(6)
    assert [d.tokens for d in first] == [d.tokens for d in again] != [d.tokens for d in other]
    scores = hf.score(CHATS[:2] * 2, [d.tokens for d in first])  # score is at temperature 1, no top-p
    for d, s in zip(first, scores):
        assert max(abs(a - b) for a, b in zip(d.logprobs, s)) < 1e-4


def test_grouped_attention_equals_sdpa_with_repeated_heads():
    class Attention(torch.nn.Module):
        num_key_value_groups, is_causal, training = 3, True, False

    torch.manual_seed(0)
    query, key, value = torch.randn(4, 9, 1, 8), torch.randn(4, 3, 12, 8), torch.randn(4, 3, 12, 8)
    mask = torch.rand(4, 1, 1, 12) > 0.3
    mask[..., -1] = True
    grouped, _ = grouped_attention(Attention(), query, key, value, mask, scaling=0.35)
    reference, _ = sdpa_attention_forward(Attention(), query, key, value, mask, scaling=0.35)
    assert grouped.shape == reference.shape == (4, 1, 9, 8)
    assert torch.allclose(grouped, reference, atol=1e-6)


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_top_p_filter_equals_transformers_warper(top_p):
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1)) * 3
    ours = top_p_filter(logits, top_p)
    theirs = TopPLogitsWarper(top_p)(None, logits.clone())
    assert torch.equal(ours.isinf(), theirs.isinf()) and (~ours.isinf()).sum(-1).min() >= 1
