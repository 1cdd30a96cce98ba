"""The settings types of the components whose code runs torch (the GRPO update, LoRA, the training loop, RLT's
teacher, the referee models and their loop, notebook 05's arms), with the plain rules read off them: the one home of
their defaults, bounds and help. Light on purpose (no torch, no transformers), so that azlib.config imports it."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from azlib.textsearch.forking import ForkSettings
from azlib.mcts.search import SearchSettings
from azlib.models.generation import AnswerSampling
from azlib.rewards import REWARD_KINDS, RewardKind

# -- the update (azlib.grpo) ------------------------------------------------------------------------------------

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "original")


@dataclass(frozen=True)
class GRPOSettings:
    """Defaults: what the kit's runs use. TRL 1.16's loss aggregation (dapo: no length bias), the k3 KL at
    beta 0.04, DAPO's clip-higher (ratio clipped to [0.8, 1.28]), advantages clipped at 3, grad norm 1.0, lr
    5e-5 with 3 warmup steps (published LoRA-RL practice: 1e-5 to 1e-4). The original system's choices, one
    field away: beta 0.1, lr 2e-4, adamw_8bit (the h100-original profile sets them)."""

    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "original"] = "dapo"
    beta: float = 0.04  # weight of the k3 KL to the reference policy
    kl_ratio_correction: bool = True  # multiply k3 by the (differentiable) ratio, as TRL 1.16 does
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28  # DAPO's clip-higher; 0.2: PPO's symmetric clip
    scale_rewards: Literal["group", "batch", "none"] = "group"  # std used to divide advantages
    clip_advantages: float | None = 3.0
    drop_equal_groups: bool = False  # DAPO: a group whose rewards are all equal teaches nothing
    learning_rate: float = 5e-5
    warmup_steps: int = 3  # linear warmup of the learning rate over the first optimiser steps
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 8  # sequences per forward/backward (gradient accumulation inside a step)
    num_iterations: int = 1  # policy updates per batch (>1 makes the ratio and its clip matter)
    optimizer: Literal["adamw", "adamw_8bit"] = "adamw"

    def __post_init__(self):
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}")
        if min(self.epsilon_low, self.epsilon_high) <= 0 or self.beta < 0 or self.learning_rate <= 0:
            raise ValueError("epsilon_low and epsilon_high must be > 0, beta >= 0, learning_rate > 0")
        if self.warmup_steps < 0 or self.micro_batch_size < 1 or self.num_iterations < 1:
            raise ValueError(f"need warmup_steps >= 0, micro_batch_size >= 1 and num_iterations >= 1, got "
                             f"{self.warmup_steps}, {self.micro_batch_size}, {self.num_iterations}")
        if (self.clip_advantages is not None and self.clip_advantages <= 0) or self.max_grad_norm <= 0 \
                or self.weight_decay < 0:
            raise ValueError("need clip_advantages > 0 (or None), max_grad_norm > 0 and weight_decay >= 0")


# -- LoRA (azlib.models.student) --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoraSettings:
    """Defaults: r 16, alpha 32 (TRL's and PEFT's common choice; the original system: r 32), dropout 0.05,
    every linear layer."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self):
        if self.r < 1 or self.alpha < 1 or not 0 <= self.dropout < 1:
            raise ValueError(f"need r >= 1, alpha >= 1 and 0 <= dropout < 1, got {self.r}, {self.alpha}, {self.dropout}")


# -- the training loop (azlib.training) ---------------------------------------------------------------------------

# The training signals a run can take (azlib.textsearch.signals builds them), each with the explorer that grows its
# trees (azlib.textsearch.explorers): "tree", the MCTS search over text, or "fork", forking trees (sampling: no forks)
EXPLORER_OF = {"answers": "tree", "paths": "tree", "siblings": "tree", "visits": "tree",
               "sampling": "fork", "forked": "fork", "treerl": "fork"}
GROUP_KINDS = tuple(EXPLORER_OF)
GroupKind = Literal["answers", "paths", "siblings", "visits", "sampling", "forked", "treerl"]


@dataclass(frozen=True)
class TrainSettings:
    """The loop: its training signal and update, its length, and how every answer of the run is sampled."""

    groups: GroupKind = "answers"
    # sft: imitate the verified completions (expert iteration; what learns fastest on the embedded model),
    # or grpo: the policy-gradient update (the original system's)
    update: Literal["grpo", "sft"] = "sft"
    # sft: imitate the last `replay_size` verified answers found so far each step (AlphaZero's replay
    # buffer: a finding is learned from more than once); 0 imitates only the step's own.
    replay_size: int = 256
    reward: RewardKind = "correctness"  # of every answer: sampled or written by the search
    steps: int = 10
    problems_per_step: int = 2
    checkpoint_every: int = 1  # steps; every step by default, so a kill loses no finished step
    group_size: int = 8  # samples per problem for "sampling" groups
    max_new_tokens: int = 128  # answer length: sampled answers and search rollouts
    temperature: float = 0.7  # of answers, rollouts and chunks; GRPO's log-probs are taken at it
    token_budget: int | None = None  # stop once this many tokens were generated (equal-budget comparisons)
    reference_refresh: int = 50  # steps between reference snapshots (reference="snapshot")
    seed: int = 0

    def __post_init__(self):
        if self.groups not in GROUP_KINDS:
            raise ValueError(f"groups must be one of {GROUP_KINDS}, got {self.groups!r}")
        if self.update not in ("grpo", "sft") or self.reward not in REWARD_KINDS:
            raise ValueError(f"update must be 'grpo' or 'sft' and reward one of {REWARD_KINDS}, "
                             f"got {self.update!r}, {self.reward!r}")
        if self.replay_size < 0 or min(self.steps, self.problems_per_step, self.checkpoint_every) < 1:
            raise ValueError("steps, problems_per_step and checkpoint_every must be >= 1, replay_size >= 0")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group of one has no advantage), got {self.group_size}")
        if self.max_new_tokens < 1 or self.reference_refresh < 1 or self.temperature <= 0:
            raise ValueError(f"need max_new_tokens >= 1, reference_refresh >= 1 and temperature > 0, got "
                             f"{self.max_new_tokens}, {self.reference_refresh}, {self.temperature}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"token_budget must be >= 1 (or None), got {self.token_budget}")


# A training run's search: a solved subtree is not entered again, and an unvisited child is valued at its parent
# (SearchSettings' own defaults, raw Q and no skipping, are the game searches').
TRAINING_SEARCH = SearchSettings(skip_solved=True, q_transform="parent_value")


def asks_teachers(groups: str, writer: str) -> bool:
    """Whether a run with these signals asks its teachers: the MCTS search over text and forks written by teachers
    do, and the student then scores the text they write (its prior and perplexity of it)."""
    return EXPLORER_OF[groups] == "tree" or writer == "teachers"


# -- notebook 05's arms (azlib.experiment) ------------------------------------------------------------------------

# What each arm searches or samples, and how it updates: a key that names a ForkSettings field sets the fork
# section, the rest the train section. Every arm but "trl" runs azlib's Trainer.
ARMS = {
    "tree": {"groups": "forked", "update": "sft"},  # forking tree, imitation of its verified answers
    "tree_grpo": {"groups": "treerl", "update": "grpo"},  # forking tree, TreeRL's per-token advantages
    "resample": {"groups": "forked", "update": "sft", "where": "root"},  # the tree's allocation, no prefixes
    # the forking tree whose forks the hint teacher (the student reading the reference solution) writes
    "tree_hint": {"groups": "forked", "update": "sft", "writer": "hint"},
    # STaR's rationalization, no tree: the hint teacher writes whole answers to the problems not all solved
    "rationalize": {"groups": "forked", "update": "sft", "where": "root", "writer": "hint"},
    # the forking tree whose forks the teacher ensemble writes ("right" and "wrong" continuations of the
    # student's prefix: the original system's teachers; needs teachers, the only arm besides mcts given them)
    "tree_teachers": {"groups": "forked", "update": "sft", "writer": "teachers"},
    "mcts": {"groups": "answers"},  # PUCT over first lines with rollouts (the update of the params)
    "rft": {"groups": "sampling", "update": "sft"},  # rejection-sampling fine-tuning: expert iteration, no tree
    "grpo": {"groups": "sampling", "update": "grpo"},  # plain GRPO
    "trl": {},  # TRL's GRPOTrainer
}


def arm_settings(arm: str, fork: ForkSettings) -> tuple[ForkSettings, dict]:
    """An arm's fork section (the run's, with the fields the arm names) and its changes to the train section."""
    spec = dict(ARMS[arm])
    named = {f.name: spec.pop(f.name) for f in fields(ForkSettings) if f.name in spec}
    return replace(fork, **named), spec


def arm_asks_teachers(arm: str, fork: ForkSettings, groups: str) -> bool:
    """Whether the arm asks the run's teachers, given the run's fork section and train.groups."""
    arm_fork, train = arm_settings(arm, fork)
    return asks_teachers(train.get("groups", groups), arm_fork.writer)


# -- RLT's teacher (azlib.rlt) ------------------------------------------------------------------------------------

ALPHA, LAMBDA = 0.01, 3.0  # the paper's published values



@dataclass(frozen=True)
class RLTSettings:
    """The published setting is alpha 0.01, lambda 3, G = 64 explanations per question, temperature 0.7."""

    alpha: float = ALPHA
    kl_weight: float = LAMBDA  # lambda
    group_size: int = 8  # G: explanations per question
    problems_per_step: int = 4
    max_explanation_tokens: int = 64
    temperature: float = 0.7

    def __post_init__(self):
        if self.alpha < 0 or self.kl_weight < 0 or self.temperature <= 0:
            raise ValueError("need alpha >= 0, kl_weight >= 0 and temperature > 0")
        if self.group_size < 2 or self.problems_per_step < 1 or self.max_explanation_tokens < 1:
            raise ValueError("need group_size >= 2 (a group), problems_per_step >= 1 and max_explanation_tokens >= 1")

    @property
    def sampling(self) -> AnswerSampling:
        """The explanations' sampling, which the teacher's update reads: log-probs at their temperature, dr_grpo's
        normaliser their length cap."""
        return AnswerSampling(temperature=self.temperature, top_p=1.0, max_new_tokens=self.max_explanation_tokens)


# -- the referee's models, reward and loop (azlib.referee) --------------------------------------------------------

@dataclass(frozen=True)
class GPTSettings:
    """The network's shape, nanoGPT's names."""

    vocab_size: int  # tokens (characters here), from the corpus
    block_size: int = 128  # context length in tokens, >= 8
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads of each block
    n_embd: int = 128  # width, >= 8 and a multiple of n_head
    dropout: float = 0.0  # in [0, 1); 0 keeps single-process and DDP runs bit-comparable

    def __post_init__(self):
        for name, low in (("vocab_size", 1), ("block_size", 8), ("n_layer", 1), ("n_head", 1), ("n_embd", 8)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


MAX_TOP_K = 64  # candidates per model and position at most: a character vocabulary has under 100 entries


@dataclass(frozen=True)
class RefereeRLSettings:
    """Knobs of the referee reward, avataRL's defaults (compute_avatarl_loss)."""

    top_k: int = 16  # candidates from the student and as many from the referee, plus the ground truth
    reality_weight: float = 0.7  # alpha: exponent of the reality term
    referee_weight: float = 0.3  # beta: exponent of the referee term (0: ground truth only, no referee)
    smoothing: float = 0.1  # reality puts 1 - smoothing on the ground truth, the rest spread over the others
    reward_scale: float = 100.0  # r = scale * q before the clamp (avataRL; with the clamp it only sets the shape)
    reward_clamp: float = 1.5  # the largest reward at a position; larger ones are scaled down proportionally
    advantage: Literal["reward", "group"] = "reward"  # A = r (avataRL), or A = r - mean over the candidates

    def __post_init__(self):
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be within 1..{MAX_TOP_K} candidates per model, got {self.top_k}")
        for name in ("reality_weight", "referee_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("reward_scale", "reward_clamp"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.smoothing < 1:
            raise ValueError(f"smoothing must be in (0, 1), got {self.smoothing}")
        if self.advantage not in ("reward", "group"):
            raise ValueError(f"advantage must be 'reward' or 'group', got {self.advantage!r}")


@dataclass(frozen=True)
class RefereeTrainSettings:
    """The loop, every arm alike. Defaults: notebook 07's quick run."""

    steps: int = 150  # optimiser steps, the same for every arm (so the same tokens)
    batch_size: int = 16  # global: sequences per optimiser step, split over the processes
    learning_rate: float = 2e-3  # AdamW's peak: linear warmup, then cosine decay to 10%
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # global gradient-norm clip of every arm
    eval_every: int = 20  # steps between validation evaluations
    eval_batches: int = 4  # fixed held-out windows per evaluation, in batches
    eval_batch_size: int = 32
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every", "eval_batches", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "weight_decay", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("learning_rate", "grad_clip"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def settings_from_params(params, vocab_size: int) -> tuple[GPTSettings, GPTSettings, RefereeRLSettings,
                                                           RefereeTrainSettings]:
    """Notebook 07's flat parameters (any object with RefereeRLParams' fields; nothing here imports the schema)
    as the settings they name, each checking its own bounds: the main models' shape, the small referee's, the
    reward, the loop."""
    def built(what: str, settings: type, *values):
        try:
            return settings(*values)
        except ValueError as err:
            raise ValueError(f"{what}: {err}") from None

    main = built("the main models", GPTSettings, vocab_size, params.block_size, params.n_layer, params.n_head,
                 params.n_embd)
    small = built("the ablation's referee (referee_n_*)", GPTSettings, vocab_size, params.block_size,
                  params.referee_n_layer, params.referee_n_head, params.referee_n_embd)
    rl = built("the reward", RefereeRLSettings, params.top_k, params.reality_weight, params.referee_weight,
               params.smoothing, params.reward_scale, params.reward_clamp, params.advantage)
    cfg = built("the loop", RefereeTrainSettings, params.steps, params.batch_size, params.learning_rate,
                params.warmup_steps, params.weight_decay, params.grad_clip, params.eval_every, params.eval_batches,
                params.eval_batch_size, params.seed)
    return main, small, rl, cfg
