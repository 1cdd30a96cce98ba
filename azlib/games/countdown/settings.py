"""Notebook 08's settings types (imitation, search, arms, evaluation), each default's one home; the policy's shape is
azlib.settings.GPTShape. Light (no torch), so that the notebook schema imports it."""

from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt
from pydantic.dataclasses import dataclass

from azlib.settings import SearchSettings

ARMS = ("rft", "grpo", "alphazero", "alphazero_oracle")  # the training arms, in the order they are shown


@dataclass(frozen=True)
class ImitationSettings:
    """The start: supervised on solver-written solutions, the rules' writing masked from the loss. Its size is what
    sets how good the start is (notebook 08 shows the solve rate it reaches)."""

    problems: Annotated[int, Ge(1)] = 4000  # solver solutions to imitate
    steps: Annotated[int, Ge(0)] = 600  # optimiser steps
    batch_size: Annotated[int, Ge(1)] = 64
    learning_rate: Annotated[float, Gt(0)] = 1e-3



@dataclass(frozen=True)
class ReferenceValueSettings:
    """The reference value: a net of the policy's shape trained only as a value, on the exact oracle's labels of
    states that random legal moves reach from training problems (fresh states every step)."""

    steps: Annotated[int, Ge(0)] = 300  # its gate AUC plateaus from about step 100 at 4 numbers (128 states a step)
    batch_size: Annotated[int, Ge(1)] = 128  # states per step
    learning_rate: Annotated[float, Gt(0)] = 1e-3



@dataclass(frozen=True)
class CountdownSearchSettings:
    """How the search over the model's lines reads the model: at a node, `candidates` lines are sampled (sampled
    AlphaZero, Hubert et al. 2021), or every legal line is scored, its prior the model's probability of it
    (AlphaZero's listed moves, as in Go); the node's children are the positions those lines reach."""

    # "sampled": the distinct lines among `candidates` samples (free text can only be searched this way); "listed":
    # every legal line, scored by the model in one batched forward (Countdown's moves can be listed, as Go's can).
    children: Literal["sampled", "listed"] = "sampled"
    # A node's children: one per position its lines reach (lines to the same numbers, as 3+4= and 4+3=, merged: the
    # child's prior is their summed prior, its line the first drawn or, listed, the most probable), or one per
    # distinct line (Sampled MuZero's, and AlphaZero's in Go, where moves do not commute).
    children_by: Literal["position", "line"] = "position"
    candidates: Annotated[int, Ge(1)] = 8  # K lines sampled per expanded node
    temperature: Annotated[float, Ge(0)] = 1.0  # of those samples
    # A child's prior: "sampled" (its share of the K samples: Sampled MuZero's beta-hat / beta * pi with beta = pi,
    # the unbiased choice; so at temperature 1 only) or "policy" (the model's probabilities of the distinct lines,
    # renormalised: the uncorrected prior over the sampled subset, which Sampled MuZero's correction replaces).
    prior: Literal["sampled", "policy"] = "sampled"
    simulations: Annotated[int, Ge(1)] = 16  # per move
    c: Annotated[float, Ge(0)] = 1.25  # PUCT's constant
    rule: Literal["puct", "gumbel"] = "puct"
    # Each new child valued as it is made (its first Q), or only the expanded leaf (AlphaZero's one evaluation per
    # simulation, read from the forward pass that scores the leaf's lines: no character more).
    child_values: bool = True
    # How PUCT reads an unvisited child's Q (azlib.settings.SearchSettings.q_transform): "raw" (0 where it has no
    # value of its own), "parent_value" (its parent's value: first-play urgency), "mctx".
    q_transform: Literal["raw", "parent_value", "mctx"] = "raw"
    # Sampled children only: a node samples `candidates` more lines each time its visits grow by widen_after, and
    # whenever every child it has was searched to its end, until it reaches every position (progressive widening;
    # azlib.settings.SearchSettings.widen_after). 0: a node keeps its first draw (Sampled MuZero). Not with gumbel.
    widen_after: Annotated[int, Ge(0)] = 0
    # Self-play moves to the child sampled by visit shares; later moves (and every test-time move) to the most
    # visited. 0: always the most visited. No Dirichlet noise at the root (tic-tac-toe's AlphaZero has it): self-play
    # explores by the K sampled lines and this first move; with listed children, by this move alone.
    exploratory_moves: Annotated[int, Ge(0)] = 1

    def __post_init__(self):
        # the engine's own checks of these (azlib.settings.SearchSettings: gumbel does not widen)
        SearchSettings(rule=self.rule, c=self.c, q_transform=self.q_transform, widen_after=self.widen_after)
        if self.children == "sampled" and self.prior == "sampled" and self.temperature != 1.0:
            raise ValueError(f"prior 'sampled' (a line's share of the samples) is Sampled MuZero's beta-hat / beta * pi "
                             f"only for lines sampled from the policy itself, at temperature 1, not "
                             f"{self.temperature}: use prior 'policy' at another temperature")


@dataclass(frozen=True)
class ArmSettings:
    """The training arms, each from the same start and at the same count of generated tokens per iteration."""

    iterations: Annotated[int, Ge(1)] = 10
    tokens_per_iteration: Annotated[int, Ge(1)] = 20000  # generated characters each arm spends per iteration
    problems_per_batch: Annotated[int, Ge(1)] = 32  # at most this many problems played at once (the first batch)
    group_size: Annotated[int, Ge(2)] = 8  # rft and grpo: samples per problem
    temperature: Annotated[float, Gt(0)] = 1.0  # rft and grpo: sampling temperature
    learning_rate: Annotated[float, Gt(0)] = 3e-4
    batch_size: Annotated[int, Ge(1)] = 64  # sequences per optimiser step
    epochs: Annotated[int, Ge(1)] = 1  # passes over an iteration's data
    value_weight: Annotated[float, Ge(0)] = 1.0  # of the value loss beside the policy loss (every arm trains it)



@dataclass(frozen=True)
class EvalSettings:
    problems: Annotated[int, Ge(1)] = 200  # per held-out set (seen and unseen targets)
    best_of: Annotated[int, Ge(1)] = 8  # N of best-of-N at test time
    simulations: Annotated[int, Ge(1)] = 16  # per move of the test-time search
