"""The referee RL loss (avataRL's candidate-set policy gradient) and the cross-entropy loss it is compared with.
Pure functions of logits and targets; no model, optimiser or data here."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from azlib.settings import RefereeRLSettings


def ce_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the next token, mean over positions (nats): -mean log p(y)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def candidates(student_logits: torch.Tensor, referee_logits: torch.Tensor | None, targets: torch.Tensor,
               top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The action set A at each position: student top-k + referee top-k + ground truth.
    Returns ids (N, 2k+1) (or (N, k+1) without a referee) and a mask of each id's first occurrence."""
    N = targets.numel()
    parts = [student_logits.reshape(N, -1).topk(top_k, dim=-1).indices]
    if referee_logits is not None:
        parts.append(referee_logits.reshape(N, -1).topk(top_k, dim=-1).indices)
    ids = torch.cat([*parts, targets.reshape(N, 1)], dim=1)
    sorted_ids, order = ids.sort(dim=1)
    first = torch.ones_like(ids, dtype=torch.bool)
    first[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    return ids, first.gather(1, order.argsort(dim=1))


def referee_rewards(ids: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
                    referee_logits: torch.Tensor | None, cfg: RefereeRLSettings) -> torch.Tensor:
    """r_a for each candidate a in A (0 for repeated ids):

        reality_a = 1 - eps if a = y else eps / (|A| - 1)
        q_a = reality_a^alpha * referee_a^beta / sum_{b in A} (same)      (referee_a = softmax(referee logits)_a)
        r_a = min(1, clamp / max_b r'_b) * r'_a,   r'_a = scale * q_a * [q_a > 1/|A|]

    Only candidates above the mean share are rewarded (avataRL compares with an unnormalised mean; we use 1/|A|,
    the mean of q). With beta = 0 only the ground truth is above the mean, so r = clamp on y and 0 elsewhere."""
    N = ids.shape[0]
    size = mask.sum(dim=1, keepdim=True).float()  # |A|
    is_gt = ids == targets.reshape(N, 1)
    reality = torch.where(is_gt, 1.0 - cfg.smoothing, cfg.smoothing / (size - 1).clamp_min(1.0))
    log_ideal = cfg.reality_weight * reality.log()
    if cfg.referee_weight > 0:
        referee = F.log_softmax(referee_logits.reshape(N, -1).float(), dim=-1).gather(1, ids)
        log_ideal = log_ideal + cfg.referee_weight * referee
    q = torch.softmax(log_ideal.masked_fill(~mask, -math.inf), dim=1)
    rewarded = mask & ((q > 1.0 / size) | (size == 1))
    raw = cfg.reward_scale * q * rewarded
    scale = (cfg.reward_clamp / raw.max(dim=1, keepdim=True).values.clamp_min(1e-12)).clamp(max=1.0)
    return (raw * scale).detach()


def referee_rl_loss(student_logits: torch.Tensor, referee_logits: torch.Tensor | None, targets: torch.Tensor,
                    cfg: RefereeRLSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy gradient over the candidates, per position, then the mean over positions:

        loss = -mean_positions (1/|A|) sum_{a in A} A_a log p_student(a)

    A_a = r_a (avataRL: a reward-weighted likelihood, minimised at p proportional to r on A), or with
    advantage="group" A_a = r_a - mean_{b in A} r_b (group-relative; then sum_a A_a log p_a = sum_a A_a z_a,
    linear in the logits z: the gradient never shrinks as p improves). Returns the loss and diagnostics."""
    V = student_logits.shape[-1]
    logits = student_logits.reshape(-1, V)
    use_referee = cfg.referee_weight > 0 and referee_logits is not None
    ref = referee_logits.reshape(-1, V).detach() if use_referee else None
    ids, mask = candidates(logits.detach(), ref, targets, cfg.top_k)
    rewards = referee_rewards(ids, mask, targets, ref, cfg)
    size = mask.sum(dim=1).float()
    if cfg.advantage == "group":
        adv = (rewards - (rewards.sum(1) / size).unsqueeze(1)) * mask
    else:
        adv = rewards
    logp = F.log_softmax(logits, dim=-1).gather(1, ids)
    pg_loss = -((adv * logp * mask).sum(dim=1) / size).mean()
    with torch.no_grad():
        gt = ids == targets.reshape(-1, 1)
        total = rewards.sum(1)
        diagnostics = {
            "action_set_size": size.mean().item(),
            "gt_reward_share": ((rewards * gt).sum() / total.sum().clamp_min(1e-12)).item(),
            "only_gt_rewarded": (((rewards > 0) & ~gt).sum(1) == 0).float().mean().item(),
            "mean_reward": (total / size).mean().item(),
        }
    return pg_loss, diagnostics
