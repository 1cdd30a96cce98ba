"""The settings types of the components whose code runs torch (the GRPO update, LoRA, the training loop, RLT's
teacher, the referee models and their loop, notebook 05's arms), with the plain rules read off them: the one home of
their defaults, bounds and help. Light on purpose (no torch, no transformers), so that azlib.config imports it."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Annotated, Literal, get_args

from annotated_types import Ge, Gt, Le, Lt

from azlib.fields import check_fields
from azlib.textsearch.forking import ForkSettings
from azlib.mcts.search import SearchSettings
from azlib.models.generation import AnswerSampling
from azlib.rewards import RewardKind

# Each type's bounds and choices are declared on its fields (Annotated, Literal) and checked by check_fields.

# -- the update (azlib.grpo) ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GRPOSettings:
    """Defaults: what the kit's runs use. TRL 1.16's loss aggregation (dapo: no length bias), the k3 KL at
    beta 0.04, DAPO's clip-higher (ratio clipped to [0.8, 1.28]), advantages clipped at 3, grad norm 1.0, lr
    5e-5 with 3 warmup steps (published LoRA-RL practice: 1e-5 to 1e-4). The original system's choices, one
    field away: beta 0.1, lr 2e-4, adamw_8bit (the h100-original profile sets them)."""

    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "original"] = "dapo"
    beta: Annotated[float, Ge(0)] = 0.04  # weight of the k3 KL to the reference policy
    kl_ratio_correction: bool = True  # multiply k3 by the (differentiable) ratio, as TRL 1.16 does
    epsilon_low: Annotated[float, Gt(0)] = 0.2
    epsilon_high: Annotated[float, Gt(0)] = 0.28  # DAPO's clip-higher; 0.2: PPO's symmetric clip
    scale_rewards: Literal["group", "batch", "none"] = "group"  # std used to divide advantages
    clip_advantages: Annotated[float, Gt(0)] | None = 3.0
    drop_equal_groups: bool = False  # DAPO: a group whose rewards are all equal teaches nothing
    learning_rate: Annotated[float, Gt(0)] = 5e-5
    warmup_steps: Annotated[int, Ge(0)] = 3  # linear warmup of the learning rate over the first optimiser steps
    weight_decay: Annotated[float, Ge(0)] = 0.0
    max_grad_norm: Annotated[float, Gt(0)] = 1.0
    micro_batch_size: Annotated[int, Ge(1)] = 8  # sequences per forward/backward (gradient accumulation in a step)
    num_iterations: Annotated[int, Ge(1)] = 1  # policy updates per batch (>1 makes the ratio and its clip matter)
    optimizer: Literal["adamw", "adamw_8bit"] = "adamw"

    def __post_init__(self):
        check_fields(self)


# -- LoRA (azlib.models.student) --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoraSettings:
    """Defaults: r 16, alpha 32 (TRL's and PEFT's common choice; the original system: r 32), dropout 0.05,
    every linear layer."""

    r: Annotated[int, Ge(1)] = 16
    alpha: Annotated[int, Ge(1)] = 32
    dropout: Annotated[float, Ge(0), Lt(1)] = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self):
        check_fields(self)


# -- the training loop (azlib.training) ---------------------------------------------------------------------------

# The training signals a run can take (azlib.textsearch.signals builds them), each with the explorer that grows its
# trees (azlib.textsearch.explorers): "tree", the MCTS search over text, or "fork", forking trees (sampling: no forks)
EXPLORER_OF = {"answers": "tree", "paths": "tree", "siblings": "tree", "visits": "tree",
               "sampling": "fork", "forked": "fork", "treerl": "fork"}
GroupKind = Literal["answers", "paths", "siblings", "visits", "sampling", "forked", "treerl"]
GROUP_KINDS = get_args(GroupKind)


@dataclass(frozen=True)
class TrainSettings:
    """The loop: its training signal and update, its length, and how every answer of the run is sampled."""

    groups: GroupKind = "answers"
    # sft: imitate the verified completions (expert iteration; what learns fastest on the embedded model),
    # or grpo: the policy-gradient update (the original system's)
    update: Literal["grpo", "sft"] = "sft"
    # sft: imitate the last `replay_size` verified answers found so far each step (AlphaZero's replay
    # buffer: a finding is learned from more than once); 0 imitates only the step's own.
    replay_size: Annotated[int, Ge(0)] = 256
    reward: RewardKind = "correctness"  # of every answer: sampled or written by the search
    steps: Annotated[int, Ge(1)] = 10
    problems_per_step: Annotated[int, Ge(1)] = 2
    checkpoint_every: Annotated[int, Ge(1)] = 1  # steps; every step by default, so a kill loses no finished step
    # G: independent answers per problem, a forking tree's round 0 ("sampling": all of it); one has no advantage
    group_size: Annotated[int, Ge(2)] = 8
    max_new_tokens: Annotated[int, Ge(1)] = 128  # answer length: sampled answers and search rollouts
    temperature: Annotated[float, Gt(0)] = 0.7  # of answers, rollouts and chunks; GRPO's log-probs are taken at it
    token_budget: Annotated[int, Ge(1)] | None = None  # stop once this many tokens were generated (equal budgets)
    reference_refresh: Annotated[int, Ge(1)] = 50  # steps between reference snapshots (reference="snapshot")
    seed: int = 0

    def __post_init__(self):
        check_fields(self)


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
    # PUCT over first lines with rollouts: the signal the run's train.groups names where it is one of the search
    # over text's ("answers", "paths", "siblings", "visits"; arm_settings), else "answers"; the run's update
    "mcts": {"groups": "answers"},
    "rft": {"groups": "sampling", "update": "sft"},  # rejection-sampling fine-tuning: expert iteration, no tree
    "grpo": {"groups": "sampling", "update": "grpo"},  # plain GRPO
    "trl": {},  # TRL's GRPOTrainer
}


def arm_settings(arm: str, fork: ForkSettings, groups: str | None = None) -> tuple[ForkSettings, dict]:
    """An arm's fork section (the run's, with the fields the arm names) and its changes to the train section.
    `groups` is the run's train.groups: the mcts arm keeps it where it is a signal of the search over text."""
    spec = dict(ARMS[arm])
    if arm == "mcts" and groups is not None and EXPLORER_OF[groups] == "tree":
        spec["groups"] = groups
    named = {f.name: spec.pop(f.name) for f in fields(ForkSettings) if f.name in spec}
    return replace(fork, **named), spec


def arm_asks_teachers(arm: str, fork: ForkSettings, groups: str) -> bool:
    """Whether the arm asks the run's teachers, given the run's fork section and train.groups."""
    arm_fork, train = arm_settings(arm, fork, groups)
    return asks_teachers(train.get("groups", groups), arm_fork.writer)


# -- RLT's teacher (azlib.rlt) ------------------------------------------------------------------------------------

ALPHA, LAMBDA = 0.01, 3.0  # the paper's published values


@dataclass(frozen=True)
class RLTSettings:
    """The published setting is alpha 0.01, lambda 3, G = 64 explanations per question, temperature 0.7."""

    alpha: Annotated[float, Ge(0)] = ALPHA
    kl_weight: Annotated[float, Ge(0)] = LAMBDA  # lambda
    group_size: Annotated[int, Ge(2)] = 8  # G: explanations per question
    problems_per_step: Annotated[int, Ge(1)] = 4
    max_explanation_tokens: Annotated[int, Ge(1)] = 64
    temperature: Annotated[float, Gt(0)] = 0.7

    def __post_init__(self):
        check_fields(self)

    @property
    def sampling(self) -> AnswerSampling:
        """The explanations' sampling, which the teacher's update reads: log-probs at their temperature, dr_grpo's
        normaliser their length cap."""
        return AnswerSampling(temperature=self.temperature, top_p=1.0, max_new_tokens=self.max_explanation_tokens)


# -- the referee's models, reward and loop (azlib.referee) --------------------------------------------------------

@dataclass(frozen=True)
class GPTSettings:
    """The network's shape, nanoGPT's names."""

    vocab_size: Annotated[int, Ge(1)]  # tokens (characters here), from the corpus
    block_size: Annotated[int, Ge(8)] = 128  # context length in tokens
    n_layer: Annotated[int, Ge(1)] = 4  # transformer blocks
    n_head: Annotated[int, Ge(1)] = 4  # attention heads of each block
    n_embd: Annotated[int, Ge(8)] = 128  # width, a multiple of n_head
    dropout: Annotated[float, Ge(0), Lt(1)] = 0.0  # 0 keeps single-process and DDP runs bit-comparable

    def __post_init__(self):
        check_fields(self)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


@dataclass(frozen=True)
class RefereeRLSettings:
    """Knobs of the referee reward, avataRL's defaults (compute_avatarl_loss)."""

    # candidates from the student and as many from the referee, plus the ground truth; at most 64 per model and
    # position (a character vocabulary has under 100 entries)
    top_k: Annotated[int, Ge(1), Le(64)] = 16
    reality_weight: Annotated[float, Ge(0)] = 0.7  # alpha: exponent of the reality term
    referee_weight: Annotated[float, Ge(0)] = 0.3  # beta: exponent of the referee term (0: ground truth only)
    # reality puts 1 - smoothing on the ground truth, the rest spread over the others
    smoothing: Annotated[float, Gt(0), Lt(1)] = 0.1
    # r = scale * q before the clamp (avataRL; with the clamp it only sets the shape)
    reward_scale: Annotated[float, Gt(0)] = 100.0
    reward_clamp: Annotated[float, Gt(0)] = 1.5  # the largest reward at a position; larger ones scaled down
    advantage: Literal["reward", "group"] = "reward"  # A = r (avataRL), or A = r - mean over the candidates

    def __post_init__(self):
        check_fields(self)


@dataclass(frozen=True)
class RefereeTrainSettings:
    """The loop, every arm alike. Defaults: notebook 07's quick run."""

    steps: Annotated[int, Ge(1)] = 150  # optimiser steps, the same for every arm (so the same tokens)
    batch_size: Annotated[int, Ge(1)] = 16  # global: sequences per optimiser step, split over the processes
    learning_rate: Annotated[float, Gt(0)] = 2e-3  # AdamW's peak: linear warmup, then cosine decay to 10%
    warmup_steps: Annotated[int, Ge(0)] = 20
    weight_decay: Annotated[float, Ge(0)] = 0.1
    grad_clip: Annotated[float, Gt(0)] = 1.0  # global gradient-norm clip of every arm
    eval_every: Annotated[int, Ge(1)] = 20  # steps between validation evaluations
    eval_batches: Annotated[int, Ge(1)] = 4  # fixed held-out windows per evaluation, in batches
    eval_batch_size: Annotated[int, Ge(1)] = 32
    seed: Annotated[int, Ge(0)] = 0

    def __post_init__(self):
        check_fields(self)


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
