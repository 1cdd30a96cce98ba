"""The training loop of notebook 04: per step, search (or sample) a few problems, turn them into a training signal,
take one GRPO (or imitation) step, log, and checkpoint atomically so a killed run resumes."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import resource
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

from azlib.data.rows import Row
from azlib.sampled_answer import Answer
from azlib.grpo import PolicyUpdate, Rollout
from azlib.games.text.signals import SCORABLE_SIGNALS, best_verified, verified, with_rewards
from azlib.games.text.explorers import Exploration, ForkExplorer, TreeExplorer, explorer
from azlib.models.generation import Resource
from azlib.models.student import Student
from azlib.parallel import barrier, gather, shard, world
from azlib.rewards import RewardBreakdown, RewardFunction, RewardWeights, check_reward_function, reward_name
from azlib.paths import CHECKPOINT_PREFIX, CheckpointError, saved_checkpoints
from azlib.settings import TrainerSettings

KEEP_CHECKPOINTS = 2
# What a resumed run may change: how far it goes and how often it saves, not what it does.
RESUMABLE_CHANGES = ("train.steps", "train.token_budget", "train.checkpoint_every")


@dataclass(frozen=True)
class StepLog:
    """One line of the training log, from its parts: the step's own fields as they are (step, tokens, verified,
    reward_mean, the explorer's accuracy, ...), the update's statistics as update/<key> (update/loss, update/kl,
    update/grad_norm; update/reward_mean is GRPO's, over the rollouts it was given), the explorer's own fields as
    search/<key>, the reward's parts as reward/<part>. `line` refuses a key two parts both write."""

    own: dict
    update: dict = field(default_factory=dict)
    search: dict = field(default_factory=dict)
    reward: dict = field(default_factory=dict)

    NAMESPACES = ("update", "search", "reward")

    def line(self) -> dict:
        line = dict(self.own)
        for space in self.NAMESPACES:
            for key, value in getattr(self, space).items():
                name = f"{space}/{key}"
                if name in line:
                    raise KeyError(f"the step log's {name!r} is written twice: by the step's own fields and by "
                                   f"its {space} part")
                line[name] = value
        return line


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) % 2**31


class Trainer(Resource):
    """Trainer(student, problems, ...).run(resume) -> the step log (also in <folder>/train_log.jsonl).
    `close()` (or `with trainer:`) closes its student and teachers, which may hold engines; a trainer around
    a student still needed elsewhere is simply not closed."""

    def __init__(self, student: Student, problems: Sequence[Row], folder: str | Path,
                 settings: TrainerSettings = TrainerSettings(), *, teachers=None, checker=None,
                 weights: RewardWeights = RewardWeights()):
        self.student, self.problems, self.settings = student, list(problems), settings
        self.folder = Path(folder)
        self.checkpoints = self.folder / "checkpoints"
        self.log_path = self.folder / "train_log.jsonl"
        self.policy_update = PolicyUpdate(student, settings.grpo, settings.sampling)
        self.teachers, self.checker, self.weights = teachers, checker, weights
        self.explorer = self.explorer_for(settings.train.signal)  # the run's: its problems and seed in, rollouts out
        self.step, self.position, self.tokens = 0, 0, 0
        self.replay: list[Rollout] = []  # verified answers found so far (update "sft"), newest last
        self.reward_functions: list[RewardFunction] = []  # added by add_reward: a learner's own, TRL-shaped

    def add_reward(self, function: RewardFunction) -> None:
        """Add a reward function with TRL's signature, `f(prompts, completions, **kwargs) -> list[float]` (kwargs:
        the rows' other columns, `answer` the gold, `info`, and `completion_ids`), to the reward of every answer
        the update trains on, as TRL sums its reward functions; its mean is logged as reward/<its name>. GRPO's
        advantages come from the sum; imitation (update "sft") keeps each problem's verified answers with the
        best sum. The search still steers by `train.reward`. Added before `run`: a resume checks the names."""
        signal = self.settings.train.signal
        if signal not in SCORABLE_SIGNALS:
            raise ValueError(f"a reward function scores whole answers: train.signal must be one of {SCORABLE_SIGNALS} "
                             f"to use one, got {signal!r}")
        check_reward_function(function, [k for k in self.problems[0] if k != "prompt"] + ["completion_ids"])
        name, taken = reward_name(function), {reward_name(f) for f in self.reward_functions}
        reserved = taken | set(RewardBreakdown.__dataclass_fields__)  # the log's reward/<part> keys
        if name in reserved or not name.isidentifier():
            raise ValueError(f"a reward function is logged under its name, and {name!r} is taken or not a name "
                             f"(taken: {sorted(reserved)}); give the function another name (def ...)")
        self.reward_functions.append(function)

    def explorer_for(self, signal: str) -> TreeExplorer | ForkExplorer:
        """An explorer of this `train.signal` over this run's problems, student and teachers
        (azlib.games.text.explorers); the run's own is `self.explorer`."""
        return explorer(self.settings, self.student.backend, self.problems, signal, teachers=self.teachers,
                        checker=self.checker, weights=self.weights)

    def close(self) -> None:
        """Stop the student's generation engine and the teachers' engines and servers. Idempotent."""
        self.student.close()
        if self.teachers is not None:
            self.teachers.close()

    # -- one step ------------------------------------------------------------------------------------
    def _problems_for_step(self) -> list[int]:
        """The next problems, cycling; under a token budget the last step takes only as many as the budget has
        left at the run's tokens per problem so far, so equal-budget arms end near the budget, not a step past."""
        s, count = self.settings.train, self.settings.train.problems_per_step
        if s.token_budget is not None and self.position:
            count = max(1, min(count, math.ceil((s.token_budget - self.tokens) / (self.tokens / self.position))))
        return [(self.position + k) % len(self.problems) for k in range(count)]

    def train_step(self) -> dict:
        """One step: explore the next problems, credit the teachers, reward, update, advance, and the log record."""
        start, s = time.perf_counter(), self.settings.train
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        seed = step_seed(s.seed, self.step)
        indices = self._problems_for_step()
        found = self._explore(indices, seed)
        if self.teachers is not None:
            for values in found.credits:
                self.teachers.credit(values)
        torch.manual_seed(seed)  # LoRA dropout in the update
        rollouts = with_rewards(found.rollouts, self.problems, self.reward_functions)
        good = verified(rollouts)
        stats = self._update(rollouts, good)
        self.step, self.position, self.tokens = self.step + 1, self.position + len(indices), self.tokens + found.tokens
        if self.student.reference == "snapshot" and self.step % s.reference_refresh == 0:
            self.student.refresh_reference()
        return self._record(found, rollouts, good, stats, time.perf_counter() - start)

    def _explore(self, indices: list[int], seed: int) -> Exploration:
        """The explorer on this rank's share of the problems; under torchrun every rank then holds the whole
        step's exploration, in the order one process lists it."""
        if self.teachers is not None:
            self.teachers.reseed(seed)  # which teachers each node asks: from (seed, step) too
        found = self.explorer.explore(shard(indices), seed)
        return Exploration.joined(gather(found)) if world()[1] > 1 else found

    def _update(self, rollouts: list[Rollout], good: list[Rollout]) -> dict:
        """GRPO on the step's answers, or imitation of the verified answers (with the replay buffer's; with reward
        functions, each problem's best)."""
        s = self.settings.train
        if s.update == "grpo":
            # a rollout with no ids has nothing to train; an answer that only stopped (its one id the EOS) is trained
            # on stopping, as TRL trains every completion
            return self.policy_update.step([r for r in rollouts if r.completion_ids])
        kept = best_verified(rollouts) if self.reward_functions else good  # with reward functions: each problem's best
        self.replay = (self.replay + kept)[-s.replay_size:] if s.replay_size else kept
        return self.policy_update.sft_step(self.replay)

    def _record(self, found: Exploration, rollouts: list[Rollout], good: list[Rollout], stats: dict,
                seconds: float) -> dict:
        """The step's line of the log (`StepLog`): what it explored and verified, its truncated answers and the
        explorer's accuracy, what it cost; the update's statistics under update/, the explorer's own fields under
        search/, the reward's parts under reward/."""
        n = max(len(rollouts), 1)
        whole = found.rollouts if self.explorer.whole_answers else []
        own = {"step": self.step, "position": self.position, "completions": len(rollouts),
               "completion_correct": sum(r.correct for r in rollouts) / n,
               "reward_mean": sum(r.reward for r in rollouts) / n,  # every answer's, empty ones included
               "verified": len(good), "solved": len({r.answer.problem for r in good}),
               "truncated": sum(not r.answer.finished for r in whole) / max(len(whole), 1),
               self.explorer.accuracy: sum(found.correct) / max(len(found.correct), 1),
               "tokens": found.tokens, "prefill_tokens": found.prefill, "tokens_total": self.tokens,
               "seconds": seconds,
               "updates": self.policy_update.updates,  # optimiser steps so far (imitation skips a step with none verified)
               "ram_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # Linux reports KiB
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            own["vram_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20  # this step, this process's tensors
            own["vram_used_mb"] = (total - free) / 2**20  # the whole GPU now: vLLM engines included
        return StepLog(own, update=stats, search=self.explorer.step_log(found, good),
                       reward=_mean_parts(rollouts)).line()

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self, resume: bool = False, progress: bool = True) -> list[dict]:
        if resume:
            self.restore_latest()
        elif self.checkpoints.exists() or self.log_path.exists():
            raise CheckpointError(f"{self.folder} already holds a training run; pass resume=True to continue it "
                                  "(--resume on the command line) or choose another folder")
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self._read_log(upto=self.step)
        s, first = self.settings.train, world()[0] == 0  # under torchrun rank 0 writes the log and the checkpoints
        update = "imitation" if s.update == "sft" else "GRPO"
        with tqdm(total=s.steps, initial=self.step, desc=f"{update} steps ({s.signal})", unit="step",
                  disable=not (progress and first)) as bar:
            while self.step < s.steps and (s.token_budget is None or self.tokens < s.token_budget):
                record = self.train_step()
                log.append(record)
                if first:
                    with self.log_path.open("a") as f:
                        f.write(json.dumps(record) + "\n")
                if self.step % s.checkpoint_every == 0 or self.step == s.steps:
                    self.save_checkpoint()
                bar.update(1)
                accuracy = self.explorer.accuracy
                bar.set_postfix({"reward": f"{record['reward_mean']:+.3f}", accuracy: f"{record[accuracy]:.2f}"})
        if log and self.step % s.checkpoint_every:
            self.save_checkpoint()
        return log

    def _read_log(self, upto: int) -> list[dict]:
        """The log lines of steps 1..upto; later lines (steps redone after a resume) are dropped, and so is a last
        line a kill cut short (its step is taken again). A damaged line before others stops the resume, named."""
        if not self.log_path.exists():
            return []
        kept, lines = [], self.log_path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                step = record["step"]
            except (json.JSONDecodeError, TypeError, KeyError) as err:
                if number == len(lines) and isinstance(err, json.JSONDecodeError):
                    break
                raise CheckpointError(f"{self.log_path}, line {number}, is not a step's record ({type(err).__name__}: "
                                      f"{err}) and is not the last line, so no kill cut it short; repair or remove it "
                                      "to resume") from None
            if step <= upto:
                kept.append(record)
        barrier()  # every rank has read the log before rank 0 rewrites it
        if world()[0] == 0:
            self.log_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        return kept

    # -- checkpoints ---------------------------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        """Written into a hidden folder, then renamed: a reader sees a whole checkpoint or none. Under torchrun
        rank 0 writes it (every rank holds the same weights, optimiser state and replay) and the others wait."""
        final = self.checkpoints / f"{CHECKPOINT_PREFIX}{self.step:06d}"
        if world()[0] != 0:
            barrier()
            return final
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        staging = self.checkpoints / f".{final.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        self.student.save_adapter(staging / "adapter")
        torch.save(self.policy_update.optimizer.state_dict(), staging / "optimizer.pt")
        state = {"step": self.step, "position": self.position, "tokens": self.tokens, "seed": self.settings.train.seed,
                 "updates": self.policy_update.updates, "replay": [asdict(c) for c in self.replay],
                 "model": self.student.name, "problems": self._problems_digest(), "config": self._flat_settings(),
                 "teachers": self.teachers.rule.state() if self.teachers is not None else {}}
        (staging / "state.json").write_text(json.dumps(state, indent=1))
        for f in staging.rglob("*"):
            if f.is_file():
                with f.open("rb") as fh:
                    os.fsync(fh.fileno())
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        for old in self.list_checkpoints()[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        barrier()
        return final

    def _flat_settings(self) -> dict:
        """Every setting of the run as JSON holds it (tuples as lists), flattened to "section.field" names."""
        sections = json.loads(json.dumps(asdict(self.settings)))
        settings = {f"{name}.{field}": value for name, section in sections.items() for field, value in section.items()}
        if self.reward_functions:  # by name: a resume cannot compare code (a run without any has no such key)
            settings["train.reward_functions"] = [reward_name(f) for f in self.reward_functions]
        return settings

    def _problems_digest(self) -> str:
        """The training problems, in order, in a few characters (another task or count is another run)."""
        return hashlib.sha256(json.dumps([[r["prompt"], r["answer"]] for r in self.problems]).encode()).hexdigest()[:16]

    def _check_same_run(self, state: dict, checkpoint: Path) -> None:
        """A resume continues the saved run: refuse settings that would make it another one, naming them."""
        saved = {"model": state.get("model"), "problems": state.get("problems"), **state.get("config", {})}
        current = {"model": self.student.name, "problems": self._problems_digest(), **self._flat_settings()}
        changed = [f"{k}: saved {saved.get(k)!r}, now {current.get(k)!r}" for k in sorted(saved.keys() | current.keys())
                   if k not in RESUMABLE_CHANGES and saved.get(k) != current.get(k)]
        if changed:
            raise CheckpointError(f"{checkpoint} belongs to a run with other settings; set them back to resume it, or "
                                  f"start a new run (resume=False, another folder). Differs: " + "; ".join(changed))

    def list_checkpoints(self) -> list[Path]:
        return saved_checkpoints(self.checkpoints)

    def restore_latest(self) -> None:
        """Continue from the newest checkpoint (none yet: start from step 0)."""
        checkpoints = self.list_checkpoints()
        if not checkpoints:
            return
        latest = checkpoints[-1]
        try:
            state = json.loads((latest / "state.json").read_text())
            optimizer = torch.load(latest / "optimizer.pt", weights_only=True, map_location="cpu")  # the optimiser moves it to its parameters
        except (OSError, ValueError, RuntimeError, pickle.UnpicklingError) as err:
            raise CheckpointError(f"checkpoint {latest} is damaged ({err}); delete it to resume from the one "
                                  "before") from err
        if "config" not in state:
            raise CheckpointError(f"checkpoint {latest} holds no settings (state.json has no 'config'), so a resume "
                                  "cannot check them; start a new run")
        if missing := [k for k in ("step", "position", "tokens", "updates", "replay") if k not in state]:
            raise CheckpointError(f"checkpoint {latest} is damaged (state.json lacks {missing}); delete it to resume "
                                  "from the one before")
        self._check_same_run(state, latest)
        saved_teachers = state.get("teachers")
        if bool(saved_teachers) != (self.teachers is not None):
            raise CheckpointError(f"checkpoint {latest} belongs to a run {'with' if saved_teachers else 'without'} "
                                  f"teachers, and this one has {'none' if self.teachers is None else 'teachers'}; "
                                  "resume it as it was, or start a new run")
        try:
            replay = [_replayed(saved) for saved in state["replay"]]
        except (TypeError, KeyError) as err:
            raise CheckpointError(f"checkpoint {latest} holds a replay buffer of another shape ({type(err).__name__}: "
                                  f"{err}); start a new run") from None
        self.student.load_adapter(latest / "adapter")
        self.policy_update.optimizer.load_state_dict(optimizer)
        self.step, self.position, self.tokens = state["step"], state["position"], state["tokens"]
        self.policy_update.updates, self.replay = state["updates"], replay
        if self.teachers is not None:
            self.teachers.rule.load_state(saved_teachers)


def _replayed(saved: dict) -> Rollout:
    """A replay entry as save_checkpoint writes it (asdict through JSON: tuples come back as lists) as the Rollout it
    was: its Answer's ids, log-probs and the rollout's advantages as tuples, the RewardBreakdown rebuilt. An entry of
    another shape raises TypeError (a field it lacks or has beside the record's own) or KeyError."""
    answer = saved["answer"]
    if answer is not None:
        answer = Answer(**answer | {"token_ids": tuple(answer["token_ids"]), "logprobs": tuple(answer["logprobs"]),
                                    "breakdown": RewardBreakdown(**answer["breakdown"])})
    return Rollout(**saved | {"answer": answer, "advantages": tuple(saved["advantages"])})


def _mean_parts(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Mean of each reward part over the step's whole answers (the log's reward/<part>): their RewardBreakdown parts
    but the total, then each added reward function's value. Sibling steps are not answers and have no parts."""
    parts: dict[str, list[float]] = {}
    for r in rollouts:
        logged = {k: v for k, v in asdict(r.answer.breakdown).items() if k != "total"} if r.answer else {}
        for k, v in (logged | r.added).items():
            parts.setdefault(k, []).append(v)
    return {k: sum(v) / len(v) for k, v in parts.items()}
