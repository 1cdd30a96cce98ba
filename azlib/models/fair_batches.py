"""Fair batching for the local server: a request's n samples are rows, generated in turns of at most `turn_tokens`
tokens, each turn a bounded share of every request's rows in rotation. Not the HTTP layer (azlib.models.serve)."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field

from azlib.models.generation import Backend, Prompt, Sample, TokenIds, cut_at_stop

SEED_STRIDE = 0x9E3779B97F4A7C15  # a later turn of a seeded request samples with seed + turn * stride (mod 2**63)


class BadPrompt(ValueError):
    """A prompt that cannot be generated from: with the new tokens asked for it does not fit the model's context
    (code "context_length_exceeded"), or the chat template refuses its messages ("invalid_prompt")."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


class Expired(RuntimeError):
    """The request's deadline passed, or its client left, before it was answered."""


@dataclass
class PartialSample:
    """One of a request's n samples, as generated so far: a row of the turns' batches."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finished: bool = False  # EOS or a stop string (else it ends at the request's max_new_tokens)
    done: bool = False


@dataclass
class Job:
    """One admitted request. max_new_tokens None: `default_tokens`, cut to what fits the context."""

    prompt: Prompt
    n: int
    max_new_tokens: int | None
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    deadline: float  # time.monotonic() by which it must be answered
    future: Future = field(default_factory=Future)
    cancelled: bool = False  # set by the server: the client went away or the deadline passed
    prompt_ids: list[int] = field(default_factory=list)
    rows: list[PartialSample] = field(default_factory=list)
    turns: int = 0

    def cancel(self) -> None:
        self.cancelled = True


class FairBatcher:
    """A thread that runs jobs on `backend` (one holding a tokenizer: hf) in turns. Each turn every running
    job gives up to max(turn_rows, batch_rows // running jobs) unfinished rows, within batch_rows in all;
    rows with the same sampling settings and turn length share one generate call, shortest turns first."""

    def __init__(self, backend: Backend, *, context_tokens: int, default_tokens: int, max_running: int,
                 batch_rows: int, turn_rows: int, turn_tokens: int, gather_seconds: float):
        self.backend, self.context_tokens, self.default_tokens = backend, context_tokens, default_tokens
        self.max_running, self.batch_rows = max_running, batch_rows
        self.turn_rows, self.turn_tokens, self.gather_seconds = turn_rows, turn_tokens, gather_seconds
        self.waiting: queue.Queue[Job | None] = queue.Queue()  # bounded by the server's admission
        self.running: deque[Job] = deque()
        self.stats = Counter()  # generate_calls, tokens, answered, dropped_running, dropped_unstarted
        self._lock = getattr(backend, "lock", nullcontext())  # the backend's tokenizer is shared with its generate
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        self.waiting.put(None)

    def submit(self, job: Job) -> None:
        self.waiting.put(job)

    def _work(self) -> None:
        while not self._closed and self._admit():
            self._turn()
        for job in self.running:
            job.future.set_exception(RuntimeError("the server closed"))

    def _admit(self) -> bool:
        """Move waiting jobs into the rotation (up to max_running); when idle, block for the first one and
        gather what arrives within gather_seconds. False once closed."""
        gather_until = None
        while len(self.running) < self.max_running:
            try:
                if self.running or gather_until is not None:
                    left = 0 if gather_until is None else gather_until - time.monotonic()
                    job = self.waiting.get(timeout=left) if left > 0 else self.waiting.get_nowait()
                else:
                    job = self.waiting.get()
                    gather_until = time.monotonic() + self.gather_seconds
            except queue.Empty:
                break
            if job is None:
                return False
            if job.cancelled or time.monotonic() >= job.deadline:
                self._drop(job, started=False)
                continue
            try:
                self._prepare(job)
            except Exception as err:  # too long, or a chat template that refuses these messages
                job.future.set_exception(err if isinstance(err, BadPrompt) else BadPrompt(
                    f"the prompt could not be rendered: {type(err).__name__}: {err}", "invalid_prompt"))
                continue
            self.running.append(job)
        return True

    def _prepare(self, job: Job) -> None:
        with self._lock:
            job.prompt_ids = self.backend.encode_prompt(job.prompt)
        room = self.context_tokens - len(job.prompt_ids)
        wanted = job.max_new_tokens if job.max_new_tokens is not None else min(self.default_tokens, room)
        if wanted > room or room < 1:
            raise BadPrompt(f"the prompt has {len(job.prompt_ids)} tokens and {wanted} new tokens were asked for: "
                            f"more than the model's context of {self.context_tokens} tokens", "context_length_exceeded")
        job.max_new_tokens = wanted
        job.rows = [PartialSample() for _ in range(job.n)]

    def _drop(self, job: Job, *, started: bool) -> None:
        self.stats["dropped_running" if started else "dropped_unstarted"] += 1
        if not job.future.done():
            job.future.set_exception(Expired("the request's deadline passed" if started else
                                             "the request's deadline passed before it was started"))

    def _turn(self) -> None:
        """One turn: drop jobs whose client left or deadline passed, share out rows, run each group and answer
        the jobs it finished."""
        for job in [j for j in self.running if j.cancelled or time.monotonic() >= j.deadline]:
            self.running.remove(job)
            self._drop(job, started=job.turns > 0)
        if not self.running:
            return
        share = max(self.turn_rows, self.batch_rows // len(self.running))
        groups: dict[tuple, list[tuple[Job, PartialSample]]] = {}
        budget = self.batch_rows
        for job in self.running:
            rows = [r for r in job.rows if not r.done][: min(share, budget)]
            budget -= len(rows)
            for row in rows:
                tokens = min(self.turn_tokens, job.max_new_tokens - len(row.tokens))
                seed = job.seed if job.seed is None or job.turns == 0 else (job.seed + job.turns * SEED_STRIDE) % 2**63
                groups.setdefault((tokens, job.temperature, job.top_p, job.stop, seed), []).append((job, row))
            job.turns += bool(rows)
            if budget <= 0:
                break
        self.running.rotate(-1)  # the next turn starts its sharing with the next job
        for key in sorted(groups, key=lambda k: k[0]):
            self._run(key, groups[key])
            self._answer_finished()  # now, not after the turn's longer calls

    def _answer_finished(self) -> None:
        for job in [j for j in self.running if all(r.done for r in j.rows) or j.future.done()]:
            self.running.remove(job)
            if not job.future.done():
                job.future.set_result([self._sample(job, row) for row in job.rows])
                self.stats["answered"] += 1

    def _run(self, key: tuple, members: list[tuple[Job, PartialSample]]) -> None:
        members = [(job, row) for job, row in members if not job.cancelled]
        if not members:
            return
        tokens, temperature, top_p, stop, seed = key
        self.stats["generate_calls"] += 1
        try:
            results = self.backend.generate([TokenIds(job.prompt_ids + row.tokens) for job, row in members],
                                            max_new_tokens=tokens, temperature=temperature, top_p=top_p,
                                            stop=stop, seed=seed)
        except Exception as err:  # the clients get HTTP 500 with the message
            for job, _ in members:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        for (job, row), (sample,) in zip(members, results):
            row.tokens += sample.token_ids
            row.logprobs += sample.logprobs
            self.stats["tokens"] += len(sample.token_ids)
            # A stop string may straddle two turns: look for it in the whole text.
            row.finished = sample.finish_reason == "stop" or bool(stop and cut_at_stop(self._text(row), stop)[1])
            row.done = row.finished or len(row.tokens) >= job.max_new_tokens

    def _text(self, row: PartialSample) -> str:
        with self._lock:
            return self.backend.tokenizer.decode(row.tokens, skip_special_tokens=True)

    def _sample(self, job: Job, row: PartialSample) -> Sample:
        with self._lock:
            text = self.backend.sample_text(row.tokens, job.stop)
        return Sample(text, tuple(row.tokens), tuple(row.logprobs), "stop" if row.finished else "length",
                      len(job.prompt_ids), len(row.tokens))
