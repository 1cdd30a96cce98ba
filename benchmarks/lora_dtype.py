"""Does a LoRA adapter kept in the model's bf16 train like peft's fp32 adapter beside bf16 weights? The embedded
student in bf16, two LoRA students from one initialisation (adapter in fp32, peft's default; adapter cast to
bf16), the same imitation steps on the same verified-looking answers; prints each step's loss, how far each
adapter moved, and the two adapters' disagreement against how far they moved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lora_dtype.py [--steps 20] [--lr 5e-5]
"""

from __future__ import annotations

import argparse

import torch

from azlib.data import arithmetic_problems
from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
from azlib.models import DEFAULT_MODEL
from azlib.models.student import Student
from azlib.settings import LoraSettings


def adapter(student: Student) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().clone() for n, p in student.model.named_parameters() if "lora_" in n}


def distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """L2 over every LoRA weight."""
    return sum((a[n] - b[n]).norm() ** 2 for n in a) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=5e-5)
    args = parser.parse_args()
    rows = arithmetic_problems(16, seed=3, steps=(1, 2))
    students = {}
    for kind in ("fp32 adapter", "bf16 adapter"):
        torch.manual_seed(0)
        student = Student(DEFAULT_MODEL, lora=LoraSettings(r=16, alpha=32, dropout=0.0), dtype="bfloat16")
        if kind == "bf16 adapter":
            for n, p in student.model.named_parameters():
                if "lora_" in n:
                    p.data = p.data.to(torch.bfloat16)
        students[kind] = student
    start = {k: adapter(s) for k, s in students.items()}
    tokenizer = next(iter(students.values())).tokenizer
    backend = students["fp32 adapter"].backend
    examples = [Rollout(None, backend.encode_prompt([{"role": "user", "content": r["prompt"]}]),
                        tokenizer.encode(r["info"]["solution"], add_special_tokens=False) + [tokenizer.eos_token_id],
                        1.0, i) for i, r in enumerate(rows)]
    updates = {k: PolicyUpdate(s, GRPOSettings(learning_rate=args.lr, warmup_steps=0, micro_batch_size=16))
               for k, s in students.items()}
    for step in range(1, args.steps + 1):
        losses = {k: u.sft_step(examples)["loss"] for k, u in updates.items()}
        print(f"step {step:3d}  " + "  ".join(f"{k} loss {v:.4f}" for k, v in losses.items()), flush=True)
    end = {k: adapter(s) for k, s in students.items()}
    moved = {k: distance(end[k], start[k]) for k in students}
    for k in students:
        print(f"{k}: the adapter moved {moved[k]:.4e} (L2 over every LoRA weight)")
    gap = distance(end["fp32 adapter"], end["bf16 adapter"])
    print(f"the two adapters differ by {gap:.4e}: {gap / moved['fp32 adapter']:.1%} of the fp32 adapter's movement")


if __name__ == "__main__":
    main()
