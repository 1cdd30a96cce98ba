"""The ensemble's weight rule: which teachers a node asks, each teacher's score an exponential moving average of the
values backed up through the children it proposed. Not the calls (azlib.teachers.ensemble)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class TeacherWeights:
    names: list[str]
    ema_rate: float = 0.3
    temperature: float = 0.1
    floor: float = 0.1
    scores: dict[str, float | None] = field(default_factory=dict)  # the moving averages; None: never credited
    credited: dict[str, int] = field(default_factory=dict)  # children whose backed-up value reached the teacher
    value_sums: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)  # probabilities after each credit

    def __post_init__(self):
        for name in self.names:
            self.scores.setdefault(name, None)
            self.credited.setdefault(name, 0)
            self.value_sums.setdefault(name, 0.0)

    def probabilities(self, ready: Sequence[str] | None = None) -> dict[str, float]:
        """The probability each teacher is drawn with, (1 - floor) * softmax(score / temperature) + floor / K over the
        K `ready` ones (not benched; all by default), 0 for the others. A teacher never credited counts as the mean
        of the others' scores."""
        ready = list(self.names if ready is None else ready)
        known = [self.scores[n] for n in ready if self.scores[n] is not None]
        fill = sum(known) / len(known) if known else 0.0
        scores = [fill if self.scores[n] is None else self.scores[n] for n in ready]
        top = max(scores, default=0.0)
        exp = [math.exp((s - top) / self.temperature) for s in scores]
        total = sum(exp)
        out = {n: 0.0 for n in self.names}
        for n, e in zip(ready, exp):
            out[n] = (1 - self.floor) * e / total + self.floor / len(ready)
        return out

    def draw(self, k: int, ready: Sequence[str], rng: random.Random) -> list[str]:
        """k distinct ready teachers, drawn by probability without replacement."""
        weights = self.probabilities(ready)
        pool = [n for n in self.names if weights[n] > 0]
        chosen = []
        for _ in range(min(k, len(pool))):
            pick = rng.choices(pool, weights=[weights[n] for n in pool])[0]
            chosen.append(pick)
            pool.remove(pick)
        return chosen

    def credit(self, values: dict[str, list[float]], ready: Sequence[str] | None = None) -> dict[str, float]:
        """values: per teacher, the backed-up values of the children it proposed in one search (called once per
        search). Moves each credited teacher's score by ema_rate toward their mean; returns (and records) the new
        probabilities."""
        for name in self.names:
            got = values.get(name)
            if not got:
                continue
            mean = sum(got) / len(got)
            self.credited[name] += len(got)
            self.value_sums[name] += sum(got)
            old = self.scores[name]
            self.scores[name] = mean if old is None else (1 - self.ema_rate) * old + self.ema_rate * mean
        weights = self.probabilities(ready)
        self.history.append(weights)
        return weights

    def state(self) -> dict:
        """What the rule has learned, as JSON holds it (a training checkpoint keeps it)."""
        return {"scores": self.scores, "credited": self.credited, "value_sums": self.value_sums,
                "history": self.history}

    def load_state(self, state: dict) -> None:
        """Continue from `state()`; a teacher the saved run did not have starts uncredited."""
        for name in self.names:
            self.scores[name] = state["scores"].get(name)
            self.credited[name] = state["credited"].get(name, 0)
            self.value_sums[name] = state["value_sums"].get(name, 0.0)
        self.history = [dict(h) for h in state["history"]]
