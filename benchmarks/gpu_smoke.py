"""The H100 path end to end, without downloads, in minutes: a randomly initialised model of the
h100 profile's student (Qwen2.5-1.5B-Instruct's shape and 151,936-token vocabulary; the embedded model's
tokenizer, so nothing is fetched) at the profile's sizes: 384-token answers, micro-batch 16, LoRA r 32.

Phases, each timed, with peak GPU memory (torch's, and the whole device's) or peak RSS on a CPU:
versions and device; the student in the chosen dtype with its reference; the hf decode loop's throughput; a
no-gradient log-prob pass at notebook 04's demo size (2 problems x 16 simulations x 4 samples = 128 answers);
one imitation step and one GRPO step (each one MCTS search and one update, 8-bit AdamW when bitsandbytes is
installed); checkpoint, then resume in a fresh trainer; evaluation of 64 problems. Beside the scoring pass and
the training steps, the memory plan's prediction for their largest part (azlib.plan). A JSON report goes to
--out. The tests run it on the CPU with --shape tiny (small sizes throughout).

    python benchmarks/gpu_smoke.py [--device cuda] [--dtype bfloat16] [--shape student] [--out gpu_smoke.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import resource
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

OPTIMIZER = "adamw_8bit" if importlib.util.find_spec("bitsandbytes") else "adamw"  # 8-bit: the gpu extra

SHAPES = {  # Qwen2.5-1.5B-Instruct's config (the h100 profile's student); tiny for the CPU tests
    "student": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1e6, "tie_word_embeddings": True,
                "vocab_size": 151_936},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 4096, "tie_word_embeddings": True},
}
# The sizes params/h100/04_gsm8k_run.yaml trains at (answer tokens, micro-batch, LoRA rank, the demo cell's answers)
SIZES = {"student": {"answer_tokens": 384, "micro_batch": 16, "lora_r": 32, "demo_answers": 128},
         "tiny": {"answer_tokens": 48, "micro_batch": 8, "lora_r": 16, "demo_answers": 16}}


def random_student(shape: str, folder: Path) -> str:
    """A Qwen2 model of `shape` with random weights and the embedded tokenizer, saved to `folder` (its vocabulary
    is the shape's: ids past the tokenizer's are never written, but every logits row is the real width)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from azlib.models import load_model

    _, tokenizer = load_model("embedded:smollm2-135m-instruct")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**{"vocab_size": len(tokenizer), **SHAPES[shape]}))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


class Report:
    """Seconds and peak memory per phase, and anything else worth keeping, as one JSON object."""

    def __init__(self, device: str):
        self.device, self.data = device, {"phases": {}}

    @contextmanager
    def phase(self, name: str):
        cuda = self.device.startswith("cuda")
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        yield (entry := {})
        if cuda:
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            entry |= {"torch_peak_mb": torch.cuda.max_memory_allocated() / 2**20, "device_used_mb": (total - free) / 2**20}
        else:
            entry["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        entry["seconds"] = round(time.perf_counter() - start, 2)
        self.data["phases"][name] = entry
        print(f"{name:12s} {json.dumps(entry)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="student")
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke.json"))
    args = parser.parse_args()

    import transformers

    from azlib.data import arithmetic_problems
    from azlib.evaluation import evaluate
    from azlib.grpo import GRPOSettings, make_optimizer
    from azlib.mcts.envs.text import TextSearchSettings
    from azlib.mcts.search import SearchConfig
    from azlib.models.student import LoraSettings, Student
    from azlib.plan import activations, model_shape, scoring_logits, training_logits
    from azlib.training import Trainer, TrainingConfig, TrainSettings

    report = Report(args.device)
    work = Path(tempfile.mkdtemp(prefix="azlib-gpu-smoke-"))
    with report.phase("versions") as entry:
        entry |= {"python": platform.python_version(), "torch": torch.__version__,
                  "transformers": transformers.__version__, "cuda": torch.version.cuda,
                  "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
                  "shape": args.shape, "dtype": args.dtype}
        model_dir = random_student(args.shape, work / "model")

    size = SIZES[args.shape]

    def student() -> Student:
        torch.manual_seed(0)
        return Student(model_dir, lora=LoraSettings(r=size["lora_r"], alpha=size["lora_r"]), reference="adapters_off",
                       dtype=args.dtype, device=args.device, gradient_checkpointing=True)

    with report.phase("student") as entry:
        first = student()
        entry["parameters_m"] = round(sum(p.numel() for p in first.model.parameters()) / 1e6, 1)
    shape, _ = model_shape(model_dir)
    chats = [[{"role": "user", "content": f"What is {a} + {a + 7}?"}] for a in range(32)]
    with report.phase("decode") as entry:
        samples = first.backend.generate(chats, max_new_tokens=64, temperature=1.0, seed=0)
        tokens = sum(s[0].completion_tokens for s in samples)
        entry |= {"tokens": tokens}
    report.data["phases"]["decode"]["tokens_per_second"] = round(tokens / report.data["phases"]["decode"]["seconds"], 1)

    rows, length = size["demo_answers"], size["answer_tokens"]
    with report.phase("score_demo") as entry, torch.no_grad():  # notebook 04's demo cell: two problems' answers
        generator = torch.Generator().manual_seed(0)
        answers = torch.randint(len(first.tokenizer), (rows, length), generator=generator).tolist()
        prompts = [first.backend.encode_prompt(chats[i % 2]) for i in range(rows)]
        logp, mask, _ = first.token_logprobs(prompts, answers, temperature=0.7)
        first.token_logprobs(prompts, answers, reference=True, temperature=0.7)
        part = scoring_logits("demo", rows, length, shape, args.dtype)
        entry |= {"answers": rows, "tokens": int(mask.sum()), "finite": bool(torch.isfinite(logp).all()),
                  "plan_logits_mb": round(part.bytes / 2**20, 1)}

    problems = arithmetic_problems(16, seed=0, steps=(1,))

    def settings(update: str, steps: int) -> TrainingConfig:
        return TrainingConfig(
            train=TrainSettings(update=update, steps=steps, problems_per_step=2, checkpoint_every=1,
                                max_new_tokens=length, temperature=1.0),
            grpo=GRPOSettings(optimizer=OPTIMIZER, micro_batch_size=size["micro_batch"]),
            search=SearchConfig(num_simulations=4, max_depth=4, leaves_per_step=2, max_tokens=8 * length,
                                skip_solved=True, q_transform="parent_value"),
            text=TextSearchSettings(student_samples=2))

    planned = {"plan_micro_batch_mb": round(sum(
        p.bytes for p in (activations(size["micro_batch"], 256 + length, shape, args.dtype, True),
                          training_logits("micro-batch", size["micro_batch"], length, shape, args.dtype))) / 2**20, 1)}
    with report.phase("train_sft_step") as entry:
        log = Trainer(first, problems, work / "run-sft", settings("sft", 1)).run(progress=False)
        entry |= {"steps": len(log), "verified": log[0]["verified"], "tokens": log[0]["tokens"], **planned}
    with report.phase("train_grpo_step") as entry:
        trainer = Trainer(first, problems, work / "run", settings("grpo", 1))
        log = trainer.run(progress=False)
        entry |= {"optimizer": type(trainer.grpo.optimizer).__name__, "steps": len(log),
                  "loss": round(log[0].get("loss", 0.0), 5), "tokens": log[0]["tokens"], **planned}
    with report.phase("resume") as entry:
        del trainer, first
        again = Trainer(student(), problems, work / "run", settings("grpo", 1))
        again.restore_latest()
        entry |= {"resumed_at_step": again.step, "optimizer_state_restored": bool(again.grpo.optimizer.state)}
        assert again.step == 1 and again.grpo.updates == 1, "resume did not restore the step"
    with report.phase("evaluate_64") as entry:
        result = evaluate(again.student.backend, arithmetic_problems(64, seed=1, steps=(1,)), max_new_tokens=32)
        entry |= {"accuracy": result.accuracy, "tokens": result.tokens_generated}
    report.data["optimizer_check"] = type(make_optimizer([torch.nn.Parameter(torch.zeros(1))],
                                                         GRPOSettings(optimizer=OPTIMIZER))).__name__
    report.data["total_seconds"] = round(sum(p["seconds"] for p in report.data["phases"].values()), 1)
    args.out.write_text(json.dumps(report.data, indent=1))
    print(f"report: {args.out} ({report.data['total_seconds']} s)")


if __name__ == "__main__":
    main()
