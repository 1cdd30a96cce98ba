"""The bandit's gradients, estimators and learning, checked against hand computations."""

import math

import numpy as np
import pytest
import torch

from azlib import bandit

PROBLEM = bandit.Bandit.from_answers([2, 0, 3], 4)
CHAIN = bandit.Bandit.from_answers([[2, 1], [0, 3]], 4)


def test_group_advantages_match_the_formula():
    adv = bandit.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    std = math.sqrt(1 / 3)  # Bessel: sum of squared deviations 4 * 0.25 over 3
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-4))
    assert torch.equal(bandit.group_advantages(torch.ones(5)), torch.zeros(5))


def test_state_index_enumerates_prefixes():
    idx = CHAIN.state_index(CHAIN.all_answers()[:, :1])
    assert idx.tolist() == [1 + a for a in CHAIN.all_answers()[:, 0].tolist()]
    assert CHAIN.state_index(torch.zeros(3, 0, dtype=torch.long)).tolist() == [0, 0, 0]
    assert CHAIN.num_states == 5


def test_reinforce_gradient_is_the_analytic_score_function():
    """On-policy (ratio 1), beta 0: d loss / d logits[s] = -(1/B) sum_i A_i (onehot(a_i) - pi(s))."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, 3, 1, 4, generator=g, dtype=torch.float64).requires_grad_()
    prompts = torch.tensor([[1, 1, 1, 1, 2]])
    answers = torch.tensor([[[0], [3], [0], [1], [2]]])
    adv = torch.tensor([[1.0, -0.5, 2.0, 0.3, -1.0]], dtype=torch.float64)
    logp = bandit.token_logprobs(logits, PROBLEM, prompts, answers)
    loss = bandit.policy_loss(logp, logp.detach(), logp.detach(), adv, clip_epsilon=0.2, beta=0.0)
    (grad,) = torch.autograd.grad(loss, logits)

    pi = torch.softmax(logits.detach()[0, :, 0], -1)
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for p, a, A in zip(prompts[0], answers[0, :, 0], adv[0]):
        expected[p] -= A * (torch.nn.functional.one_hot(a, 4) - pi[p]) / 5
    assert torch.allclose(grad[0, :, 0], expected, atol=1e-12)


def test_full_loss_gradient_matches_finite_differences():
    """Off-policy ratio, clipping and k3 KL all active (chain of length 2)."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64)
    old = logits + 0.3 * torch.randn(logits.shape, generator=g, dtype=torch.float64)
    ref = torch.randn(logits.shape, generator=g, dtype=torch.float64)
    prompts = torch.randint(2, (2, 6), generator=g)
    answers = torch.randint(4, (2, 6, 2), generator=g)
    adv = torch.randn(2, 6, generator=g, dtype=torch.float64)

    def loss_at(x):
        lp = bandit.token_logprobs(x, CHAIN, prompts, answers)
        return bandit.policy_loss(lp, bandit.token_logprobs(old, CHAIN, prompts, answers),
                                  bandit.token_logprobs(ref, CHAIN, prompts, answers), adv, 0.2, 0.05)

    x = logits.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss_at(x), x)
    ratio = torch.exp(bandit.token_logprobs(logits, CHAIN, prompts, answers)
                      - bandit.token_logprobs(old, CHAIN, prompts, answers))
    assert ((ratio < 0.8) | (ratio > 1.2)).any(), "the check must exercise the clipped branch"
    h = 1e-6
    numeric = torch.zeros_like(logits)
    for i in range(logits.numel()):
        e = torch.zeros(logits.numel(), dtype=torch.float64)
        e[i] = h
        e = e.view_as(logits)
        numeric.view(-1)[i] = (loss_at(logits + e) - loss_at(logits - e)) / (2 * h)
    assert torch.allclose(grad, numeric, atol=1e-7)


def test_sampling_follows_the_softmax():
    logits = torch.tensor([[[[0.0, 1.0, 2.0, -1.0]]]]).expand(1, 3, 1, 4)
    prompts = torch.zeros(1, 40_000, dtype=torch.long)
    answers = bandit.sample(logits, PROBLEM, prompts, torch.Generator().manual_seed(0))
    freq = torch.bincount(answers[0, :, 0], minlength=4).float() / 40_000
    assert torch.allclose(freq, torch.softmax(logits[0, 0, 0], -1), atol=0.01)


def test_exact_diagnostics_and_the_k3_estimator_agree():
    g = torch.Generator().manual_seed(2)
    logits, ref = torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 4, generator=g)
    d = bandit.diagnostics(logits, ref, CHAIN)
    # KL by hand from the sequence distribution of prompt 0 and 1
    answers = CHAIN.all_answers()
    kl = 0.0
    for p in range(2):
        prompts = torch.full((1, len(answers)), p)
        lp = bandit.token_logprobs(logits, CHAIN, prompts, answers[None]).sum(-1)
        lq = bandit.token_logprobs(ref, CHAIN, prompts, answers[None]).sum(-1)
        assert torch.isclose(lp.exp().sum(), torch.tensor(1.0))
        kl += (lp.exp() * (lp - lq)).sum() / 2
    assert torch.isclose(d["kl"][0], kl, atol=1e-5)
    # k3 on sampled tokens is an unbiased estimate of the same per-token KL (sum over positions)
    prompts = torch.randint(2, (1, 200_000), generator=g)
    sampled = bandit.sample(logits, CHAIN, prompts, g)
    lp = bandit.token_logprobs(logits, CHAIN, prompts, sampled)
    lr = bandit.token_logprobs(ref, CHAIN, prompts, sampled) - lp
    k3 = (lr.exp() - lr - 1).sum(-1).mean()
    assert abs(k3.item() - kl.item()) < 0.03 * kl.item() + 0.01


@pytest.mark.parametrize("name", ["GRPO", "PPO (clipped)"])
def test_grpo_and_ppo_learn_the_bandit(name):
    algo = next(a for a in bandit.standard_algorithms(0.01, 0.2, 4) if a.name == name)
    h = bandit.train(PROBLEM, algo, group_size=8, num_updates=400, learning_rate=0.1, num_runs=4, seed=0)
    assert h.metrics["reward"][0].mean() == pytest.approx(0.25)
    assert h.final("reward") > 0.9
    assert h.final("entropy") < math.log(4) - 0.5
    assert np.all(h.metrics["kl"] >= -1e-6)
    assert h.samples[-1] == 400 * 8


def test_beta_holds_the_policy_near_the_reference():
    grpo = next(a for a in bandit.standard_algorithms(0.0, 0.2, 4) if a.name == "GRPO")
    free = bandit.train(PROBLEM, grpo, group_size=8, num_updates=200, learning_rate=0.1, num_runs=4, seed=0)
    held = bandit.train(PROBLEM, bandit.Algorithm("GRPO", "group", beta=2.0), group_size=8, num_updates=200,
                        learning_rate=0.1, num_runs=4, seed=0)
    assert held.final("kl") < 0.5 * free.final("kl")


def test_chain_credit_reaches_both_positions():
    grpo = bandit.Algorithm("GRPO", "group", beta=0.01)
    h = bandit.train(CHAIN, grpo, group_size=8, num_updates=600, learning_rate=0.5, num_runs=4, seed=0)
    assert h.final("p_correct_token1") > 0.6 and h.final("p_correct_token2") > 0.6
    assert h.final("reward") > 0.4


def test_training_is_reproducible_from_the_seed():
    algo = bandit.Algorithm("GRPO", "group", beta=0.01)
    a, b = (bandit.train(PROBLEM, algo, group_size=4, num_updates=30, learning_rate=0.1, num_runs=2, seed=7)
            for _ in range(2))
    assert np.array_equal(a.metrics["reward"], b.metrics["reward"])


def test_seed_curves_lying_on_each_other_show_through_and_say_so():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from azlib.viz import plot_seed_curves

    x = np.arange(5)
    rising = np.linspace(0, 1, 10).reshape(5, 2)
    fig, ax = plt.subplots()
    plot_seed_curves(ax, x, {"REINFORCE": rising, "REINFORCE + baseline": rising.copy(), "GRPO": rising ** 2},
                     title="t", xlabel="x", ylabel="y")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["REINFORCE", "REINFORCE + baseline (identical to REINFORCE)",
                                                    "GRPO"]
    assert len({line.get_linestyle() for line in lines}) == 3
    plt.close(fig)
