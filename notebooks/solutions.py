"""Worked solutions to the exercises of notebooks 01-07, written from the formulas (not by calling azlib).
Open this file after you have tried: the graders in azlib/exercises.py check your own function, not these.

    from solutions import group_advantages          # from notebooks/, or
    exercises.check_group_advantages(group_advantages)
"""

from __future__ import annotations

import math

import torch


# 01 · A_i = (r_i - mean(r)) / (std(r) + 1e-4), std with Bessel's n - 1 (torch.std's default, not np.std's).
def group_advantages(rewards):
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + 1e-4) for r in rewards]


# 02 · AlphaZero's PUCT: Q + c P sqrt(N_parent) / (1 + N_child).
def puct_score(q, prior, parent_visits, child_visits, c):
    return q + c * prior * math.sqrt(parent_visits) / (1 + child_visits)


# 02 · Negamax backup: the leaf's node was entered by the player NOT to move at the leaf, so it gets -v; every
# step up hands the value to the other player.
def negamax_backup(leaf_value, depth):
    return [leaf_value if (depth - i) % 2 else -leaf_value for i in range(depth + 1)]


# 03 · EMA of each credited teacher's mean value, then (1 - floor) softmax(score / T) + floor / K, with a
# never-credited teacher standing in at the mean of the known scores (0 if none is known).
def teacher_weights(scores, values, ema_rate, temperature, floor):
    scores = dict(scores)
    for name, got in values.items():
        if got:
            mean = sum(got) / len(got)
            scores[name] = mean if scores[name] is None else (1 - ema_rate) * scores[name] + ema_rate * mean
    known = [s for s in scores.values() if s is not None]
    fill = sum(known) / len(known) if known else 0.0
    filled = {n: fill if s is None else s for n, s in scores.items()}
    top = max(filled.values())
    exp = {n: math.exp((s - top) / temperature) for n, s in filled.items()}
    total = sum(exp.values())
    return {n: (1 - floor) * e / total + floor / len(exp) for n, e in exp.items()}


# 04 · k3 = e^x - x - 1 with x = log pi_ref - log pi (Schulman's "Approximating KL divergence"): >= 0, unbiased.
def k3(logp, ref_logp):
    x = ref_logp - logp
    return torch.exp(x) - x - 1


# 04 · d(ratio k3)/d logp = ratio k3 + ratio (1 - e^x) = ratio (logp - ref_logp): on-policy (ratio 1) it is the
# score-function gradient of KL(pi || pi_ref), which k3 alone (gradient 1 - e^x) is not.
def kl_gradient(logp, old_logp, ref_logp):
    return torch.exp(logp - old_logp) * (logp - ref_logp)


# 05 · Wilson (1927): the p whose z-standard-error band, computed at p itself, holds the observed share.
def wilson(correct, n, z=1.96):
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


# 05 · Exact McNemar: the discordant pairs are Binomial(b + c, 1/2); double the smaller tail, cap at 1.
def mcnemar(only_a, only_b):
    n, k = only_a + only_b, min(only_a, only_b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


# 06 · RLT (Cetin et al. 2025, sec. 3.2).
def r_ss(solution_logp, alpha):
    return sum(solution_logp) / len(solution_logp) + alpha * min(solution_logp)


def r_kl(teacher_logp, student_logp, alpha):
    kl = [t - s for t, s in zip(teacher_logp, student_logp)]
    return sum(kl) / len(kl) + alpha * max(kl)


# 07 · avataRL's candidate rewards: q = reality^alpha referee^beta renormalised over the candidates; pay
# scale * q to the candidates above the even share 1/|A|, then scale down so the largest is at most the clamp.
def candidate_rewards(ids, target, referee_logits, cfg):
    size = len(ids)
    reality = [1 - cfg.smoothing if a == target else cfg.smoothing / max(size - 1, 1) for a in ids]
    log_ideal = [cfg.reality_weight * math.log(r) for r in reality]
    if cfg.referee_weight > 0:
        log_z = math.log(sum(math.exp(x) for x in referee_logits))
        log_ideal = [li + cfg.referee_weight * (referee_logits[a] - log_z) for li, a in zip(log_ideal, ids)]
    top = max(log_ideal)
    weights = [math.exp(x - top) for x in log_ideal]
    q = [w / sum(weights) for w in weights]
    raw = [cfg.reward_scale * x if (x > 1 / size or size == 1) else 0.0 for x in q]
    shrink = min(1.0, cfg.reward_clamp / max(max(raw), 1e-12))
    return [r * shrink for r in raw]
