"""RLT (azlib.rlt): r_SS and r_KL computed by hand from two tiny random models' full-sequence logits
and compared with the batched functions; the teacher's GRPO step moves the teacher's adapter only;
students are fine-tuned to an exact token budget."""

import math

import pytest
import torch

from azlib.data import arithmetic_problems
from azlib.grpo import PolicyUpdate, GRPOSettings
from azlib.models.hf import HFBackend
from azlib.models.student import LoraSettings, Student
from azlib.prompts import chat_prompt
from azlib.rlt import (RLTSettings, TeacherTrainer, kl_reward, score_explanations, sft_examples, sft_to_budget,
                       solution_reward, teacher_prompt)
from azlib.rlt.teacher import solution_ids
from conftest import save_tiny_llama


@pytest.fixture(scope="module")
def models():
    return save_tiny_llama(0), save_tiny_llama(1)  # teacher, student: different weights, one tokenizer


def by_hand(backend, prompt, continuation):
    """log p(c_k | prompt, c_<k) from one plain forward over the whole sequence (no batching, no padding)."""
    ids = backend.encode_prompt(prompt)
    full = torch.tensor([ids + list(continuation)])
    with torch.no_grad():
        logp = torch.log_softmax(backend.model(full).logits[0].float(), -1)
    return [logp[len(ids) + k - 1, tok].item() for k, tok in enumerate(continuation)]


def test_rewards_equal_the_formulas_by_hand(models):
    teacher, student = HFBackend(models[0]), HFBackend(models[1])
    rows = arithmetic_problems(3, seed=5, steps=(1, 2))
    explanations = [student.encode_continuation(t) for t in ("Add the two numbers.", "First multiply", "")]
    solutions = [solution_ids(student, r) for r in rows]
    alpha, lam = 0.5, 3.0  # a large alpha so the min/max terms weigh in the comparison
    got = score_explanations(teacher, student, [teacher_prompt(r["prompt"], r["info"]["solution"]) for r in rows],
                             [chat_prompt(r["prompt"]) for r in rows], explanations, solutions,
                             alpha=alpha, kl_weight=lam)
    for i, (row, t, s) in enumerate(zip(rows, explanations, solutions)):
        both = by_hand(student, chat_prompt(row["prompt"]), t + s)
        sol, stu = both[len(t):], both[: len(t)]
        tea = by_hand(teacher, teacher_prompt(row["prompt"], row["info"]["solution"]), t)
        r_ss = sum(sol) / len(sol) + alpha * min(sol)
        kl = [a - b for a, b in zip(tea, stu)]
        r_kl = (sum(kl) / len(kl) + alpha * max(kl)) if kl else 0.0
        assert got.r_ss[i].item() == pytest.approx(r_ss, abs=1e-4)
        assert got.r_kl[i].item() == pytest.approx(r_kl, abs=1e-4)
        assert got.reward[i].item() == pytest.approx(r_ss - lam * r_kl, abs=1e-3)
        assert got.solution_logp[i] == pytest.approx(sol, abs=1e-4) and got.teacher_logp[i] == pytest.approx(tea, abs=1e-4)
    assert got.r_kl[2].item() == 0.0, "an empty explanation costs no KL"


def test_reward_formulas_on_tensors():
    logp = torch.tensor([[-1.0, -3.0, -2.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert solution_reward(logp, mask, 0.01).tolist() == pytest.approx([-2.0 - 0.03, -0.5 - 0.005])
    teacher = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, 9.0, 9.0]])
    assert kl_reward(teacher, logp, mask, 0.1).tolist() == pytest.approx([(0 + 2 + 1) / 3 + 0.1 * 2, -1.5 - 0.15])


def test_teacher_step_moves_the_teacher_adapter_only(models):
    teacher = Student(models[0], lora=LoraSettings(r=4, alpha=8, dropout=0.0))
    student = Student(models[1], lora=LoraSettings(r=4, alpha=8, dropout=0.0))
    with torch.no_grad():  # a student with a non-zero adapter: it must not move either
        for name, p in student.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    before_t = {n: p.detach().clone() for n, p in teacher.model.named_parameters()}
    before_s = {n: p.detach().clone() for n, p in student.model.named_parameters()}
    grpo = PolicyUpdate(teacher, GRPOSettings(learning_rate=1e-2, warmup_steps=0, beta=0.04, micro_batch_size=4))
    trainer = TeacherTrainer(teacher, student.backend, arithmetic_problems(4, seed=1), 
                             RLTSettings(group_size=3, problems_per_step=2, max_explanation_tokens=6), grpo)
    row = trainer.step()
    assert row["r_std"] > 0 and math.isfinite(row["r"]) and row["r"] == pytest.approx(row["r_ss"] - 3.0 * row["r_kl"], abs=1e-4)
    moved = [n for n, p in teacher.model.named_parameters() if not torch.equal(p, before_t[n])]
    assert moved and all("lora_" in n and ".default." in n for n in moved), "only the teacher's adapter trains"
    assert all(torch.equal(p, before_s[n]) for n, p in student.model.named_parameters()), "the student is frozen"
    assert all(p.grad is None for p in student.model.parameters())


def test_sft_trains_to_the_exact_token_budget(models):
    student = Student(models[1], lora=LoraSettings(r=4, alpha=8, dropout=0.0))
    rows = arithmetic_problems(3, seed=2)
    examples = sft_examples(student.backend, rows)
    assert all(e.completion_ids[-1] == student.tokenizer.eos_token_id for e in examples)
    grpo = PolicyUpdate(student, GRPOSettings(learning_rate=1e-3, warmup_steps=0))
    log = sft_to_budget(grpo, examples, token_budget=sum(len(e.completion_ids) for e in examples) * 2 + 5, batch_size=2)
    assert log[-1]["tokens"] == sum(len(e.completion_ids) for e in examples) * 2 + 5


def test_a_trained_teacher_joins_the_ensemble_as_a_right_branch_proposer(models, tmp_path):
    from azlib.teachers import TeacherSpec
    from azlib.teachers import TeacherEnsemble

    teacher = Student(models[0], lora=LoraSettings(r=4, alpha=8, dropout=0.0))
    with torch.no_grad():
        for name, p in teacher.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    teacher.save_adapter(tmp_path / "adapter")
    spec = TeacherSpec(name="rlt", backend="hf", model=models[0], tier="cpu", labels=["1"],
                       options={"adapter": str(tmp_path / "adapter")})
    ensemble = TeacherEnsemble([spec], per_node=1)
    try:
        merged = ensemble.teachers[0].backend
        prompt, ids = chat_prompt("What is 2 + 3?"), teacher.backend.encode_continuation("It is 5.")
        assert merged.score([prompt], [ids])[0] == pytest.approx(teacher.backend.score([prompt], [ids])[0], abs=1e-4)
        assert merged.score([prompt], [ids]) != HFBackend(models[0]).score([prompt], [ids]), "the adapter is loaded"
        proposals = ensemble.propose([("What is 2 + 3?", "")], n=2, max_new_tokens=4, seed=0)[0]
    finally:
        ensemble.close()
    assert len(proposals) == 2 and {p.label for p in proposals} == {"1"}
