"""GRPO: advantages and every shared loss_type equal to TRL's GRPOTrainer (the real trainer, fed the
same log-probs), micro-batch accumulation, and real updates of the LoRA student on the embedded model."""

import tempfile

import pytest
import torch

from azlib.grpo import (GRPOSettings, PolicyUpdate, Rollout, aggregate, equal_reward_groups, group_advantages, grpo_loss,
                         token_losses)

B, T = 6, 7


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g) * 3).requires_grad_()
    old = logp.detach() + torch.randn(B, T, generator=g) * 0.3  # ratios well outside 1 +- 0.2: clipping is live
    ref = logp.detach() + torch.randn(B, T, generator=g) * 0.5
    advantages = torch.randn(B, generator=g)
    mask = torch.ones(B, T)
    for i, length in enumerate([7, 3, 5, 1, 6, 4]):  # ragged completions
        mask[i, length:] = 0
    return logp, old, ref, advantages, mask


def trl_loss(folder, loss_type, beta, logp, old, ref, advantages, mask, correction, epsilon_high=0.28):
    """TRL's own GRPOTrainer._compute_loss with its log-prob function returning our tensor."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), loss_type=loss_type, beta=beta, epsilon=0.2,
                      epsilon_high=epsilon_high, use_cpu=True, report_to=[], num_generations=2,
                      per_device_train_batch_size=B, max_completion_length=T, logging_steps=1,
                      use_bias_correction_kl=correction)
    trainer = GRPOTrainer(model=folder, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_list([{"prompt": "hi"}] * B),
                          processing_class=AutoTokenizer.from_pretrained(folder))
    entropies = torch.ones(B, T)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies, None)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = {"prompt_ids": torch.ones(B, 3, dtype=torch.long), "prompt_mask": torch.ones(B, 3, dtype=torch.long),
              "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": mask.sum()}
    return trainer._compute_loss(trainer.model, inputs)


@pytest.mark.parametrize("beta, correction", [(0.0, True), (0.1, True), (0.1, False)])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_loss_and_gradient_equal_trl(tiny_model_dir, loss_type, beta, correction):
    logp, old, ref, advantages, mask = batch()
    settings = GRPOSettings(loss_type=loss_type, beta=beta, epsilon_low=0.2, epsilon_high=0.28,
                            kl_ratio_correction=correction)
    ours = grpo_loss(logp, old, ref, advantages, mask, settings, max_completion_length=T)
    (ours_grad,) = torch.autograd.grad(ours, logp)
    theirs = trl_loss(tiny_model_dir, loss_type, beta, logp, old, ref, advantages, mask, correction)
    (theirs_grad,) = torch.autograd.grad(theirs, logp)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-5)
    assert torch.allclose(ours_grad, theirs_grad, atol=1e-5)
    ratio = torch.exp(logp - old)
    assert ((ratio < 0.8) | (ratio > 1.28)).float().mean() > 0.2, "the test must exercise the clip"


def test_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5, 0.5, 2.0, -1.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2])
    a = group_advantages(rewards, groups, "group")
    first = torch.tensor([1.0, 0.0, 0.0])
    assert torch.allclose(a[:3], (first - first.mean()) / (first.std() + 1e-4))  # Bessel std, as TRL
    assert torch.equal(a[3:5], torch.zeros(2)), "a group of equal rewards has zero advantage"
    assert a[5].item() == pytest.approx(1.5 / (torch.tensor([2.0, -1.0]).std().item() + 1e-4))
    batch_scaled = group_advantages(rewards, groups, "batch")
    assert batch_scaled[0].item() == pytest.approx((1 - 1 / 3) / (rewards.std().item() + 1e-4))
    assert group_advantages(rewards, groups, "none")[5].item() == pytest.approx(1.5)
    assert group_advantages(rewards * 100, groups, "none", clip=3.0).abs().max() == 3.0
    assert equal_reward_groups(rewards, groups).tolist() == [False] * 3 + [True] * 2 + [False] * 2


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "reward_weighted"])
def test_micro_batch_shares_add_up_to_the_batch_loss(loss_type):
    logp, old, ref, advantages, mask = batch(1)
    s = GRPOSettings(loss_type=loss_type)
    whole = grpo_loss(logp, old, ref, advantages, mask, s, max_completion_length=T)
    shares = sum(aggregate(token_losses(logp[i:i + 2], old[i:i + 2], ref[i:i + 2], advantages[i:i + 2], s).loss,
                           mask[i:i + 2], s, batch_sequences=B, batch_tokens=mask.sum().item(), max_completion_length=T)
                 for i in range(0, B, 2))
    assert shares.item() == pytest.approx(whole.item(), abs=1e-6)


def test_reward_weighted_is_the_reward_weighted_log_likelihood():
    logp, old, ref, advantages, mask = batch(2)
    loss = grpo_loss(logp, old, ref, advantages, mask, GRPOSettings(loss_type="reward_weighted", beta=0.0), max_completion_length=T)
    expected = -(advantages * (logp * mask).sum(-1) / mask.sum(-1)).mean()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="loss_type"):
        GRPOSettings(loss_type="ppo")
    with pytest.raises(ValueError, match="scale_rewards"):
        GRPOSettings(scale_rewards="global")


# --- the LoRA student on the embedded model ---------------------------------------------------------


@pytest.fixture(scope="module")
def student():
    from azlib.models.student import Student

    return Student("embedded:smollm2-135m-instruct", reference="snapshot")


CHAT = [{"role": "user", "content": "What is 2 + 3?"}]


def test_student_logprobs_match_generation(student):
    (sample,), = student.backend.generate([CHAT], max_new_tokens=10)
    logp, mask, entropy = student.token_logprobs([student.backend.encode_prompt(CHAT)], [sample.token_ids],
                                                 entropy=True)
    assert torch.allclose(logp[0], torch.tensor(sample.logprobs), atol=1e-4)
    assert mask.sum() == len(sample.token_ids) and (entropy >= 0).all()
    # At temperature T the loss reads log softmax(logits / T), the distribution sampled from, as TRL does.
    ids = student.backend.encode_prompt(CHAT) + list(sample.token_ids)
    with torch.no_grad():
        logits = student.model(input_ids=torch.tensor([ids])).logits[0, -len(sample.token_ids) - 1 : -1].float()
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(sample.token_ids)[:, None]).squeeze(-1)
    hot = student.token_logprobs([student.backend.encode_prompt(CHAT)], [sample.token_ids], temperature=0.7)[0]
    assert torch.allclose(hot[0], expected, atol=1e-4) and not torch.allclose(hot[0], logp[0], atol=1e-2)


def test_grpo_steps_move_probability_toward_the_rewarded_answer(student):
    prompt = student.backend.encode_prompt(CHAT)
    good, bad = (student.backend.encode_continuation(t) for t in ("2 + 3 = 5\n#### 5", "2 + 3 = 6\n#### 6"))
    measure = lambda **kw: student.token_logprobs([prompt, prompt], [good, bad], **kw)[0].sum(-1).detach()
    before = measure()
    trainer = PolicyUpdate(student, GRPOSettings(learning_rate=2e-4, beta=0.04))
    for _ in range(3):
        stats = trainer.step([Rollout(None, prompt, good, 1.0, 0), Rollout(None, prompt, bad, 0.0, 0)])
    after = measure()
    assert after[0] - after[1] > before[0] - before[1] + 1.0, "the margin of the rewarded answer grows"
    assert stats["kl"] > 0 and stats["grad_norm"] > 0 and stats["sequences"] == 2
    reference = measure(reference=True)
    assert torch.allclose(reference, before, atol=1e-4), "the snapshot reference has not moved yet"
    student.refresh_reference()
    assert torch.allclose(measure(reference=True), after, atol=1e-4)


def test_all_equal_groups_can_be_dropped(student):
    prompt = student.backend.encode_prompt(CHAT)
    answer = student.backend.encode_continuation("5")
    same = [Rollout(None, prompt, answer, 1.0, 0)] * 2
    stats = PolicyUpdate(student, GRPOSettings(drop_equal_groups=True)).step(same)
    assert stats["sequences"] == 0 and stats["dropped_sequences"] == 2 and stats["loss"] == 0.0


class _MetaScalars(torch.utils._python_dispatch.TorchDispatchMode):
    """.item() of a meta tensor reads 1.0 (meta tensors have shapes, no values), so a step can run to its end."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].is_meta:
            return 1.0
        return func(*args, **(kwargs or {}))


class _MetaStudent:
    """A unit-test double: a student whose model lives on another device than the CPU (`meta`), so a
    tensor GRPO builds on the CPU and mixes with its log-probs raises. The real student is tested above."""

    device = "meta"

    def __init__(self):
        self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))
        self.model = torch.nn.Module()

    def trainable_parameters(self):
        return [self.weight]

    def token_logprobs(self, prompts, completions, *, reference=False, entropy=False, temperature=1.0):
        shape = (len(completions), max(len(c) for c in completions))
        logp = torch.zeros(shape, device="meta") + (self.weight.detach() if reference else self.weight)
        mask = torch.tensor([[1.0] * len(c) + [0.0] * (shape[1] - len(c)) for c in completions], device="meta")
        return logp, mask, torch.zeros(shape, device="meta") if entropy else None

    def sync_generation(self):
        pass


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "reward_weighted"])
def test_every_tensor_of_a_step_lives_on_the_students_device(loss_type):
    examples = [Rollout(None, [1, 2], [3] * (1 + i % 3), float(i % 2), i // 2) for i in range(6)]
    settings = GRPOSettings(loss_type=loss_type, beta=0.1, num_iterations=2, micro_batch_size=4)
    with _MetaScalars():
        stats = PolicyUpdate(_MetaStudent(), settings).step(examples)  # raises "... on the same device" if one is not
        sft = PolicyUpdate(_MetaStudent(), settings).sft_step(examples)
    assert stats["sequences"] == 6 and sft["sequences"] == 6


def test_per_token_advantages_come_with_every_rollout_or_none():
    from types import SimpleNamespace

    student = SimpleNamespace(trainable_parameters=lambda: [torch.nn.Parameter(torch.zeros(1))], device="cpu", model=None)
    with_advantages = Rollout(None, [1], [2, 3], 1.0, 0, advantages=[0.5, 0.5])
    plain = Rollout(None, [1], [2], 0.0, 0)
    for bad in ([with_advantages, plain], [Rollout(None, [1], [2, 3], 1.0, 0, advantages=[0.5])]):
        with pytest.raises(ValueError, match="one per completion token"):
            PolicyUpdate(student).step(bad)  # never a silent fall back to group advantages
