"""azlib's GRPO step against TRL's GRPOTrainer on CPU: the same embedded model with the same LoRA, group
size, completion length, prompts per step, loss (dapo, beta 0.04), reward and gradient checkpointing
(TRL's default), sampling temperature; each step samples the groups and takes one update. Prints samples/s
of both, their ratio (goal >= 1.3x) and peak memory.
Each side runs in its own process (clean peak RSS), one after the other, in the same invocation.

    .venv/bin/python benchmarks/grpo_vs_trl.py [--steps 3] [--group-size 8] [--prompts 2] [--tokens 48] [--temperature 1.0]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

MODEL = "embedded:smollm2-135m-instruct"


def run_azlib(args) -> dict:
    import torch

    from azlib.data import arithmetic_problems
    from azlib.grpo import PolicyUpdate, GRPOSettings
    from azlib.games.text.explorers import ForkExplorer
    from azlib.games.text.forking import ForkingSearch
    from azlib.settings import AnswerSampling, ForkSettings
    from azlib.models.student import LoraSettings, Student

    torch.manual_seed(0)
    student = Student(MODEL, lora=LoraSettings(r=16, alpha=32), gradient_checkpointing=True)  # TRL's default too
    settings = GRPOSettings(loss_type="dapo", beta=0.04, learning_rate=1e-5, micro_batch_size=args.group_size * args.prompts)
    sampling = AnswerSampling(temperature=args.temperature, top_p=1.0, max_new_tokens=args.tokens)
    trainer = PolicyUpdate(student, settings, sampling)
    rows = arithmetic_problems(args.prompts * (args.steps + 1), seed=0, steps=(1,))
    # independent answers, as a run of train.signal "independent" explores: a forking tree with no forks
    sampler = ForkExplorer(ForkingSearch(student.backend, rows, ForkSettings(rounds=0), sampling=sampling),
                           args.group_size, "answers")
    times = []
    for step in range(args.steps + 1):  # step 0 warms up
        start = time.perf_counter()
        rollouts = sampler.explore(list(range(step * args.prompts, (step + 1) * args.prompts)), step).rollouts
        trainer.step([r for r in rollouts if r.completion_ids])  # as the Trainer's step
        times.append(time.perf_counter() - start)
    return {"seconds": sum(times[1:]), "samples": args.steps * args.prompts * args.group_size}


def run_trl(args) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from azlib.data import arithmetic_problems
    from azlib.prompts import chat_prompt
    from azlib.models import resolve_model_path
    from azlib.rewards import correctness_reward

    path = resolve_model_path(MODEL)
    rows = arithmetic_problems(args.prompts * (args.steps + 1), seed=0, steps=(1,))
    data = Dataset.from_list([{"prompt": chat_prompt(r["prompt"]), "answer": r["answer"]} for r in rows])
    config = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], loss_type="dapo", beta=0.04,
                        learning_rate=1e-5, num_generations=args.group_size,
                        per_device_train_batch_size=args.group_size * args.prompts, gradient_accumulation_steps=1,
                        max_completion_length=args.tokens, temperature=args.temperature, max_steps=args.steps + 1,
                        logging_steps=1, save_strategy="no", seed=0)
    times, started = [], []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            started.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - started[-1])

    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=correctness_reward,
                          args=config, train_dataset=data, processing_class=tokenizer,
                          peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"), callbacks=[Clock()])
    trainer.train()
    return {"seconds": sum(times[1:]), "samples": args.steps * args.prompts * args.group_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps (after one warm-up step)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--tokens", type=int, default=48, help="max completion tokens")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (and the loss's)")
    parser.add_argument("--side", choices=["azlib", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = (run_azlib if args.side == "azlib" else run_trl)(args)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("RESULT " + json.dumps(result))
        return
    results = {}
    for side in ("azlib", "trl"):
        out = subprocess.run([sys.executable, __file__, "--side", side, *sys.argv[1:]], capture_output=True, text=True)
        line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            sys.exit(f"{side} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        results[side] = json.loads(line[7:])
    print(f"{args.steps} steps x {args.prompts} prompts x G={args.group_size}, <= {args.tokens} completion tokens, "
          f"LoRA r16 on SmolLM2-135M, CPU, dapo, beta 0.04, temperature {args.temperature}")
    for side, r in results.items():
        print(f"{side:6s} {r['samples'] / r['seconds']:6.2f} samples/s ({r['samples']} in {r['seconds']:.1f} s), "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    ratio = (results["azlib"]["samples"] / results["azlib"]["seconds"]) / (results["trl"]["samples"] / results["trl"]["seconds"])
    print(f"ratio azlib/TRL: {ratio:.2f}x (goal >= 1.3x)")


if __name__ == "__main__":
    main()
