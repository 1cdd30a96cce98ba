"""The teacher ensemble: several backends propose "right" and "wrong" continuations of partial
answers, chosen by adaptive weights, with per-teacher stats and benching of failing teachers.

Weight rule (documented, tested): each teacher keeps an exponential moving average `score` of the
mean value backed up through the children it proposed in a search (`credit`), updated once per
search with step `ema_rate`. Teachers are drawn per node with probability
`(1 - floor) * softmax(score / temperature) + floor / K` among those not benched; a teacher never
credited counts as the mean of the others' scores. A teacher whose call fails (a BackendError, after its
backend's own retries) is benched for `bench_seconds` and its requests go to the others; any other error is
a bug and stops the search.
"""

from __future__ import annotations

import math
import os
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from azlib.models import DEFAULT_MODEL, Backend, make_backend
from azlib.models.generation import BackendError, Resource, Sample
from azlib.prompts import continuation_prompt
from azlib.teachers.spec import TeacherSpec

LABELS = ("1", "0")  # right, wrong: the path code of the original system
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
_OPENROUTER = "https://openrouter.ai/api/v1"
TIERS: dict[str, list[dict]] = {
    # Remote tiers of the original system (OpenAI-compatible endpoints; key from OPENROUTER_API_KEY).
    "free": [
        {"name": "r1-distill-qwen-32b", "model": "deepseek/deepseek-r1-distill-qwen-32b:free"},
        {"name": "nemotron-nano-9b", "model": "nvidia/nemotron-nano-9b-v2:free"},
    ],
    "production": [
        {"name": "qwen2.5-72b", "model": "qwen/qwen-2.5-72b-instruct"},
        {"name": "llama-3.3-70b", "model": "meta-llama/llama-3.3-70b-instruct"},
    ],
    # One 80 GB GPU beside a training 1.5B student: two ungated teachers, each engine with its own budget
    # (vLLM's gpu_memory_utilization is the share of the GPU one engine may take: weights + KV cache).
    "vllm": [
        {"name": "qwen2.5-7b", "model": "Qwen/Qwen2.5-7B-Instruct",  # 15.2 GB bf16 weights
         "options": {"gpu_memory_utilization": 0.25, "max_model_len": 4096}},
        {"name": "phi-3.5-mini", "model": "microsoft/Phi-3.5-mini-instruct",  # 7.6 GB
         "options": {"gpu_memory_utilization": 0.14, "max_model_len": 4096}},
    ],
    # The original system's published run: four 7-9B models on vLLM. Three are gated on the hub (accept
    # the licences, set HF_TOKEN); their ~63 GB of bf16 weights need a GPU of their own (0.2 of an 80 GB
    # H100 each, 16 GB, holds the weights of a 7-8B model with a little KV cache; Gemma 2 9B needs 0.25).
    "vllm-original": [
        {"name": "qwen2.5-7b", "model": "Qwen/Qwen2.5-7B-Instruct"},
        {"name": "llama-3.1-8b", "model": "meta-llama/Llama-3.1-8B-Instruct"},
        {"name": "mistral-7b", "model": "mistralai/Mistral-7B-Instruct-v0.3"},
        {"name": "gemma-2-9b", "model": "google/gemma-2-9b-it", "options": {"gpu_memory_utilization": 0.25,
                                                                         "max_model_len": 4096}},
    ],
    # Offline on 2 CPU cores: the embedded model under two personas, and once over real HTTP.
    "cpu": [
        {"name": "tutor", "backend": "hf", "model": DEFAULT_MODEL, "persona": "tutor", "temperature": 0.7},
        {"name": "terse", "backend": "hf", "model": DEFAULT_MODEL, "persona": "terse", "temperature": 1.0},
        {"name": "http-tutor", "backend": "openai", "model": DEFAULT_MODEL, "base_url": "local", "temperature": 0.7,
         "api_key_env": "AZLIB_LOCAL_TEACHER_KEY"},
    ],
}
_TIER_DEFAULTS = {
    "free": {"backend": "openai", "base_url": _OPENROUTER, "api_key_env": "OPENROUTER_API_KEY"},
    "production": {"backend": "openai", "base_url": _OPENROUTER, "api_key_env": "OPENROUTER_API_KEY"},
    "vllm": {"backend": "vllm"},
    "vllm-original": {"backend": "vllm", "options": {"gpu_memory_utilization": 0.2, "max_model_len": 4096}},
    "cpu": {},
}


def tier_teachers(tier: str) -> list[TeacherSpec]:
    if tier not in TIERS:
        raise ValueError(f"unknown teacher tier {tier!r}; choose one of {sorted(TIERS)}")
    return [TeacherSpec(tier=tier, **{**_TIER_DEFAULTS[tier], **entry}) for entry in TIERS[tier]]


def teacher_messages(persona: str, label: str, question: str, partial: str) -> list[dict[str, str]]:
    """The kit's chat prompt under the persona's right/wrong instruction, partial answer continued."""
    return continuation_prompt(question, partial, PERSONAS[persona][label])


class Proposal(NamedTuple):
    teacher: str
    label: str  # "1" right, "0" wrong
    sample: Sample


@dataclass
class TeacherStats:
    calls: int = 0  # generate calls (each a batch of requests)
    requests: int = 0  # prompts sent
    tokens: int = 0  # completion tokens received
    seconds: float = 0.0  # wall time of successful calls
    failures: int = 0
    last_error: str = ""
    credited: int = 0  # children whose backed-up value reached this teacher
    value_sum: float = 0.0
    score: float | None = None  # the moving average that sets the weight
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
    credit(tree) moves the weights; report() gives weights and stats per teacher. `close()` (or a
    `with` block) stops the engines and servers it started; backends passed in `shared` stay open."""

    def __init__(self, specs: Sequence[TeacherSpec], *, shared: dict[str, Backend] | None = None,
                 per_node: int = 2, ema_rate: float = 0.3, temperature: float = 0.1, floor: float = 0.1,
                 bench_seconds: float = 60.0, seed: int = 0, clock=time.monotonic):
        if not specs:
            raise ValueError("a teacher ensemble needs at least one teacher")
        if len({s.name for s in specs}) != len(specs):
            raise ValueError(f"teacher names must be unique: {[s.name for s in specs]}")
        self.per_node, self.ema_rate, self.temperature, self.floor = per_node, ema_rate, temperature, floor
        self.bench_seconds, self.rng = bench_seconds, random.Random(seed)
        self.clock = clock  # seconds, monotonic; the tests pass a fake one instead of sleeping through benches
        self.history: list[dict[str, float]] = []  # weights after each credit
        self._owned: list = []  # backends and servers this ensemble started, closed by close()
        shared = dict(shared or {})
        try:
            self.teachers = [Teacher(spec, self._backend(spec, shared)) for spec in specs]
        except Exception:  # e.g. a vLLM engine that finds no memory: the engines already started go too
            self.close()
            raise

    def _backend(self, spec: TeacherSpec, shared: dict[str, Backend]) -> Backend:
        """Local models are loaded once and shared (the student's backend too, passed in `shared`)."""
        if spec.backend == "openai":
            base_url, key_env, key = spec.base_url, spec.api_key_env, None
            if base_url == "local":  # our own server, guarded by the key in api_key_env, else a fresh one
                from azlib.models.serve import BatchingServer

                key = (os.environ.get(key_env) if key_env else None) or secrets.token_urlsafe(24)
                server = BatchingServer(self._local(spec.model, "hf", shared), spec.model, api_key=key).start()
                self._owned.append(server)
                base_url, key_env = server.url, None
            backend = make_backend("openai", spec.model, base_url=base_url, api_key_env=key_env, api_key=key,
                                   timeout=spec.timeout, max_retries=spec.max_retries, **spec.options)
            self._owned.append(backend)
            return backend
        return self._local(spec.model, spec.backend, shared, **spec.options)

    def _local(self, model: str, kind: str, shared: dict[str, Backend], **options) -> Backend:
        key = f"{model}+{options['adapter']}" if options.get("adapter") else model  # an adapter makes another model
        if key not in shared:
            shared[key] = make_backend(kind, model, **options)
            self._owned.append(shared[key])
        return shared[key]

    def close(self) -> None:
        while self._owned:  # newest first: a server before the backend it serves
            self._owned.pop().close()

    # -- weights ---------------------------------------------------------------------------------
    def available(self) -> list[Teacher]:
        now = self.clock()
        return [t for t in self.teachers if t.stats.benched_until <= now]

    def weights(self) -> dict[str, float]:
        """Sampling probability of each teacher now (0 while benched)."""
        ready = self.available()
        known = [t.stats.score for t in ready if t.stats.score is not None]
        fill = sum(known) / len(known) if known else 0.0
        scores = [fill if t.stats.score is None else t.stats.score for t in ready]
        top = max(scores, default=0.0)
        exp = [math.exp((s - top) / self.temperature) for s in scores]
        total = sum(exp)
        out = {t.name: 0.0 for t in self.teachers}
        for t, e in zip(ready, exp):
            out[t.name] = (1 - self.floor) * e / total + self.floor / len(ready)
        return out

    def _draw(self, k: int) -> list[Teacher]:
        """k distinct teachers, drawn by weight without replacement."""
        weights = self.weights()
        pool = [t for t in self.teachers if weights[t.name] > 0]
        chosen = []
        for _ in range(min(k, len(pool))):
            pick = self.rng.choices(pool, weights=[weights[t.name] for t in pool])[0]
            chosen.append(pick)
            pool.remove(pick)
        return chosen

    # -- proposing -------------------------------------------------------------------------------
    def propose(self, contexts: Sequence[tuple[str, str]], *, n: int = 1, max_new_tokens: int = 16,
                seed: int | None = None, per_node: int | None = None) -> list[list[Proposal]]:
        """contexts: (question, partial answer) per node; per_node teachers each (default: the ensemble's).
        Each chosen teacher gets ONE batched call for all its nodes and both labels; teachers run
        concurrently. Failed requests go once to others."""
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
        by_name = {t.name: t for t in self.teachers}

        def call(name: str) -> tuple[str, list[list[Sample]] | None]:
            teacher = by_name[name]
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
                pairs = [(i, label) for i in nodes for label in by_name[name].spec.labels]
                for (i, label), group in zip(pairs, samples):
                    out[i].extend(Proposal(name, label, s) for s in group)
        return failed

    # -- learning the weights --------------------------------------------------------------------
    def credit(self, values: dict[str, list[float]]) -> dict[str, float]:
        """values: per teacher, the mean backed-up values of the children it proposed in one search.
        Moves each credited teacher's score by ema_rate toward their mean; returns the new weights."""
        for teacher in self.teachers:
            got = values.get(teacher.name)
            if not got:
                continue
            mean = sum(got) / len(got)
            stats = teacher.stats
            stats.credited, stats.value_sum = stats.credited + len(got), stats.value_sum + sum(got)
            stats.score = mean if stats.score is None else (1 - self.ema_rate) * stats.score + self.ema_rate * mean
        weights = self.weights()
        self.history.append(weights)
        return weights

    def report(self) -> list[dict]:
        """One row per teacher: weight, tier, calls, tokens, tokens/s, latency, failures, benched, value."""
        weights, now = self.weights(), self.clock()
        rows = []
        for t in self.teachers:
            s = t.stats
            rows.append({
                "teacher": t.name, "tier": t.spec.tier, "backend": t.spec.backend, "weight": weights[t.name],
                "calls": s.calls, "requests": s.requests, "tokens": s.tokens,
                "tokens_per_s": s.tokens / s.seconds if s.seconds else 0.0,
                "latency_s": s.seconds / s.calls if s.calls else 0.0, "failures": s.failures,
                "benched": s.benched_until > now, "mean_backed_up_value": s.value_sum / s.credited if s.credited else None,
                "score": s.score, "last_error": s.last_error,
            })
        return rows
