"""The student's update: GRPO as in the papers and in TRL (group-normalised advantages, the clipped-ratio token loss
with a k3 KL to the reference, four aggregations), or imitation of verified answers. Formulas at each function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import torch

from azlib.sampled_answer import Answer
from azlib.optional_packages import require
from azlib.parallel import shard, sum_gradients, sum_over_ranks
from azlib.settings import AnswerSampling, GRPOSettings

def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, scale: str = "group", eps: float = 1e-4,
                     clip: float | None = None) -> torch.Tensor:
    """Reward minus its group's mean, divided by the group's (or the batch's) Bessel std + eps, as TRL:
    A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)."""
    advantages = torch.empty_like(rewards)
    stds = torch.ones_like(rewards)
    for g in groups.unique():
        members = groups == g
        r = rewards[members]
        advantages[members] = r - r.mean()
        stds[members] = r.std() if len(r) > 1 else 0.0
    if scale == "batch":
        stds = torch.full_like(rewards, rewards.std().item() if len(rewards) > 1 else 0.0)
    if scale != "none":
        advantages = advantages / (stds + eps)
    return advantages.clamp(-clip, clip) if clip is not None else advantages


def equal_reward_groups(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Mask of sequences whose group's rewards are all equal (zero advantage: no learning signal)."""
    out = torch.zeros_like(rewards, dtype=torch.bool)
    for g in groups.unique():
        members = groups == g
        out[members] = bool((rewards[members] == rewards[members][0]).all())
    return out


class LossParts(NamedTuple):
    loss: torch.Tensor  # this batch's share of the step loss
    kl: torch.Tensor  # per token
    ratio: torch.Tensor  # per token


def token_losses(logp, old_logp, ref_logp, advantages, settings: GRPOSettings) -> LossParts:
    """Per-token loss [B, T] before aggregation; advantages [B] (one per sequence) or [B, T] (per token):
        loss_t = -min(ratio_t A, clip(ratio_t, 1 - eps_low, 1 + eps_high) A) + beta ratio_t k3_t
        ratio_t = exp(logp_t - logp_old_t),  k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1
    The ratio on the KL term makes its gradient the unbiased reverse-KL one (DeepSeek-V3.2; TRL 1.16's default);
    kl_ratio_correction=False gives the DeepSeekMath form. reward_weighted, the original system's: -A logp_t (no
    ratio, no clip) plus the same KL term. Log-probs are the sampling distribution's, logits / temperature (as TRL)."""
    a = advantages if advantages.dim() == 2 else advantages.unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    if settings.loss_type == "reward_weighted":
        per_token = -a * logp
    else:
        clipped = torch.clamp(ratio, 1 - settings.epsilon_low, 1 + settings.epsilon_high)
        per_token = -torch.min(ratio * a, clipped * a)
    kl = torch.zeros_like(logp)
    if settings.beta:  # ref_logp may be None when beta is 0
        kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        per_token = per_token + settings.beta * (kl * ratio if settings.kl_ratio_correction else kl)
    return LossParts(per_token, kl, ratio)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, settings: GRPOSettings, *, batch_sequences: int,
              batch_tokens: float, max_completion_length: int) -> torch.Tensor:
    """This micro-batch's share of the loss of the whole batch (batch_sequences, batch_tokens over
    all micro-batches), so that the shares add up to the full-batch loss. grpo and reward_weighted: mean over a
    sequence's tokens, then over sequences; bnpo, dapo: sum / active tokens; dr_grpo: sum / (sequences x
    max_completion_length)."""
    masked = per_token * mask
    if settings.loss_type in ("grpo", "reward_weighted"):
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / batch_sequences
    if settings.loss_type in ("bnpo", "dapo"):
        return masked.sum() / max(batch_tokens, 1.0)
    return masked.sum() / (batch_sequences * max_completion_length)  # dr_grpo


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, settings: GRPOSettings, *,
              max_completion_length: int) -> torch.Tensor:
    """The loss of one whole batch (what TRL's GRPOTrainer computes with gradient_accumulation 1)."""
    parts = token_losses(logp, old_logp, ref_logp, advantages, settings)
    return aggregate(parts.loss, mask, settings, batch_sequences=logp.shape[0], batch_tokens=mask.sum().item(),
                     max_completion_length=max_completion_length)


@dataclass(frozen=True)
class Rollout:
    """One sequence the update reads: prompt ids, completion ids (as sampled; an EOS id after a finished answer), its
    reward and the key of its group. `answer` is the whole answer it trains (azlib.sampled_answer.Answer, the explorer's own
    object: its text, correctness, writer and reward's parts are read there), or None for a sibling step of a search
    tree, which is not a whole answer and is trained on its ids, reward and group alone. `added`: the value of each
    reward function added to the answer's reward, by name (azlib.games.text.signals.with_rewards); `reward` is then
    the sum. `advantages`, one per completion token, when the signal already has them (a tree's; then no group
    normalisation)."""

    answer: Answer | None
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    reward: float
    group: int
    advantages: Sequence[float] = field(default=(), kw_only=True)
    added: dict[str, float] = field(default_factory=dict, kw_only=True)

    @property
    def correct(self) -> bool:
        """A whole answer finished with the right answer; a sibling step never is."""
        return self.answer is not None and self.answer.correct


def make_optimizer(params, settings: GRPOSettings) -> torch.optim.Optimizer:
    if settings.optimizer == "adamw_8bit":
        bnb = require("bitsandbytes", "optimizer adamw_8bit", otherwise="or optimizer 'adamw'")
        return bnb.optim.AdamW8bit(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    return torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)


class PolicyUpdate:
    """A policy's (the student's, or an RLT teacher's) update, by GRPO or by imitation, on its trainable weights.
    step(rollouts) -> stats: GRPO's advantages, reference and old log-probs, num_iterations policy
    updates over micro-batches (accumulated), grad-norm clip, one optimiser step per update.
    sft_step(rollouts) -> stats: one optimiser step of imitation (expert iteration).
    Under torchrun every rank is given the whole step's rollouts, trains on its share (azlib.parallel.shard)
    with the whole step's normalisers, and the gradients are summed over the ranks before the clip: the
    one-process update, its work split."""

    def __init__(self, student, settings: GRPOSettings = GRPOSettings(), sampling: AnswerSampling = AnswerSampling()):
        self.student, self.settings, self.sampling = student, settings, sampling
        self.optimizer = make_optimizer(student.trainable_parameters(), settings)
        self.updates = 0  # optimiser steps taken: the warmup position (restored from checkpoints)

    def _logprobs(self, rollouts, idx, **kwargs):
        return self.student.token_logprobs([rollouts[i].prompt_ids for i in idx], [rollouts[i].completion_ids for i in idx],
                                           temperature=self.sampling.temperature, **kwargs)

    def _optimizer_step(self) -> float:
        s = self.settings
        sum_gradients(self.student.trainable_parameters())  # under torchrun: every rank's share of the step
        grad_norm = torch.nn.utils.clip_grad_norm_(self.student.trainable_parameters(), s.max_grad_norm)
        for group in self.optimizer.param_groups:
            group["lr"] = s.learning_rate * min(1.0, (self.updates + 1) / max(s.warmup_steps, 1))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        self.student.sync_generation()  # a vLLM generator loads the new adapter
        return float(grad_norm)

    def sft_step(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """Imitate the rollouts' completions: their mean token negative log-likelihood (micro-batches
        accumulated), one optimiser step."""
        s, model = self.settings, self.student.model
        if not rollouts:
            return {"sequences": 0, "loss": 0.0, "grad_norm": 0.0, "completion_tokens": 0}
        mine = shard(range(len(rollouts)))
        batches = [mine[i : i + s.micro_batch_size] for i in range(0, len(mine), s.micro_batch_size)]
        tokens = sum(len(r.completion_ids) for r in rollouts)
        total = 0.0
        model.train()
        try:
            for idx in batches:
                logp, mask, _ = self._logprobs(rollouts, idx)
                loss = -(logp * mask).sum() / tokens
                loss.backward()
                total += loss.item()
            grad_norm = self._optimizer_step()
        finally:
            model.eval()
        (total,) = sum_over_ranks([total])
        return {"sequences": len(rollouts), "loss": total, "grad_norm": grad_norm, "completion_tokens": tokens}

    def step(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        s, model = self.settings, self.student.model
        rewards = torch.tensor([r.reward for r in rollouts], dtype=torch.float32)
        groups = torch.tensor([r.group for r in rollouts])
        given = [len(r.advantages) for r in rollouts]
        if any(given) and given != [len(r.completion_ids) for r in rollouts]:
            raise ValueError("per-token advantages must come with every rollout, one per completion token")
        if rollouts and all(given):  # the signal's own, per token (a tree's): used as they are
            per_token = [torch.tensor(r.advantages, dtype=torch.float32) for r in rollouts]
            if s.clip_advantages is not None:
                per_token = [a.clamp(-s.clip_advantages, s.clip_advantages) for a in per_token]
            advantages = torch.stack([a.mean() for a in per_token])  # for the diagnostics
        else:
            per_token = None
            advantages = group_advantages(rewards, groups, s.scale_rewards, clip=s.clip_advantages)
        equal = equal_reward_groups(rewards, groups)
        device = torch.device(self.student.device)  # rewards are built here; log-probs live with the model
        keep = list(range(len(rollouts)))
        if s.drop_equal_groups:
            keep = [i for i in keep if not equal[i]]
        stats = {"reward_mean": rewards.mean().item(), "reward_std": rewards.std().item() if len(rewards) > 1 else 0.0,
                 "zero_std_groups": len(groups[equal].unique()) / max(len(groups.unique()), 1),
                 "sequences": len(keep), "dropped_sequences": len(rollouts) - len(keep)}
        if not keep:
            return stats | {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0, "clip_low": 0.0,
                            "clip_high": 0.0, "grad_norm": 0.0}
        mine = shard(keep)
        batches = [mine[i : i + s.micro_batch_size] for i in range(0, len(mine), s.micro_batch_size)]
        fixed = []  # per micro-batch: old log-probs (policy before the update), reference log-probs
        with torch.no_grad():
            for idx in batches:
                # one update per batch: the old policy IS the current one (ratio 1, as TRL does), no forward
                old = self._logprobs(rollouts, idx)[0] if s.num_iterations > 1 else None
                ref = self._logprobs(rollouts, idx, reference=True)[0] if s.beta else None
                fixed.append((old, ref))
        batch_tokens = float(sum(len(rollouts[i].completion_ids) for i in keep))  # every rank's, not only this one's
        model.train()
        try:
            for _ in range(s.num_iterations):
                totals = {"loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_low": 0.0, "clip_high": 0.0}
                for idx, (old, ref) in zip(batches, fixed):
                    logp, mask, entropy = self._logprobs(rollouts, idx, entropy=True)
                    a = (advantages[idx] if per_token is None else
                         torch.nn.utils.rnn.pad_sequence([per_token[i] for i in idx], batch_first=True)).to(device)
                    parts = token_losses(logp, logp.detach() if old is None else old, ref, a, s)
                    loss = aggregate(parts.loss, mask, s, batch_sequences=len(keep), batch_tokens=batch_tokens,
                                     max_completion_length=self.sampling.max_new_tokens)
                    loss.backward()
                    a = a if a.dim() == 2 else a.unsqueeze(1)
                    totals["loss"] += loss.item()
                    totals["kl"] += (parts.kl * mask).sum().item()
                    totals["entropy"] += (entropy.detach() * mask).sum().item()
                    totals["clip_low"] += (((parts.ratio < 1 - s.epsilon_low) & (a < 0)).float() * mask).sum().item()
                    totals["clip_high"] += (((parts.ratio > 1 + s.epsilon_high) & (a > 0)).float() * mask).sum().item()
                grad_norm = self._optimizer_step()
        finally:
            model.eval()
        totals = dict(zip(totals, sum_over_ranks(list(totals.values()))))
        return stats | {"loss": totals["loss"], "kl": totals["kl"] / batch_tokens,
                        "entropy": totals["entropy"] / batch_tokens,
                        "clip_fraction": (totals["clip_low"] + totals["clip_high"]) / batch_tokens,
                        "clip_low": totals["clip_low"] / batch_tokens, "clip_high": totals["clip_high"] / batch_tokens,
                        "grad_norm": grad_norm, "completion_tokens": int(batch_tokens),
                        "advantage_abs_mean": advantages[keep].abs().mean().item()}
