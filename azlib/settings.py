"""The library's settings types, the one home of their defaults, bounds, choices and help, each read by its component
(TrainerSettings gathers a training run's). Imports no azlib module, so that every layer may import it."""

from __future__ import annotations

from dataclasses import field, fields, replace
from typing import Annotated, Literal, get_args

from annotated_types import Ge, Gt, Le, Lt
from pydantic.dataclasses import dataclass

# Each type is a pydantic dataclass: its bounds and choices are declared on its fields (Annotated, Literal), and
# pydantic checks them when it is made, naming the field it refuses and why (lax mode: an int passes where a float
# is declared). azlib.lab.config checks parameters' types strictly before they get here.


# -- choices read by several components --------------------------------------------------------------------------

# An answer's reward (azlib.rewards.answer_reward): correctness (HRE of a finished answer), or "combined", the original
# system's weighted sum of HRE, discounted PRE, length penalty and direction bonus (azlib.rewards.combined_reward)
RewardKind = Literal["correctness", "combined"]
# How strictly a step `a op b = c` of an answer is checked (azlib.rewards.step_checks): its arithmetic; also its
# operands traced to the problem's numbers and earlier results; or its arithmetic and a result of the reference's
StepCheckKind = Literal["arithmetic", "traced", "reference"]


# -- sampling (every generating component) -----------------------------------------------------------------------

@dataclass(frozen=True)
class AnswerSampling:
    """How a run's answers are sampled, one setting for everything that reads it: the search's rollouts and
    chunks and the forks are drawn at `temperature` with `top_p` and end after `max_new_tokens`; the update
    takes its log-probs at the same temperature (TRL's convention: softmax(logits / T), no top-p) and dr_grpo
    divides by `max_new_tokens` (TRL's max_completion_length)."""

    temperature: Annotated[float, Gt(0)] = 1.0
    top_p: Annotated[float, Gt(0), Le(1)] = 1.0
    max_new_tokens: Annotated[int, Ge(1)] = 256


# -- the search (azlib.mcts.search) ------------------------------------------------------------------------------

@dataclass(frozen=True)
class SearchSettings:
    """Budgets and the selection rule. Defaults follow the original system (60 iterations, depth 12,
    c = 1.414); `NUM_MCTS_ITERATIONS`, `MAX_TREE_DEPTH`, `MAX_TOKENS` reach these through azlib.lab.config."""

    num_simulations: Annotated[int, Ge(1)] = 60  # leaf evaluations per root; the root's own expansion is the first
    max_depth: Annotated[int, Ge(1)] = 12  # a node this deep is terminal
    # How a node picks the child to descend into (azlib.mcts.search.RULES maps each name to its policy): "puct"
    # (puct_scores, AlphaZero), "uct" (uct_scores, the original system), "gumbel" (GumbelMuZeroPolicy, mctx's
    # gumbel_muzero_policy: one leaf per tree per step; it reads neither c, q_transform nor temperature, nor
    # skip_solved at the root).
    rule: Literal["puct", "uct", "gumbel"] = "puct"
    c: Annotated[float, Ge(0)] = 1.414  # exploration constant of puct and uct
    # How puct and uct read Q (azlib.mcts.search.Q_TRANSFORMS maps each name to its function): "raw" (q_raw;
    # AlphaZero, the original system), "parent_value" (q_by_parent_value), "mctx" (q_by_parent_and_siblings, mctx's
    # default for MuZero). The last two rescale Q to [0, 1], so that c means the same whatever the reward's scale.
    q_transform: Literal["raw", "parent_value", "mctx"] = "raw"
    max_considered_actions: Annotated[int, Ge(1)] = 16  # gumbel: root actions sampled without replacement (m; mctx's default)
    gumbel_scale: Annotated[float, Ge(0)] = 1.0  # gumbel: scale of the root's Gumbel noise; 0 searches without noise
    value_scale: Annotated[float, Gt(0)] = 0.1  # gumbel: c_scale in sigma(q) = (c_visit + max_b N(b)) * c_scale * q (mctx's default)
    maxvisit_init: Annotated[float, Ge(0)] = 50.0  # gumbel: c_visit in that sigma (mctx's default)
    dirichlet_alpha: Annotated[float, Gt(0)] = 0.3
    dirichlet_fraction: Annotated[float, Ge(0), Le(1)] = 0.0  # share of root prior replaced by Dirichlet noise (AlphaZero: 0.25); not gumbel
    temperature: Annotated[float, Ge(0)] = 1.0  # on the root visit counts: 0 = argmax, 1 = proportional
    leaves_per_step: Annotated[int, Ge(1)] = 1  # leaves collected per tree per step, kept apart by virtual loss
    virtual_loss: Annotated[float, Ge(0)] = 1.0
    max_tokens: Annotated[int, Ge(1)] | None = None  # stop once expansions generated this many tokens (all roots)
    skip_solved: bool = False  # never re-enter a solved subtree (single-agent text: nothing to gain)
    # single-agent, with an exact check of the end: a root's search stops at its first terminal of value >= 1 (an
    # answer found); the rest of its simulations are not spent
    stop_at_win: bool = False
    # Progressive widening, where the environment samples a node's children and leaves moves out (Expansion.complete
    # False): the node draws more (Environment.widen) each time its visits grow by widen_after, and whenever every
    # child it has is solved. 0: a node keeps the children of its expansion (Sampled MuZero).
    widen_after: Annotated[int, Ge(0)] = 0

    def __post_init__(self):
        if self.widen_after and self.dirichlet_fraction:
            raise ValueError("widening replaces a root's priors with the environment's, its Dirichlet noise with them: "
                             f"widen_after={self.widen_after} takes dirichlet_fraction=0")
        if self.rule == "gumbel" and self.widen_after:
            raise ValueError("rule 'gumbel' does not widen (widen_after=0): sequential halving shares its simulations "
                             "among the root actions it considered at the start")
        if self.rule == "gumbel" and (self.leaves_per_step != 1 or self.dirichlet_fraction):
            raise ValueError("rule 'gumbel' takes one leaf per tree per step (leaves_per_step=1) and explores by "
                             f"its Gumbel noise (dirichlet_fraction=0), got {self.leaves_per_step}, "
                             f"{self.dirichlet_fraction}")


# -- the search over text (azlib.games.text.env) ---------------------------------------------------------------

@dataclass(frozen=True)
class TextSearchSettings:
    """How a leaf is expanded. Defaults: 3 student rollouts per leaf; a teacher, when present, adds
    `teacher_samples` right and as many wrong chunks (the original system: 5 each, 10 tokens). How the text is
    sampled (AnswerSampling) and rewarded (RewardKind) are the env's other arguments: a training run shares
    them with its update and its forks."""

    expansion: Literal["rollout", "chunk"] = "rollout"
    student_samples: Annotated[int, Ge(1)] = 3  # rollouts (or chunks) per expanded leaf
    teacher_samples: Annotated[int, Ge(1)] = 1
    chunk_tokens: Annotated[int, Ge(1)] = 16  # "chunk" expansion, and teachers' chunks


# -- the forking tree (azlib.games.text.forking) ----------------------------------------------------------------

@dataclass(frozen=True)
class ForkSettings:
    """How a problem's tree grows after its independent answers (the G of signal "independent")."""

    rounds: Annotated[int, Ge(0)] = 1  # forking rounds; 0: the tree is G independent answers
    points: Annotated[int, Ge(1)] = 2  # fork points per problem per round
    branches: Annotated[int, Ge(1)] = 2  # continuations written from each point
    # surprise: before the tokens the student sampled with the lowest probability (EPTree forks at high-
    #   entropy tokens; a sampled token's surprisal -log p is a one-sample estimate of the entropy there);
    # line: the same, among the first tokens of lines (step boundaries of a worked answer);
    # root: fresh answers from the question: the tree's allocation (unsolved problems get more) without
    #   its shared prefixes, the ablation that tells the two apart;
    # step: at an answer's first step that fails `check` (azlib.rewards.step_checks): before its result when
    #   the arithmetic is wrong, before the equation when the numbers are the wrong ones; an answer whose steps
    #   all pass is no fork point.
    where: Literal["surprise", "line", "root", "step"] = "surprise"
    # the step check where = step forks at: arithmetic (the text alone), traced (also operands among the
    #   problem's numbers and earlier results) or reference (arithmetic, and results in the reference chain)
    check: StepCheckKind = "reference"
    # which answers' tokens are fork points: any; wrong ones; or finished ones (ended at their answer line or
    #   end of text within the cap: a cut answer's prefix tends to run to the cap again, with fewer tokens left)
    fork_from: Literal["any", "wrong", "finished"] = "any"
    # Who writes the fork continuations (round 0's answers are always the student's). student: the student
    # continues its own prefix; hint: the student given the reference solution as a hint continues the same
    # prefix (the original system's teachers proposing continuations; STaR's rationalization, Zelikman et
    # al. 2022, and RLT's teacher see the solution too); teachers: the teacher ensemble's "right" and "wrong"
    # continuations of the same prefix (the original system's proposers; their tokens count as generated).
    # Every answer is trained under the plain prompt.
    writer: Literal["student", "hint", "teachers"] = "student"


# -- the server's limits (azlib.models.serve) -------------------------------------------------------------------

def _limit(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServeLimits:
    """What one client may ask of the server, and how the model's time is shared; each field is a
    `python -m azlib serve` flag (max_n -> --max-n)."""

    max_n: Annotated[int, Ge(1)] = _limit(16, "samples per request (n)")
    max_tokens: Annotated[int, Ge(1)] = _limit(
        2048, "new tokens per sample; prompt + new tokens must also fit the model's context")
    default_tokens: Annotated[int, Ge(1)] = _limit(
        256, "new tokens when a request names none (at most max_tokens and what fits the context)")
    max_body_bytes: Annotated[int, Ge(1)] = _limit(1 << 20, "request body size; larger ones get 413 unread")
    max_concurrent: Annotated[int, Ge(1)] = _limit(32, "requests generated at once, in turns")
    max_queue: Annotated[int, Ge(1)] = _limit(
        128, "admitted requests waiting for a turn; beyond that 503 with Retry-After")
    request_timeout: Annotated[float, Gt(0)] = _limit(
        300.0, "seconds from arrival to answer, else 504 and its generation stops")
    read_timeout: Annotated[float, Gt(0)] = _limit(
        30.0, "seconds a client may pause while sending its request, else 408")
    batch_rows: Annotated[int, Ge(1)] = _limit(64, "rows (samples) generated together in one turn")
    turn_rows: Annotated[int, Ge(1)] = _limit(8, "rows a request is sure of per turn when others are waiting")
    turn_tokens: Annotated[int, Ge(1)] = _limit(32, "new tokens per row per turn: longer answers take several turns")


# -- the update (azlib.grpo) ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GRPOSettings:
    """Defaults: what the kit's runs use. TRL 1.16's loss aggregation (dapo: no length bias), the k3 KL at
    beta 0.04, DAPO's clip-higher (ratio clipped to [0.8, 1.28]), advantages clipped at 3, grad norm 1.0, lr
    5e-5 with 3 warmup steps (published LoRA-RL practice: 1e-5 to 1e-4). The original system's choices, one
    field away: beta 0.1, lr 2e-4, adamw_8bit (the h100-original profile sets them)."""

    # reward_weighted: the original system's reward-weighted log-likelihood (azlib.grpo.token_losses)
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "reward_weighted"] = "dapo"
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


# -- LoRA (azlib.models.student) --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoraSettings:
    """Defaults: r 16, alpha 32 (TRL's and PEFT's common choice; the original system: r 32), dropout 0.05,
    every linear layer."""

    r: Annotated[int, Ge(1)] = 16
    alpha: Annotated[int, Ge(1)] = 32
    dropout: Annotated[float, Ge(0), Lt(1)] = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"


# -- the training loop (azlib.training) ---------------------------------------------------------------------------

# The training signals a run can take (azlib.games.text.signals builds them), each with the explorer that grows its
# trees (azlib.games.text.explorers): "tree", the MCTS search over text, or "fork", forking trees ("independent": G
# independent answers per problem, a forking tree with no forks)
EXPLORER_OF = {"answers": "tree", "paths": "tree", "siblings": "tree", "visits": "tree",
               "independent": "fork", "forked": "fork", "treerl": "fork"}
SignalKind = Literal[tuple(EXPLORER_OF)]
SIGNAL_KINDS = get_args(SignalKind)


@dataclass(frozen=True)
class TrainSettings:
    """The loop: its training signal and update, its length, and how every answer of the run is sampled."""

    signal: SignalKind = "answers"  # the training signal the run's explorer makes (azlib.games.text.signals)
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
    # G: independent answers per problem, a forking tree's round 0 ("independent": all of it); one has no advantage
    group_size: Annotated[int, Ge(2)] = 8
    max_new_tokens: Annotated[int, Ge(1)] = 128  # answer length: sampled answers and search rollouts
    temperature: Annotated[float, Gt(0)] = 0.7  # of answers, rollouts and chunks; GRPO's log-probs are taken at it
    token_budget: Annotated[int, Ge(1)] | None = None  # stop once this many tokens were generated (equal budgets)
    reference_refresh: Annotated[int, Ge(1)] = 50  # steps between reference snapshots (reference="snapshot")
    seed: int = 0


# A training run's search: a solved subtree is not entered again, and an unvisited child is valued at its parent
# (SearchSettings' own defaults, raw Q and no skipping, are the game searches').
TRAINING_SEARCH = SearchSettings(skip_solved=True, q_transform="parent_value")


@dataclass(frozen=True)
class TrainerSettings:
    """Every setting of a training run (azlib.training.Trainer), one section per component, none written into
    another. How the run samples its answers is `train`'s (see `sampling`), and its reward is `train.reward`."""

    train: TrainSettings = TrainSettings()
    search: SearchSettings = TRAINING_SEARCH
    text: TextSearchSettings = TextSearchSettings()
    fork: ForkSettings = ForkSettings()  # signals "forked" and "treerl" ("independent": the same with no forks)
    grpo: GRPOSettings = GRPOSettings()
    lora: LoraSettings = LoraSettings()

    @property
    def sampling(self) -> AnswerSampling:
        """The run's answers, as the search, the forks and the update all read them: train's temperature, no
        top-p (the update's log-probs are of softmax(logits / T) alone), and train's answer length; the
        original system's chunked search ends an answer at depth x chunk instead."""
        t = self.train
        chunked = self.text.expansion == "chunk" and EXPLORER_OF[t.signal] == "tree"
        length = self.text.chunk_tokens * self.search.max_depth if chunked else t.max_new_tokens
        return AnswerSampling(temperature=t.temperature, top_p=1.0, max_new_tokens=length)


def asks_teachers(signal: str, writer: str) -> bool:
    """Whether a run of this signal asks its teachers: the MCTS search over text and forks written by teachers
    do, and the student then scores the text they write (its prior and perplexity of it)."""
    return EXPLORER_OF[signal] == "tree" or writer == "teachers"


# -- notebook 05's arms (azlib.lab.tree_vs_sampling) ------------------------------------------------------------------------

# What each arm searches or samples, and how it updates: a key that names a ForkSettings field sets the fork
# section, the rest the train section. Every arm but "trl" runs azlib's Trainer.
ARMS = {
    "tree": {"signal": "forked", "update": "sft"},  # forking tree, imitation of its verified answers
    "tree_grpo": {"signal": "treerl", "update": "grpo"},  # forking tree, TreeRL's per-token advantages
    "resample": {"signal": "forked", "update": "sft", "where": "root"},  # the tree's allocation, no prefixes
    # the forking tree whose forks the hint teacher (the student reading the reference solution) writes
    "tree_hint": {"signal": "forked", "update": "sft", "writer": "hint"},
    # STaR's rationalization, no tree: the hint teacher writes whole answers to the problems not all solved
    "rationalize": {"signal": "forked", "update": "sft", "where": "root", "writer": "hint"},
    # the forking tree whose forks the teacher ensemble writes ("right" and "wrong" continuations of the
    # student's prefix: the original system's teachers; needs teachers, the only arm besides mcts given them)
    "tree_teachers": {"signal": "forked", "update": "sft", "writer": "teachers"},
    # PUCT over first lines with rollouts: the signal the run's train.signal names where it is one of the search
    # over text's ("answers", "paths", "siblings", "visits"; arm_settings), else "answers"; the run's update
    "mcts": {"signal": "answers"},
    "rft": {"signal": "independent", "update": "sft"},  # rejection-sampling fine-tuning: expert iteration, no tree
    "grpo": {"signal": "independent", "update": "grpo"},  # plain GRPO
    "trl": {},  # TRL's GRPOTrainer
}


def arm_settings(arm: str, fork: ForkSettings, signal: str | None = None) -> tuple[ForkSettings, dict]:
    """An arm's fork section (the run's, with the fields the arm names) and its changes to the train section.
    `signal` is the run's train.signal: the mcts arm keeps it where it is a signal of the search over text."""
    spec = dict(ARMS[arm])
    if arm == "mcts" and signal is not None and EXPLORER_OF[signal] == "tree":
        spec["signal"] = signal
    named = {f.name: spec.pop(f.name) for f in fields(ForkSettings) if f.name in spec}
    return replace(fork, **named), spec


def arm_asks_teachers(arm: str, fork: ForkSettings, signal: str) -> bool:
    """Whether the arm asks the run's teachers, given the run's fork section and train.signal."""
    arm_fork, train = arm_settings(arm, fork, signal)
    return asks_teachers(train.get("signal", signal), arm_fork.writer)


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

    @property
    def sampling(self) -> AnswerSampling:
        """The explanations' sampling, which the teacher's update reads: log-probs at their temperature, dr_grpo's
        normaliser their length cap."""
        return AnswerSampling(temperature=self.temperature, top_p=1.0, max_new_tokens=self.max_explanation_tokens)


# -- AlphaZero on tic-tac-toe (azlib.games.tictactoe_alphazero) ------------------------------------------------

@dataclass(frozen=True)
class AlphaZeroSettings:
    """The loop's knobs. Defaults: AlphaZero's recipe at tic-tac-toe scale (OpenSpiel's and
    alpha-zero-general's examples), with random openings, until the search plays minimax's moves
    everywhere (see the benchmark)."""

    iterations: Annotated[int, Ge(1)] = 30
    games_per_iteration: Annotated[int, Ge(1)] = 100
    simulations: Annotated[int, Ge(2)] = 64  # per move, in self-play, arena and grade
    c: Annotated[float, Ge(0)] = 1.414  # PUCT's exploration constant
    exploratory_moves: Annotated[int, Ge(0)] = 9  # moves sampled from the visit shares, then argmax; 9: every move
    # Each self-play game opens with k uniformly random moves, k drawn from 0..random_opening (a move must be left to
    # play); they are neither searched nor trained on. From the empty board alone, self-play rarely reaches a won
    # position (it needs a blunder first), so the net never learns its forks and the search, led by the net's
    # priors, lets some won games go as draws. 0: every game from the empty board.
    random_opening: Annotated[int, Ge(0), Le(8)] = 6
    dirichlet_alpha: Annotated[float, Gt(0)] = 1.0  # about 10 / legal moves, as AlphaZero's 0.3 for chess's ~35
    dirichlet_fraction: Annotated[float, Ge(0), Le(1)] = 0.25  # share of the root prior replaced by noise, root only
    replay_iterations: Annotated[int, Ge(1)] = 20  # train on the games of this many latest rounds
    symmetries: bool = True  # train on each position's 8 rotations and reflections
    epochs: Annotated[int, Ge(1)] = 2  # passes over the replay buffer per round
    batch_size: Annotated[int, Ge(1)] = 256
    learning_rate: Annotated[float, Gt(0)] = 2e-3
    weight_decay: Annotated[float, Ge(0)] = 1e-4  # AlphaZero's L2 term, through AdamW
    arena_games: Annotated[int, Ge(0)] = 20  # trained net vs best net before it replaces it; 0: always replace


# -- the referee's models, reward and loop (azlib.referee) --------------------------------------------------------

@dataclass(frozen=True)
class GPTShape:
    """A GPT's shape, nanoGPT's names, without its vocabulary: what a notebook sets (07's `model` and
    `small_referee`) before the corpus that fixes the vocabulary is read. `gpt(vocab_size)` is the network."""

    block_size: Annotated[int, Ge(8)] = 128  # context length in tokens
    n_layer: Annotated[int, Ge(1)] = 4  # transformer blocks
    n_head: Annotated[int, Ge(1)] = 4  # attention heads of each block
    n_embd: Annotated[int, Ge(8)] = 128  # width, a multiple of n_head

    def __post_init__(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    def gpt(self, vocab_size: int) -> GPTSettings:
        """The network of this shape over `vocab_size` tokens (its own checks)."""
        return GPTSettings(vocab_size=vocab_size, **{f.name: getattr(self, f.name) for f in fields(GPTShape)})


@dataclass(frozen=True, kw_only=True)
class GPTSettings(GPTShape):
    """The network: a shape (its defaults and bounds are GPTShape's) over a vocabulary."""

    vocab_size: Annotated[int, Ge(1)]  # tokens (characters here), from the corpus
    dropout: Annotated[float, Ge(0), Lt(1)] = 0.0  # 0 keeps single-process and DDP runs bit-comparable


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


@dataclass(frozen=True)
class RefereeTrainSettings:
    """The loop, every arm alike. Defaults: notebook 07's quick run."""

    steps: Annotated[int, Ge(1)] = 110  # optimiser steps, the same for every arm (so the same tokens)
    batch_size: Annotated[int, Ge(1)] = 16  # global: sequences per optimiser step, split over the processes
    learning_rate: Annotated[float, Gt(0)] = 2e-3  # AdamW's peak: linear warmup, then cosine decay to 10%
    warmup_steps: Annotated[int, Ge(0)] = 20
    weight_decay: Annotated[float, Ge(0)] = 0.1
    grad_clip: Annotated[float, Gt(0)] = 1.0  # global gradient-norm clip of every arm
    eval_every: Annotated[int, Ge(1)] = 20  # steps between validation evaluations
    eval_batches: Annotated[int, Ge(1)] = 4  # fixed held-out windows per evaluation, in batches
    eval_batch_size: Annotated[int, Ge(1)] = 32
    seed: Annotated[int, Ge(0)] = 0
