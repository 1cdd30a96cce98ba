"""The teacher ensemble: several backends propose "right" and "wrong" continuations of partial answers, drawn by the
weights of azlib.teachers.weights, with per-teacher call stats and failing teachers benched."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from azlib.models import Backend
from azlib.models.generation import BackendError, Resource, Sample
from azlib.prompts import continuation_prompt
from azlib.teachers.backends import TeacherBackends
from azlib.teachers.spec import TeacherSpec
from azlib.teachers.weights import TeacherWeights

# Each persona's system prompt per label: "1" a right step, "0" a wrong one (the original system's path code)
PERSONAS = {
    "tutor": {
        "1": "You are an expert math tutor. Continue the assistant's partial solution with the next correct step.",
        "0": "You write plausible but flawed math. Continue the assistant's partial solution with a step that "
             "contains a subtle mistake.",
    },
    "terse": {
        "1": "Continue the solution with its next step, correctly. Be brief: equations only.",
        "0": "Continue the solution with its next step, briefly, and get one calculation wrong.",
    },
}


def teacher_messages(persona: str, label: str, question: str, partial: str) -> list[dict[str, str]]:
    """The kit's chat prompt under the persona's right/wrong instruction, partial answer continued."""
    return continuation_prompt(question, partial, PERSONAS[persona][label])


class Proposal(NamedTuple):
    """What a teacher wrote for one partial answer: the teacher's name, the label it was asked for, and its sample in
    the teacher's own tokens and log-probs. A student reads only its text (azlib.games.text re-encodes and scores it
    in the student's ids)."""

    teacher: str
    label: str  # "1" right, "0" wrong
    sample: Sample


@dataclass(slots=True)
class TeacherStats:
    calls: int = 0  # generate calls (each a batch of requests)
    requests: int = 0  # prompts sent
    tokens: int = 0  # completion tokens received
    seconds: float = 0.0  # wall time of successful calls
    failures: int = 0
    last_error: str = ""
    benched_until: float = 0.0


@dataclass
class Teacher:
    spec: TeacherSpec
    backend: Backend  # local backends serialise their own calls, so teachers may share one
    stats: TeacherStats = field(default_factory=TeacherStats)

    @property
    def name(self) -> str:
        return self.spec.name


class TeacherEnsemble(Resource):
    """propose(contexts) -> per context, proposals from `per_node` teachers drawn by weight;
    credit(values) moves the weights; report() gives weights and stats per teacher. `close()` (or a
    `with` block) closes the engines it opened; backends passed in `shared` stay open."""

    def __init__(self, specs: Sequence[TeacherSpec], *, shared: dict[str, Backend] | None = None,
                 per_node: int = 2, ema_rate: float = 0.3, temperature: float = 0.1, floor: float = 0.1,
                 bench_seconds: float = 60.0, seed: int = 0, clock=time.monotonic):
        if not specs:
            raise ValueError("a teacher ensemble needs at least one teacher")
        if len({s.name for s in specs}) != len(specs):
            raise ValueError(f"teacher names must be unique: {[s.name for s in specs]}")
        self.per_node, self.bench_seconds, self.rng = per_node, bench_seconds, random.Random(seed)
        self.clock = clock  # seconds, monotonic; the tests pass a fake one instead of sleeping through benches
        self.rule = TeacherWeights([s.name for s in specs], ema_rate=ema_rate, temperature=temperature, floor=floor)
        self.backends = TeacherBackends(specs, shared)
        self.teachers = [Teacher(spec, self.backends.by_name[spec.name]) for spec in specs]
        self.by_name = {t.name: t for t in self.teachers}

    def close(self) -> None:
        self.backends.close()

    # -- weights ---------------------------------------------------------------------------------
    def available(self) -> list[Teacher]:
        now = self.clock()
        return [t for t in self.teachers if t.stats.benched_until <= now]

    def weights(self) -> dict[str, float]:
        """The probability each teacher is drawn with now (0 while benched)."""
        return self.rule.probabilities([t.name for t in self.available()])

    def reseed(self, seed: int) -> None:
        """Restart the draws from `seed` (a training step does, so a resumed run draws the teachers the
        uninterrupted one drew)."""
        self.rng.seed(seed)

    def _draw(self, k: int) -> list[Teacher]:
        """k distinct teachers, drawn by weight without replacement."""
        return [self.by_name[n] for n in self.rule.draw(k, [t.name for t in self.available()], self.rng)]

    # -- proposing -------------------------------------------------------------------------------
    def propose(self, contexts: Sequence[tuple[str, str]], *, n: int = 1, max_new_tokens: int = 16,
                seed: int | None = None, per_node: int | None = None) -> list[list[Proposal]]:
        """contexts: (question, partial answer) per node; per_node teachers each (default: the ensemble's).
        Each chosen teacher gets ONE batched call for all its nodes and both labels; teachers run
        concurrently. A teacher whose call fails (a BackendError, after its backend's own retries) is benched for
        `bench_seconds` and its requests go once to others; any other error is a bug and stops the search."""
        out: list[list[Proposal]] = [[] for _ in contexts]
        asks: dict[str, list[int]] = {}
        for i in range(len(contexts)):
            for teacher in self._draw(per_node or self.per_node):
                asks.setdefault(teacher.name, []).append(i)
        failed = self._run(asks, contexts, out, n, max_new_tokens, seed)
        if failed:  # give the failed nodes to teachers still standing (ones already asked for a node excluded)
            retry: dict[str, list[int]] = {}
            for i in failed:
                asked = {p.teacher for p in out[i]}
                spare = [t for t in self._draw(len(self.teachers)) if t.name not in asked]
                if spare:
                    retry.setdefault(spare[0].name, []).append(i)
            self._run(retry, contexts, out, n, max_new_tokens, seed)
        return out

    def _run(self, asks: dict[str, list[int]], contexts, out, n, max_new_tokens, seed) -> list[int]:
        def call(name: str) -> tuple[str, list[list[Sample]] | None]:
            teacher = self.by_name[name]
            spec, nodes = teacher.spec, asks[name]
            prompts = [teacher_messages(spec.persona, label, *contexts[i]) for i in nodes for label in spec.labels]
            start = time.perf_counter()
            try:
                samples = teacher.backend.generate(prompts, n=n, max_new_tokens=min(max_new_tokens, spec.max_tokens),
                                                   temperature=spec.temperature, top_p=0.95, seed=seed)
            except BackendError as err:  # a server, network or engine failure must not stop the search
                teacher.stats.failures += 1
                teacher.stats.last_error = f"{type(err).__name__}: {err}"[:300]
                teacher.stats.benched_until = self.clock() + self.bench_seconds
                return name, None
            stats = teacher.stats
            stats.calls, stats.requests = stats.calls + 1, stats.requests + len(prompts)
            stats.seconds += time.perf_counter() - start
            stats.tokens += sum(s.completion_tokens for group in samples for s in group)
            return name, samples

        failed = []
        with ThreadPoolExecutor(max(1, len(asks))) as pool:
            for name, samples in pool.map(call, list(asks)):
                nodes = asks[name]
                if samples is None:
                    failed.extend(nodes)
                    continue
                pairs = [(i, label) for i in nodes for label in self.by_name[name].spec.labels]
                for (i, label), group in zip(pairs, samples):
                    out[i].extend(Proposal(name, label, s) for s in group)
        return failed

    # -- learning the weights --------------------------------------------------------------------
    def credit(self, values: dict[str, list[float]]) -> dict[str, float]:
        """values: per teacher, the backed-up values of the children it proposed in one search (the rule:
        azlib.teachers.weights). Returns the new weights."""
        return self.rule.credit(values, [t.name for t in self.available()])

    def report(self) -> list[dict]:
        """One row per teacher: weight, tier, calls, tokens, tokens/s, latency, failures, benched, value."""
        weights, now = self.weights(), self.clock()
        rows = []
        rule = self.rule
        for t in self.teachers:
            s, credited = t.stats, rule.credited[t.name]
            rows.append({
                "teacher": t.name, "tier": t.spec.tier, "backend": t.spec.backend, "weight": weights[t.name],
                "calls": s.calls, "requests": s.requests, "tokens": s.tokens,
                "tokens_per_s": s.tokens / s.seconds if s.seconds else 0.0,
                "latency_s": s.seconds / s.calls if s.calls else 0.0, "failures": s.failures,
                "benched": s.benched_until > now,
                "mean_backed_up_value": rule.value_sums[t.name] / credited if credited else None,
                "score": rule.scores[t.name], "last_error": s.last_error,
            })
        return rows
