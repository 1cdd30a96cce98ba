"""Worked solutions to the exercises of notebooks 01-08, written from the formulas (not by calling azlib), and
the answers to their concept checks (CONCEPT_ANSWERS, at the end, each with its reasons). Open this file after
you have tried: the graders in azlib/lab/exercises.py check your own function or letter, not these.

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


# 01 · The chain: reward 1 only when every token is right, one group advantage per answer, the same on each token.
def sequence_advantages(answers, correct):
    advantages = group_advantages([float(list(a) == list(correct)) for a in answers])
    return [[adv] * len(correct) for adv in advantages]


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


# 08 · Countdown's oracle: with one number left, solved if it is the target; otherwise try every ordered pair, every
# operator whose result is a whole number >= 0 (a - b needs a >= b, a / b needs b > 0 dividing a), and recurse on
# the numbers left with the result in place of the pair. Every number is used exactly once.
def solvable(numbers, target):
    if len(numbers) == 1:
        return numbers[0] == target
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i == j:
                continue
            rest = [x for k, x in enumerate(numbers) if k not in (i, j)]
            results = [a + b, a * b] + ([a - b] if a >= b else []) + ([a // b] if b and a % b == 0 else [])
            if any(solvable(rest + [r], target) for r in results):
                return True
    return False


# Concept checks (multiple choice; the questions are at the end of each notebook): the right letter, and why each
# choice is right or wrong.
CONCEPT_ANSWERS = {
    # (c) On a step's first update ρ = 1, the clip does nothing, and the policy part is -(1/G) Σ A_i = 0 (a group's
    # advantages sum to 0; the std scales them alike), leaving β·KL, small near the reference. Its gradient is the
    # policy gradient with the group baseline, not 0: watch the reward, the KL and the gradient norm. (a) reads
    # learning off a surrogate's value. (b) The KL term is >= 0 and small; it cancels nothing. (d) The std rescales
    # advantages that already sum to 0: the loss is 0 at any scale, and the steps are not small (1/std > 1 here).
    "01_loss_near_zero": "c",
    # (b) GRPO's advantages are (0 - 0)/(0 + ε) = 0: a group with no spread teaches nothing (DAPO drops such groups).
    # REINFORCE + baseline uses A = r - b = -0.3 for each answer, lowering their log-probabilities; lowering answers
    # under a softmax raises the others, the unsampled ones. (a) is GRPO's half only. (c) swaps the two: a reward of
    # 0 is a failure only relative to a baseline, and GRPO's baseline here is 0 too. (d) The methods' baselines differ
    # (the group's mean 0 against the running mean 0.3), so their advantages do.
    "01_all_wrong_group": "b",
    # (a) Search improves on the prior: with 64 simulations of look-ahead the visits concentrate on moves that hold up,
    # so π is a better policy than p; fitting p to π and searching again is policy iteration (expert iteration: the
    # same idea trains the student in notebooks 04 and 05). (b) π is not p: the look-ahead moves it away from p, and
    # that difference is what the net learns. (c) z is the value head's target; visit counts say which move, not who
    # wins. (d) The target's noise is a cost (fewer simulations, noisier π), not the reason it works.
    "02_visit_target": "a",
    # (c) A value_sum is in the view of the player who moved into the node, i.e. the one choosing among it and its
    # siblings; negating once per ply keeps that true all the way up, so 'take the largest Q + U' is right for both
    # players. Get the signs wrong and, at the other player's turns, it picks that player's worst move (exercise 2).
    # (a) is what the flip replaces: in a zero-sum game a value is never the same for both players. (b) Children's
    # values need not sum to 0 (two good replies are both positive for the player choosing). (d) Every simulation
    # still needs its own backup; the flip changes signs, not counts.
    "02_negamax": "c",
    # (d) The correctness reward scores how an answer ends (1 for finished and correct); PRE and the direction bonus
    # are reported, not added, and teacher_values does not read the label. So a 'wrong' chunk that leads to correct
    # answers is a good chunk here, and it raises its teacher's score. (a) The bonus counts only under
    # train.reward = 'combined'. (b) Wrong branches are children like any other and are selected by Q + U.
    # (c) Nothing filters rollouts by the path's labels.
    "03_wrong_branch": "d",
    # (d) Each score averages a handful of backed-up values, each noisy, and the softmax at temperature 0.1 turns a
    # score gap of 0.1 into a weight ratio of e, for noise and real difference alike. Many searches at a small
    # ema_rate fold many more credits into each score, so its noise shrinks; a copy of tutor, the same teacher twice,
    # shows how far chance alone splits two equal teachers: the yardstick a real gap must beat. (a) A colder softmax
    # magnifies the noise as much as any real difference. (b) ema_rate 1 makes each score one search's mean: fewer
    # values, more noise. (c) Without the floor the gap widens and the trailing teacher is drawn less often, so it is
    # credited less and its score gets noisier, not more telling.
    "03_identical_teachers": "d",
    # (c) The scored answer is chosen with the gold answer's help (the most-visited path completed by its best rollout
    # by reward, and the reward steered the visits), so it is what search + verifier achieve, not what the student
    # writes alone. It is still a useful training curve; held-out accuracy of the student alone is notebook 05's job.
    # (a) and (b) are the student alone (on training or on held-out problems), which this number is not. (d) is the
    # share of groups with spread, a different column of the step log.
    "04_answer_accuracy": "c",
    # (a) Imitation (expert iteration) maximises the likelihood of every verified answer (azlib.games.text.signals.verified: each
    # distinct one once), so an all-correct group is up to 4 training examples; GRPO's group-normalised advantages are
    # 0 there (only the KL term acts). Conversely GRPO's negative advantages push wrong answers down, which imitation
    # never sees. (b) is GRPO's half only. (c) swaps the two updates. (d) With β = 0 GRPO still weights answers by
    # their advantages, imitation by 1 on verified answers only.
    "04_sft_vs_grpo": "a",
    # (d) A control set changes one thing and keeps the rest, as transfer keeps heldout's problems and changes their
    # wording. Three-step chains in the training wordings keep the wording, the operations and the numbers and change
    # only the length: a gain over the base there means the arm chains operations beyond the length it trained on; no
    # gain means it learned two-step answers. (c) changes length and wording at once: if the gain vanishes there,
    # either could be the cause. (a) narrows the interval around the question heldout already answers; it cannot say
    # what the gain is made of. (b) pass@16 on the same problems says what sampling reaches, on the set that already
    # shows the gain, and nothing about longer chains.
    "05_transfer": "d",
    # (c) McNemar's randomness is the draw of problems, with both trained models fixed; the training run's randomness
    # (seed: initialisation, sampling) is not in it, and another seed can move an arm by more than the difference.
    # A claim about the method rests on the differences across seeds, corrected for the number of comparisons.
    # (a) and (b) answer 'do these two models differ', not 'does the method train better'. (d) The exact test is
    # valid at any size; small samples only make it less powerful.
    "05_one_seed": "c",
    # (b) kl_j = log π_T(t_j | q, s, ...) - log π_S(t_j | q, ...): the teacher's extra confidence from having seen s,
    # large for an explanation that states the solution or leans on what only the solution gives away. (a) r_KL is a
    # mean (plus a max), so length alone does not raise it. (c) GRPO's KL to the reference is a separate term. (d) is
    # r_SS's job.
    "06_r_kl": "b",
    # (a) r_SS is the student's log-likelihood of s after reading t, highest when t contains s to copy. Such an
    # explanation is useless at test time, when there is no s; r_KL charges for exactly the tokens the student could
    # not have produced. (b) is what λ > 0 is there to reward. (c) and (d) leave the student as unlikely to produce s
    # as without an explanation; nothing in r_SS favours few tokens.
    "06_lambda_zero": "a",
    # (d) A referee is useful for what it knows that the student does not. Trained on the same batches with CE, it is
    # at most a CE model's view of the same data (early on it knows hardly more than the student); pre-trained
    # elsewhere, it brings outside knowledge from step 1, as a teacher does in distillation. (a) The kind of model is
    # the same; what it has seen is not. (b) Its reward uses the ground truth only through reality's factor, as the
    # frozen one's does. (c) is backwards: early on the co-trained referee is nearly flat, and reality's factor
    # dominates the reward all along (section 'Where the reward goes').
    "07_frozen_referee": "d",
    # (c) With β = 0, q follows reality alone: y_t gets (1-ε)^α against (ε/(|A|-1))^α for each other candidate, so
    # q_y > 1/|A| > q_other. Only y_t is paid, scale·q_y capped at the clamp 1.5, and L_RL = -(1/N) Σ_t (1.5/|A_t|)
    # log p(y_t): cross-entropy weighted by clamp/|A_t|. (a) Reality alone puts the ground truth above the even share.
    # (b) The smoothing only sets q; the other candidates stay below 1/|A| and are paid nothing. (d) β = 0 removes
    # the referee from q.
    "07_beta_zero": "c",
    # (b) The root's visit shares say how the search divided its simulations among the lines the model proposed: a
    # distribution, which AlphaZero's loss -pi . log p fits. The next round's candidates are sampled from the trained
    # model, so a line it was taught to give almost no probability is seldom sampled again, and the search cannot
    # consider it; fitting the shares keeps the runners-up proposable. (a) The most visited line needs no oracle:
    # it is read off the visit counts. (c) The game's outcome z is the value head's target, not the policy's.
    # (d) The update generates no characters; both targets reuse the same search.
    "08_visit_shares": "b",
    # (c) With the exact oracle at the leaves the search never misjudges a state: the arm shows what a perfect value
    # would buy the search and the training, a ceiling for the learned value. It is not a method to deploy: whoever
    # holds the oracle holds a solver (azlib.games.countdown.rules.solve) and needs no model at all. (a) Checking a finished
    # answer is cheap; knowing whether a half-played state can still be won is the solver's whole work, so a
    # deployment that had it would not need the search. (b) It trains
    # from the same start on the same problems as alphazero, with another value, not another seed. (d) It samples
    # the same candidate lines and spends the same generated characters; only the leaves' values differ.
    "08_oracle_arm": "c",
}
