"""How the Countdown policy learns: the start by imitation of solver-written solutions, then one of four arms (rft,
grpo, alphazero, alphazero_oracle; `train_arm`) at equal generated characters per iteration. Not the play (play.py)."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import torch
from torch.nn import functional as F

from azlib.games.countdown.play import Episode, SearchedMove, legal_spans, play_episodes, play_searched
from azlib.games.countdown.policy import Policy, PolicyValueNet
from azlib.games.countdown.problems import draw_training, training_problems
from azlib.games.countdown.rules import MOVE_END, State, legal_lines, legal_moves, solvable, solve
from azlib.games.countdown.settings import (ARMS, ArmSettings, CountdownSearchSettings, ImitationSettings,
                                      ReferenceValueSettings)
from azlib.grpo import group_advantages
from azlib.mcts.learn import update
from azlib.mcts.rounds import run_rounds
from azlib.settings import GPTShape
from azlib.models.gpt import cosine_schedule


def solution_episode(problem: State, rng: random.Random) -> Episode:
    """The solver's solution as the text the model and the rules would write together."""
    episode = Episode.start(problem)
    for move in solve(problem, rng):
        episode.play_move(move)
    return episode


class WeightedText(NamedTuple):
    """One text in an update (a row of its batch): its characters, which the model wrote (and the legal lines where
    it wrote them), the weight of its policy term, the unit that term is averaged over, and the value targets it
    carries ((character index, outcome) at each state's text end)."""

    text: str
    written: list[bool]
    spans: list[tuple[int, list[str]]] | None
    weight: float
    unit: int
    values: tuple[tuple[int, float], ...] = ()


def episode_rows(policy: Policy, episodes: Sequence[Episode], weights: Sequence[float]) -> list[WeightedText]:
    """An episode per row, its value targets the outcome at every state it reached before it ended."""
    spans = legal_spans(policy, episodes) or [None] * len(episodes)
    return [WeightedText(e.text, e.written, span, w, i, tuple((end, float(e.solved)) for end, state in
                                                              zip(e.state_ends, e.states) if not state.finished))
            for i, (e, span, w) in enumerate(zip(episodes, spans, weights))]


class Learner:
    """A policy, its optimiser, and the one update every arm is made of: AlphaZero's joint loss, a policy term and
    `value_weight` x the value's BCE, summed and stepped together (separate steps for the value would move the shared
    trunk in the value's direction at the full rate that Adam gives every step)."""

    def __init__(self, policy: Policy, settings: ArmSettings, learning_rate: float | None = None):
        self.policy, self.settings = policy, settings
        self.optimizer = torch.optim.AdamW(policy.net.parameters(), lr=learning_rate or settings.learning_rate,
                                           weight_decay=0.0)

    def update(self, rows: Sequence[WeightedText], average: str, rng: random.Random, epochs: int = 1
               ) -> dict[str, float]:
        """-sum_rows weight x sum of the row's written log-probs, averaged per batch over `average`: "characters"
        (the written characters of the rows with weight), "sequence" (each row's mean over its characters, then over
        the rows: GRPO's grpo aggregation), or "unit" (over the distinct units: AlphaZero's moves); plus the value."""
        def loss(batch: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
            picked = [rows[b] for b in batch]
            spans = None if picked[0].spans is None else [r.spans for r in picked]
            logp, mask, value = self.policy.transcript_logprobs([r.text for r in picked], [r.written for r in picked],
                                                                spans)
            weight = torch.tensor([r.weight for r in picked], device=logp.device)
            chars = mask.sum(1).clamp(min=1)
            total = (logp * mask).sum(1)
            if average == "characters":
                policy_loss = -(weight * total).sum() / chars[weight != 0].sum().clamp(min=1)
            elif average == "sequence":
                policy_loss = -(weight * total / chars).sum() / len(picked)
            else:
                policy_loss = -(weight * total).sum() / len({r.unit for r in picked})
            targets = [(i, end, z) for i, r in enumerate(picked) for end, z in r.values]
            value_loss = F.binary_cross_entropy_with_logits(
                value[[i for i, _, _ in targets], [end for _, end, _ in targets]],
                torch.tensor([z for _, _, z in targets], device=value.device)) if targets else value.sum() * 0
            logged = {"policy_loss": policy_loss.item()} | ({"value_loss": value_loss.item()} if targets else {})
            return policy_loss + self.settings.value_weight * value_loss, logged

        logs, steps = update(loss, self.optimizer, [r.unit for r in rows], self.settings.batch_size, epochs, rng,
                             max_grad_norm=1.0)
        return {"policy_loss": math.nan, "value_loss": math.nan} | logs | {"optimizer_steps": steps}

    def rft(self, episodes: Sequence[Episode], rng: random.Random) -> dict[str, float]:
        """Expert iteration: -sum log p over the solved episodes' written characters / their count; the value on
        every episode."""
        rows = episode_rows(self.policy, episodes, [float(e.solved) for e in episodes])
        return self.update(rows, "characters", rng, self.settings.epochs)

    def grpo(self, groups: Sequence[Sequence[Episode]], rng: random.Random) -> dict[str, float]:
        """Binary reward, A = (r - mean) / (std + 1e-4) within a problem's group (azlib.grpo.group_advantages); the
        loss -A log p, averaged per sequence then over sequences (GRPO's own aggregation), one pass over the
        batches: plain policy gradient with group advantages (no ratio to clip: nothing is reused)."""
        episodes = [e for g in groups for e in g]
        rewards = torch.tensor([float(e.solved) for e in episodes])
        ids = torch.tensor([g for g, group in enumerate(groups) for _ in group])
        advantages = group_advantages(rewards, ids).tolist()
        logs = self.update(episode_rows(self.policy, episodes, advantages), "sequence", rng, self.settings.epochs)
        return logs | {"zero_advantage_share": sum(a == 0.0 for a in advantages) / max(len(advantages), 1)}

    def alphazero(self, moves: Sequence[SearchedMove], outcomes: Sequence[float], rng: random.Random
                  ) -> dict[str, float]:
        """loss = -sum_a pi(a) log p(line_a | s) + BCE(v(s), z) (AlphaZero's, with the value as a probability):
        pi the root's visit shares over the candidate lines the rules accept, z the game's outcome. A row per
        candidate line; the state's value target rides on its first. The value also learns the move's subtree
        labels (SearchedMove.labels), each a row of its own with no policy term, batched with its move."""
        rows = []
        for m, (move, z) in enumerate(zip(moves, outcomes)):
            rows += [WeightedText(text, [False] * len(text), [] if self.policy.legal_only else None, 0.0, m,
                                  ((len(text) - 1, label),)) for text, label in move.labels]
            spans = [(len(move.text), legal_lines(move.state))] if self.policy.legal_only else None
            value = ((len(move.text) - 1, z),)
            candidates = [(line, share) for line, share in zip(move.lines, move.targets) if share > 0]
            for k, (line, share) in enumerate(candidates or [("", 0.0)]):
                text = move.text + (line + MOVE_END if line else "")
                written = [False] * len(move.text) + [True] * (len(text) - len(move.text))
                rows.append(WeightedText(text, written, spans, share, m, value if k == 0 else ()))
        return self.update(rows, "unit", rng, self.settings.epochs)


def start_policy(shape_settings: GPTShape, settings: ImitationSettings, size: int, seed: int,
                 progress: Callable[[int], None] | None = None, device: str = "cpu",
                 legal_only: bool = True, evaluate: Callable[[Policy], dict] | None = None,
                 every: int = 0) -> tuple[Policy, list[dict]]:
    """A fresh net trained to imitate solver-written solutions of `settings.problems` training problems (the rules'
    characters masked from the loss); its value head is left untrained (every solution is solved). `evaluate` (if
    given) is called on the policy every `every` steps and its numbers join that step's row."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    policy = Policy(PolicyValueNet(shape_settings), device, legal_only)
    solutions = [solution_episode(p, rng) for p in training_problems(settings.problems, size, seed)]
    learner = Learner(policy, ArmSettings(batch_size=settings.batch_size, value_weight=0.0), settings.learning_rate)
    history = []
    for step in range(settings.steps):
        for group in learner.optimizer.param_groups:
            # nanoGPT's schedule, warming up over the first 5% of the steps
            group["lr"] = cosine_schedule(step, settings.steps, max(1, settings.steps // 20), settings.learning_rate)
        batch = [solutions[r] for r in rng.sample(range(len(solutions)), min(settings.batch_size, len(solutions)))]
        logs = learner.update(episode_rows(policy, batch, [1.0] * len(batch)), "characters", rng)
        history.append({"step": step + 1, "policy_loss": logs["policy_loss"]})
        if evaluate is not None and every and (step + 1) % every == 0:
            history[-1] |= evaluate(policy)
        if progress:
            progress(1)
    return policy, history


def reference_value(shape_settings: GPTShape, settings: ReferenceValueSettings, size: int, seed: int,
                    progress: Callable[[int], None] | None = None, device: str = "cpu",
                    legal_only: bool = True) -> tuple[Policy, list[dict]]:
    """A fresh net trained only as a value (no policy term), on the exact oracle's labels of the states that 0 to
    size - 2 uniformly random legal moves reach from training problems, fresh states every step: what a net of this
    shape learns of solvability from exact labels. A named reference for the self-play value; never a stand-in
    for it (no arm reads the oracle through it)."""
    torch.manual_seed(seed)
    rng = random.Random(f"reference value {seed}")
    policy = Policy(PolicyValueNet(shape_settings), device, legal_only)
    learner = Learner(policy, ArmSettings(batch_size=settings.batch_size), settings.learning_rate)
    history = []
    for step in range(settings.steps):
        rows = []
        for problem in draw_training(settings.batch_size, size, rng):
            episode = Episode.start(problem)
            for _ in range(rng.randint(0, size - 2)):
                episode.play_move(rng.choice(legal_moves(episode.state)))
            label = float(episode.state.solved if episode.state.finished else solvable(episode.state))
            rows.append(WeightedText(episode.text, [False] * len(episode.text), [] if legal_only else None, 0.0,
                                     len(rows), ((len(episode.text) - 1, label),)))
        logs = learner.update(rows, "characters", rng)
        history.append({"step": step + 1, "value_loss": logs["value_loss"]})
        if progress:
            progress(1)
    return policy, history


@dataclass
class ArmRun:
    """One arm's training from the start: its policy and a row per iteration."""

    arm: str
    policy: Policy
    history: list[dict] = field(default_factory=list)
    tokens: int = 0  # generated characters, all iterations
    value_evaluations: int = 0  # states the value head judged inside searches (forward passes)


class ProblemStream:
    """Training problems drawn in order, on demand (the same stream for every arm of a seed: the arms see the same
    problems in the same order, as far as their characters take them)."""

    def __init__(self, size: int, seed: int):
        self.size, self.rng = size, random.Random(f"stream {size} {seed}")

    def take(self, n: int) -> list[State]:
        return draw_training(n, self.size, self.rng)


def train_arm(arm: str, start: Policy, settings: ArmSettings, search: CountdownSearchSettings, stream: ProblemStream,
              seed: int, evaluate: Callable[[Policy], dict] | None = None) -> ArmRun:
    """`settings.iterations` rounds (azlib.mcts.rounds, a window of one round) of: spend `tokens_per_iteration`
    generated characters on the arm's way of playing, then update on what it played. rft imitates the solved ones of
    `group_size` samples a problem (expert iteration), grpo weighs them by group-normalised binary advantages,
    alphazero imitates the root's visit shares of its self-play search (-pi . log p) with the value head at the
    leaves, alphazero_oracle the same with the exact oracle as the leaf value. Every arm trains the value head on its
    episodes' outcomes, the AlphaZero arms also on their trees' subtree labels; only the model's characters carry
    the policy loss, the rules' never. `evaluate` (if given) is called on the policy after every round."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}: choose from {ARMS}")
    policy = Policy(copy.deepcopy(start.net), start.device, start.legal_only)
    learner = Learner(policy, settings)
    rng = random.Random(f"{arm} {seed}")
    generator = torch.Generator(device=policy.device).manual_seed(seed)
    run = ArmRun(arm, policy)

    def play() -> tuple[list, dict]:
        """rft and grpo: a group of episodes per problem; the AlphaZero arms: (searched move, game outcome) pairs."""
        examples: list = []
        spent = problems_seen = solved = 0
        while spent < settings.tokens_per_iteration:
            # a quarter batch first, then as many problems as the characters left should take (at the cost per
            # problem so far), so that every arm ends its iteration within about one problem of the same count
            left = settings.tokens_per_iteration - spent
            wanted = math.ceil(left * problems_seen / spent) if spent else settings.problems_per_batch // 4
            problems = stream.take(max(1, min(settings.problems_per_batch, wanted)))
            problems_seen += len(problems)
            if arm in ("rft", "grpo"):
                batch = play_episodes(policy, problems, settings.group_size, settings.temperature, generator)
                examples += batch
                spent += sum(e.tokens for g in batch for e in g)
                solved += sum(any(e.solved for e in g) for g in batch)
            else:
                games, tokens, evaluations = play_searched(
                    policy, problems, search, "oracle" if arm == "alphazero_oracle" else "learned", rng, explore=True,
                    generator=generator)
                spent += tokens
                run.value_evaluations += evaluations
                examples += [(move, float(game.solved)) for game in games for move in game.moves]
                solved += sum(g.solved for g in games)
        run.tokens += spent
        return examples, {"tokens": run.tokens, "problems": problems_seen,
                          "train_solved_share": solved / max(problems_seen, 1)}

    def learn(examples: list) -> dict:
        if arm == "rft":
            return learner.rft([e for g in examples for e in g], rng)
        if arm == "grpo":
            return learner.grpo(examples, rng)
        return learner.alphazero([move for move, _ in examples], [z for _, z in examples], rng)

    run.history = run_rounds(settings.iterations, play, learn,
                             measure=None if evaluate is None else lambda _: evaluate(policy))
    return run
