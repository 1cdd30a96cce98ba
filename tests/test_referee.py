"""Notebook 07's pieces: the referee reward and RL loss by hand, the ground-truth-only ablation against
cross-entropy, the GPT's causality, and DDP on 2 CPU processes against one process on the same global batch."""

import math
import os
import socket
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from azlib.lab import config
from azlib.referee import GPT, GPTSettings, RefereeRLSettings, ce_loss, referee_rewards, referee_rl_loss
from azlib.referee.objective import candidates
from azlib.referee.train import RefereeTrainSettings


def test_candidates_are_the_union_with_repeats_masked():
    student = torch.tensor([[3.0, 2.0, 0.0, -1.0, -2.0, -3.0]])
    referee = torch.tensor([[-1.0, 2.4, 2.0, 2.5, -2.0, -3.0]])
    ids, mask = candidates(student, referee, torch.tensor([2]), top_k=2)
    assert ids.tolist() == [[0, 1, 3, 1, 2]] and mask.tolist() == [[True, True, True, False, True]]


def test_rewards_by_hand():
    """|A| = 4: reality 0.9 on y = 2, 0.1/3 elsewhere; q ~ reality^0.7 p_ref^0.3; only q > 1/4 rewarded, scaled to 1.5."""
    student = torch.tensor([[3.0, 2.0, 0.0, -1.0, -2.0, -3.0]])
    referee = torch.tensor([[-1.0, -1.0, 2.0, 2.5, -2.0, -3.0]])
    y = torch.tensor([2])
    cfg = RefereeRLSettings(top_k=2)
    ids, mask = candidates(student, referee, y, cfg.top_k)
    r = referee_rewards(ids, mask, y, referee, cfg)
    p = torch.softmax(referee[0], 0).tolist()
    ideal = {a: (0.9 if a == 2 else 0.1 / 3) ** 0.7 * p[a] ** 0.3 for a in (0, 1, 2, 3)}
    q = {a: v / sum(ideal.values()) for a, v in ideal.items()}
    expected = {a: 1.5 * q[a] / max(q.values()) if q[a] > 0.25 else 0.0 for a in q}
    got = {int(a): float(v) for a, v, m in zip(ids[0], r[0], mask[0]) if m}
    assert got == pytest.approx(expected, abs=1e-6)
    assert got[2] == pytest.approx(1.5) and sum(v > 0 for v in got.values()) == 1  # the referee's favourite gets 0


def test_only_a_referee_extremely_sure_against_the_truth_moves_the_reward():
    """Reality favours y by (0.9 / (0.1/3))^0.7 ~ 10; the referee's factor p^0.3 must beat that: at a logit gap of
    40 (p ratio e^40) all the reward goes to the referee's token, at a gap of 4 none of it does."""
    student = torch.zeros(1, 8)
    referee = torch.full((1, 8), -20.0)
    referee[0, 5] = 20.0
    y = torch.tensor([1])
    cfg = RefereeRLSettings(top_k=2)
    ids, mask = candidates(student, referee, y, cfg.top_k)
    r = referee_rewards(ids, mask, y, referee, cfg)
    rewarded = {int(a) for a, v in zip(ids[0], r[0]) if v > 0}
    assert rewarded == {5} and r.max() == pytest.approx(1.5)
    _, diag = referee_rl_loss(student.clone().requires_grad_(), referee, y, cfg)
    assert diag["gt_reward_share"] == 0.0 and diag["only_gt_rewarded"] == 0.0
    mild = torch.zeros(1, 8)
    mild[0, 5] = 4.0
    _, diag = referee_rl_loss(student.clone().requires_grad_(), mild, y, cfg)
    assert diag["gt_reward_share"] == 1.0


def _toy_batch(seed=0, B=2, T=5, V=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, V, generator=g), torch.randint(V, (B, T), generator=g)


def test_ground_truth_only_gradient_is_cross_entropy_weighted_by_clamp_over_action_set_size():
    """beta = 0: only y is above the mean share, so r_y = clamp and L_RL = mean_t (1.5/|A_t|) CE_t exactly:
    the gradient is CE's, position by position, times 1.5/|A_t|."""
    logits, y = _toy_batch()
    cfg = RefereeRLSettings(top_k=2, referee_weight=0.0)
    z = logits.clone().requires_grad_()
    loss, diag = referee_rl_loss(z, None, y, cfg)
    loss.backward()
    ids, mask = candidates(logits.reshape(-1, 7), None, y, cfg.top_k)
    size = mask.sum(1).float()
    assert set(size.tolist()) == {2.0, 3.0}, "the toy batch has both |A| = k and |A| = k + 1"
    z2 = logits.clone().requires_grad_()
    per_position = F.cross_entropy(z2.reshape(-1, 7), y.reshape(-1), reduction="none")
    ((1.5 / size) * per_position).mean().backward()
    assert torch.allclose(z.grad, z2.grad, atol=1e-7)
    assert diag["gt_reward_share"] == 1.0 and diag["only_gt_rewarded"] == 1.0


def test_ground_truth_only_with_every_token_a_candidate_is_cross_entropy_times_clamp_over_vocab():
    logits, y = _toy_batch(seed=1)
    z = logits.clone().requires_grad_()
    loss, _ = referee_rl_loss(z, None, y, RefereeRLSettings(top_k=7, referee_weight=0.0))
    loss.backward()
    z2 = logits.clone().requires_grad_()
    ce_loss(z2, y).backward()
    assert loss.item() == pytest.approx(1.5 / 7 * ce_loss(logits, y).item(), rel=1e-6)
    assert torch.allclose(z.grad, 1.5 / 7 * z2.grad, atol=1e-7)


def test_group_advantage_gradient_does_not_depend_on_the_model_probabilities():
    """sum_a (r_a - mean r) log p_a = sum_a (r_a - mean r) z_a: d loss / d z_a = -(r_a - mean r) / (|A| N) on A, 0 off it."""
    logits, y = _toy_batch(seed=2)
    referee, _ = _toy_batch(seed=3)
    cfg = RefereeRLSettings(top_k=2, advantage="group")
    z = logits.clone().requires_grad_()
    referee_rl_loss(z, referee, y, cfg)[0].backward()
    N, V = y.numel(), 7
    ids, mask = candidates(logits.reshape(N, V), referee.reshape(N, V), y, cfg.top_k)
    r = referee_rewards(ids, mask, y, referee, cfg)
    size = mask.sum(1, keepdim=True).float()
    adv = (r - r.sum(1, keepdim=True) / size) * mask
    expected = torch.zeros(N, V).scatter_add_(1, ids, -adv / size / N)
    assert torch.allclose(z.grad.reshape(N, V), expected, atol=1e-7)


def test_ce_loss_and_gpt_are_causal():
    torch.manual_seed(0)
    model = GPT(GPTSettings(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    x = torch.randint(11, (1, 8))
    x2 = x.clone()
    x2[0, 5:] = (x2[0, 5:] + 1) % 11
    assert torch.allclose(model(x)[0, :5], model(x2)[0, :5], atol=1e-6)
    logits = model(x)
    manual = -torch.log_softmax(logits, -1).gather(2, x.unsqueeze(2)).mean()
    assert ce_loss(logits, x).item() == pytest.approx(manual.item(), rel=1e-6)


def test_the_ablation_referee_must_be_smaller():
    defaults = config.notebook_defaults(config.NOTEBOOKS_DIR / "07_referee_rl.ipynb")
    with pytest.raises(config.ParamsError, match=r"small_referee must be smaller than model \(n_layer x n_embd\^2: "
                                                 r"4 x 128\^2 is not below 4 x 128\^2\)"):
        config.validate("07_referee_rl", {**defaults, "small_referee": {"n_layer": 4, "n_head": 4, "n_embd": 128}})


@pytest.mark.parametrize("section, change, message", [
    ("train", {"steps": 0}, "train: Value error, steps: Input should be greater than or equal to 1 (got 0)"),
    ("train", {"learning_rate": 0.0}, "train: Value error, learning_rate: Input should be greater than 0 (got 0.0)"),
    ("train", {"seed": 1}, "train: Value error, unknown field(s) ['seed'] of RefereeTrainSettings"),
    ("model", {"n_embd": 130}, "model: Value error, n_embd (130) must be a multiple of n_head (4)"),
    ("small_referee", {"n_head": 3}, "small_referee: Value error, n_embd (64) must be a multiple of n_head (3)"),
    ("small_referee", {"block_size": 64}, "small_referee: Value error, unknown field(s) ['block_size'] of GPTShape"),
    ("model", {"block_size": 4}, "model: Value error, block_size: Input should be greater than or equal to 8 (got 4)"),
    ("reward", {"top_k": 65}, "reward: Value error, top_k: Input should be less than or equal to 64 (got 65)"),
    ("reward", {"smoothing": 1.0}, "reward: Value error, smoothing: Input should be less than 1 (got 1.0)"),
])
def test_the_notebooks_parameters_are_checked_by_the_referee_settings_they_build(section, change, message):
    """Bounds live in GPTShape, RefereeRLSettings and RefereeTrainSettings, the sections' types; the error names
    the section, the field and its bound, without the other parameters (a fixed field, the seed or the small
    referee's block_size, is not settable)."""
    defaults = config.notebook_defaults(config.NOTEBOOKS_DIR / "07_referee_rl.ipynb")
    with pytest.raises(config.ParamsError) as err:
        config.validate("07_referee_rl", {**defaults, section: {**defaults[section], **change}})
    assert message in str(err.value) and "output_dir" not in str(err.value)


def test_the_run_builds_its_networks_from_the_shapes_and_the_corpus():
    """The vocabulary is the corpus's; the small referee reads the main models' windows; the loop's seed is the
    notebook's."""
    from azlib.referee.data import CharCorpus
    from azlib.lab.from_params import arms_from_params

    params = config.resolve_library("07_referee_rl", "smoke", "outputs/test", ["seed=3"])[0]
    chars = [chr(32 + i) for i in range(57)]
    corpus = CharCorpus("arithmetic", chars, torch.arange(400) % 57, torch.arange(100) % 57)
    arms = arms_from_params(params, corpus)
    main, small = arms.models["ce"].config, arms.models["referee_small"].config
    assert (main.vocab_size, main.block_size, main.n_layer, main.n_head, main.n_embd) == (57, 32, 2, 2, 32)
    assert (small.vocab_size, small.block_size, small.n_layer, small.n_head, small.n_embd) == (57, 32, 1, 2, 16)
    assert (arms.cfg.seed, arms.cfg.steps, arms.cfg.batch_size) == (3, 30, 8)
    assert [s.rl for s in arms.specs if s.name == "rl"] == [params.reward]


def test_the_referee_settings_refuse_bad_values_when_used_without_a_notebook():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTSettings(vocab_size=11, n_embd=130)
    with pytest.raises(ValueError, match=r"RefereeRLSettings\ntop_k\n  Input should be greater than or equal to 1 "
                                         r"\[type=greater_than_equal, input_value=0"):
        RefereeRLSettings(top_k=0)
    with pytest.raises(ValueError, match=r"grad_clip\n  Input should be greater than 0"):
        RefereeTrainSettings(grad_clip=0.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _referee_run(out, processes: int):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "-m", "azlib", "referee",
           "--profile", "smoke", "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=config.REPO_ROOT, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(out / "referee-07" / "models.pt"), (out / "referee-07" / "log.json").read_text()


def test_ddp_on_two_cpu_processes_equals_one_process_on_the_same_global_batch(tmp_path):
    """torchrun, gloo: each process takes half of every global batch; DDP averages the gradients, which equals
    the gradient of the mean over the whole batch, so every arm's parameters match a 1-process run to 1e-5."""
    one, log1 = _referee_run(tmp_path / "one", 1)
    two, log2 = _referee_run(tmp_path / "two", 2)
    assert '"processes": 2' in log2 and '"processes": 1' in log1
    assert set(one) == set(two) == {"ce", "rl", "rl_gt_only", "referee_small", "rl_small_referee"}
    worst = max((one[arm][k] - two[arm][k]).abs().max().item() for arm in one for k in one[arm])
    assert worst < 1e-5, worst
    start = GPT(GPTSettings(vocab_size=one["ce"]["wte.weight"].shape[0], block_size=32, n_layer=2, n_head=2, n_embd=32))
    assert not math.isclose(one["rl"]["wte.weight"].sum().item(), start.wte.weight.sum().item()), "it trained"
