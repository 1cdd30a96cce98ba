"""Each distinct prompt run once and shared by its completions: the same log-probs and the same LoRA
gradients as one forward per row (TRL's layout), with and without gradient checkpointing, at T = 1 and 0.7.
Without gradient, scoring in memory-sized micro-batches gives what one forward gives."""

import pytest
import torch

from azlib.models import DEFAULT_MODEL
from azlib.models.hf import HFBackend
from azlib.models.shared_prompts import micro_batches
from azlib.models.student import LoraSettings, Student


def one_forward_per_row(student, prompts, completions, temperature):
    """The oracle: prompts left-padded, completions right-padded, one forward over [prompt | completion]."""
    pad = student.tokenizer.pad_token_id
    p_width, c_width = max(map(len, prompts)), max(map(len, completions))
    ids = torch.tensor([[pad] * (p_width - len(p)) + p + c + [pad] * (c_width - len(c)) for p, c in zip(prompts, completions)])
    mask = torch.tensor([[0] * (p_width - len(p)) + [1] * (len(p) + len(c)) + [0] * (c_width - len(c))
                         for p, c in zip(prompts, completions)])
    logits = student.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                           use_cache=False).logits[:, p_width - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[:, p_width:, None]).squeeze(-1), mask[:, p_width:].float()


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "checkpointing"])
def student(request):
    torch.manual_seed(0)
    student = Student(DEFAULT_MODEL, lora=LoraSettings(r=4, alpha=8, dropout=0.0),
                      gradient_checkpointing=request.param)
    with torch.no_grad():  # a trained-looking adapter: B = 0 would leave A without gradient
        for name, p in student.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return student


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompts_give_the_same_logprobs_and_gradients(student, temperature):
    encode = student.backend.encode_prompt
    prompts = [encode([{"role": "user", "content": q}]) for q in ["What is 2 + 3?", "Name a prime number above 10."]]
    completions = [encode(t) for t in ["2 + 3 = 5\n#### 5", " The answer is 5.", "5", "11", " 13 is prime.", "17"]]
    rows = [prompts[0]] * 3 + [prompts[1]] * 3
    weights = torch.linspace(-1, 1, len(rows))[:, None]
    params = student.trainable_parameters()
    student.model.train()
    try:
        fast, mask, _ = student.token_logprobs(rows, completions, temperature=temperature)
        fast_grads = torch.autograd.grad((fast * mask * weights).sum(), params)
        slow, slow_mask = one_forward_per_row(student, rows, completions, temperature)
        slow_grads = torch.autograd.grad((slow * slow_mask * weights).sum(), params)
    finally:
        student.model.eval()
    assert torch.equal(mask, slow_mask)
    # fp32 sums in other shapes: the oracle itself moves ~1e-5 between a padded batch and one row at a time
    assert (fast * mask - slow * mask).abs().max() < 1e-4
    scale = max(g.abs().max() for g in slow_grads)
    assert scale > 0 and all(torch.allclose(f, s, atol=1e-4 * scale) for f, s in zip(fast_grads, slow_grads))


def test_micro_batches_keep_a_prompts_completions_together_within_the_budget():
    prompts = [[1], [2], [1], [3], [2], [1], [3], [2], [3]]  # three prompts, interleaved
    completions = [[0] * n for n in (3, 1, 2, 3, 3, 1, 2, 2, 1)]
    three_rows = 3 * 3 * 10 * 4  # rows x longest completion x vocabulary x 4 bytes
    assert micro_batches(prompts, completions, 10, three_rows) == [[5, 2, 0], [1, 7, 4], [8, 6, 3]]
    # two rows of 3 tokens fit, three do not: a batch closes when its next row would pass the budget
    assert micro_batches(prompts, completions, 10, 2 * 3 * 10 * 4) == [[5, 2], [0, 1], [7, 4], [8, 6], [3]]
    assert micro_batches(prompts, completions, 10, 1) == [[i] for i in (5, 2, 0, 1, 7, 4, 8, 6, 3)], "a row alone"


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_scoring_in_micro_batches_equals_one_forward(student, monkeypatch, temperature):
    encode = student.backend.encode_prompt
    chats = [[{"role": "user", "content": q}] for q in ["What is 2 + 3?", "Name a prime number above 10."]] * 3
    completions = [encode(t) for t in ["2 + 3 = 5\n#### 5", " The answer is 5.", "5", "11", " 13 is prime.", "17"]]
    rows = [encode(c) for c in chats]
    two_rows = 2 * max(map(len, completions)) * student.model.config.vocab_size * 4
    # three micro-batches, one holding completions of both prompts
    assert micro_batches(rows, completions, student.model.config.vocab_size, two_rows) == [[2, 4], [0, 3], [5, 1]]
    whole, whole_mask, whole_entropy = (t.detach() for t in student.token_logprobs(  # one forward, with gradient
        rows, completions, temperature=temperature, entropy=True))
    with torch.no_grad():
        one_batch = student.token_logprobs(rows, completions, temperature=temperature, entropy=True)
        monkeypatch.setattr(student, "scoring_memory", two_rows)
        parts, mask, entropy = student.token_logprobs(rows, completions, temperature=temperature, entropy=True)
    assert torch.equal(one_batch[0], whole) and torch.equal(one_batch[2], whole_entropy), "the same computation"
    assert torch.equal(mask, whole_mask) and (parts[mask == 0] == 0).all() and (whole[whole_mask == 0] == 0).all()
    # other micro-batches pad to other widths: fp32 sums in other shapes move a value by ~1e-5 of itself
    assert ((parts - whole).abs() <= 1e-5 * whole.abs().clamp(min=1)).all()
    # entropy = logsumexp - E[logit]: a difference of two terms of the logits' size (~10), hence their noise
    assert (entropy - whole_entropy).abs().max() < 5e-5
    assert whole.min() < -1 and whole_entropy.max() > 1, "real log-probs and entropies, not zeros"

    scores = HFBackend.wrapping(student.model, student.tokenizer, scoring_memory=two_rows).score(chats, completions)
    unbatched = HFBackend.wrapping(student.model, student.tokenizer, scoring_memory=10**12).score(chats, completions)
    assert [len(s) for s in scores] == [len(c) for c in completions]
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for s, u in zip(scores, unbatched) for a, b in zip(s, u))
