"""Notebook 05's experiment as a library, does the tree help?: calibrate the task, train every arm to one token budget
over seeds, answer held-out and transfer sets, compare with statistics. No plotting (the notebook draws)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from azlib.data import DataUnavailable, Row, arithmetic_problems, easiest_by_steps, load_gsm8k
from azlib.data.arithmetic import STEP_COUNTS
from azlib.data.gsm8k import GSM8K_TEST_PROBLEMS
from azlib.evaluation import compare, evaluate, load_records
from azlib.lab import from_params
from azlib.statistics import MIN_SEEDS_FOR_INTERVAL, comparison_table, pass_at_k
from azlib.models.generation import Backend, Resource
from azlib.models.loading import free_memory
from azlib.prompts import PROMPT_TOKENS, chat_prompt
from azlib.rewards import complete_answer, extract_answer, is_correct
from azlib.paths import atomic_write_text
from azlib.settings import arm_asks_teachers, arm_settings

EXPERIMENT_FOLDER = "05-experiment"  # its folder in a run folder (notebook 05, `python -m azlib experiment`)


def task_sets(params) -> tuple[list[Row], dict[str, list[Row]], str]:
    """(training problems, held-out sets, a note). For the arithmetic task: "heldout", problems whose chain
    (numbers and operations) no training problem has, in the training wordings, and "transfer", the SAME
    problems (numbers, names, chains) in wordings no training problem used, so the two differ only in wording;
    for GSM8K, "heldout" is the first eval_problems of its test split. With eval_gsm8k_problems, also "gsm8k":
    GSM8K's test problems with the fewest calculation steps. An unreadable GSM8K is an error unless
    params.gsm8k_fallback (then arithmetic problems, or no "gsm8k" set, with a note)."""
    steps, n = tuple(params.arithmetic_steps), params.eval_problems
    problems, note = from_params.training_problems(params)
    sets: dict[str, list[Row]] = {}
    if problems[0]["info"].get("source") == "arithmetic":
        seen = {r["info"]["solution"] for r in problems}  # the chain itself, whatever its wording
        drawn = {w: arithmetic_problems(3 * n, seed=params.seed + 10_000, steps=steps, wording=w)
                 for w in ("train", "transfer")}
        kept = [i for i, r in enumerate(drawn["train"]) if r["info"]["solution"] not in seen][:n]
        sets = {"heldout": [drawn["train"][i] for i in kept], "transfer": [drawn["transfer"][i] for i in kept]}
    else:
        sets["heldout"] = load_gsm8k(params.gsm8k, "test", limit=n)
    if params.eval_gsm8k_problems:
        try:
            sets["gsm8k"] = easiest_by_steps(load_gsm8k(params.gsm8k, "test"), params.eval_gsm8k_problems)
        except DataUnavailable as err:
            if not params.gsm8k_fallback:
                raise
            note += f" GSM8K test unavailable, not evaluated: {err}"
    return problems, sets, note.strip()


def problems_answered(params) -> int:
    """How many problems each model answers (`Experiment._evaluate` asks each problem once, however many of
    `task_sets`' sets hold it): arithmetic's held-out and transfer sets are other prompts; GSM8K's held-out
    problems are among its test problems, all of them when the whole test split is evaluated."""
    if params.task == "arithmetic":
        return 2 * params.eval_problems + params.eval_gsm8k_problems
    if params.eval_gsm8k_problems >= GSM8K_TEST_PROBLEMS:
        return params.eval_gsm8k_problems
    return params.eval_problems + params.eval_gsm8k_problems


def calibration_sets(params) -> dict[str, list[Row]]:
    """`calibration_problems` fresh problems per step count 1..4 (training wordings), none of them trained on."""
    return {f"{k}-step": arithmetic_problems(params.calibration_problems, seed=params.seed + 20_000, steps=(k,))
            for k in STEP_COUNTS} if params.calibration_problems else {}


def calibration(backend: Backend, sets: dict[str, Sequence[Row]], *, samples: int, temperature: float,
                max_new_tokens: int, seed: int = 0, ks: Sequence[int] = (1, 2, 4, 8, 16)) -> list[dict]:
    """Per named set of problems: greedy pass@1, and sampled pass@k at the run's temperature (the unbiased
    estimator over `samples` answers per problem), the base student's standing on the task. Where pass@1 is
    a few percent and pass@16 a good share, there is something for search to find and to teach."""
    table = []
    for name, rows in tqdm(list(sets.items()), desc="calibration", unit="set"):
        prompts = [chat_prompt(r["prompt"]) for r in rows]
        greedy = backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, stop_at_answer=True)
        sampled = backend.generate(prompts, n=samples, max_new_tokens=max_new_tokens, temperature=temperature,
                                   top_p=1.0, seed=seed, stop_at_answer=True)
        correct = [[_correct(s, r) for s in group] for group, r in zip(sampled, rows)]
        row = {"set": name, "problems": len(rows), "greedy": sum(_correct(g[0], r) for g, r in zip(greedy, rows)) / len(rows)}
        for k in (k for k in ks if k <= samples):
            row[f"pass@{k}"] = sum(pass_at_k(samples, sum(c), k) for c in correct) / len(rows)
        row["tokens_per_answer"] = sum(s.completion_tokens for g in sampled for s in g) / (samples * len(rows))
        row["truncated"] = sum(s.finish_reason == "length" for g in sampled for s in g) / (samples * len(rows))
        table.append(row)
    return table


def _correct(sample, row: Row) -> bool:
    text, finished = complete_answer(sample.text, sample.finish_reason == "stop")
    return finished and is_correct(extract_answer(text), row["answer"])


@dataclass
class ArmResult:
    """One arm trained with one seed: tokens generated, its step log, its answers to every evaluation set."""

    arm: str
    seed: int
    tokens: int
    log: list[dict]
    records: dict[str, list[dict]]  # evaluation set -> per-problem records (azlib.evaluation)

    def accuracy(self, name: str) -> float:
        return _accuracy(self.records[name])


@dataclass
class Experiment:
    """Every arm over every seed against the base, on every evaluation set (rows of the kit's schema)."""

    params: object  # a BaseVsTrainedParams
    problems: list[Row]
    eval_sets: dict[str, list[Row]]
    folder: Path
    base: dict[str, list[dict]] = field(default_factory=dict)
    runs: dict[tuple[str, int], ArmResult] = field(default_factory=dict)

    @property
    def jobs(self) -> list[tuple[str, int]]:
        """Every (arm, seed) the settings ask for, seed by seed (`run` trains TRL's first)."""
        return [(arm, seed) for seed in self.params.seeds for arm in self.params.arms]

    def run(self, progress: bool = True, rank: int = 0, ranks: int = 1) -> Experiment:
        """Train, then evaluate, what is not on disk yet: a trained (arm, seed) leaves its adapter and
        `trained.json` in its own folder, an evaluated one `result.json`, so an interrupted experiment continues
        where it stopped and loses no finished arm. Every model answers through one instrument (`instrument`);
        with generation "vllm" the arms also train through it, one engine of the student model for the whole
        run (`Engines`), else it opens once the training is done. Processes sharing the folder split the work
        (`torchrun -m azlib experiment`, one GPU each): rank r trains and evaluates jobs r, r + ranks, ..., rank 0 the base too; each
        arm is a whole training, so nothing passes between them, and `wait()` then reads what all have finished."""
        self._same_problems()
        mine = self.jobs[rank::ranks]
        with Engines(self.params) as engines:
            # TRL's arms first: TRL opens an engine of its own, before the one the other arms share opens
            for arm, seed in tqdm(sorted(mine, key=lambda job: job[0] != "trl"), desc="arms x seeds", unit="run",
                                  disable=not progress):
                self._train(arm, seed, engines)
                free_memory()  # the finished arm's model and optimiser, unreachable now: their memory is the next's
            engines.close_teachers()  # their memory is the instrument's
            unanswered = [job for job in mine if not self._done(*job)]
            if unanswered or (rank == 0 and not self._base_done()):
                backend = engines.instrument()
                if rank == 0:
                    backend.use_adapter(None)  # the base weights (the engine held the last arm's adapter)
                    self._evaluate(backend, self.folder / "base")
                for arm, seed in tqdm(unanswered, desc="evaluating", unit="run", disable=not progress):
                    folder = self._arm_folder(arm, seed)
                    backend.use_adapter(_adapter(folder))
                    self._evaluate(backend, folder)
                    atomic_write_text(folder / "result.json", (folder / "trained.json").read_text())  # on disk: finished
        if rank == 0:
            self.base = self._evaluate(None, self.folder / "base")
        self.runs = {job: self._arm(*job) for job in mine}
        return self

    def wait(self, poll_seconds: float = 10.0, progress: bool = True) -> Experiment:
        """`load()` once the base and every job are on disk: the other processes' share of a shared run. The
        folder must be one every process sees (one machine, or a shared file system); under torchrun a failed
        process ends them all, so while this waits the others are still working."""
        with tqdm(total=1 + len(self.jobs), desc="waiting for the other processes", unit="run",
                  disable=not progress) as bar:
            while (done := self._base_done() + sum(self._done(*job) for job in self.jobs)) < bar.total:
                bar.update(done - bar.n)
                time.sleep(poll_seconds)
            bar.update(done - bar.n)
        return self.load()

    def load(self) -> Experiment:
        """Only what is on disk, nothing trained: a running or interrupted experiment's finished part, in the
        order of `jobs`."""
        self._same_problems()
        if self._base_done():
            self.base = self._evaluate(None, self.folder / "base")
        self.runs = {job: self._arm(*job) for job in self.jobs if self._done(*job)}
        return self

    def _base_done(self) -> bool:
        return all((self.folder / "base" / f"records-{name}.jsonl").exists() for name in self.eval_sets)

    def _arm_folder(self, arm: str, seed: int) -> Path:
        return self.folder / f"seed-{seed}" / arm

    def _done(self, arm: str, seed: int) -> bool:
        return (self._arm_folder(arm, seed) / "result.json").exists()

    def _same_problems(self) -> None:
        """The held-out problems' ids are kept in the folder: answers on disk are only ever compared with
        answers to the same problems (another azlib version or setting that draws other sets is an error)."""
        ids = {name: [r["info"]["id"] for r in rows] for name, rows in self.eval_sets.items()}
        path = self.folder / "eval_sets.json"
        if not path.exists():
            atomic_write_text(path, json.dumps(ids))  # whole or absent: processes sharing the folder read it
        elif json.loads(path.read_text()) != ids:  # read only: a shipped folder is loaded without writing into it
            raise ValueError(f"{self.folder} holds answers to other held-out problems than these settings draw; "
                             "continue it with the settings (and azlib) that started it, or use another folder")

    def _evaluate(self, backend: Backend | None, folder: Path) -> dict[str, list[dict]]:
        """Each evaluation set's records in `folder`: read back where on disk, else answered by `backend` in one
        evaluation, each problem once however many sets hold it (GSM8K's held-out problems are among its test
        problems; the transfer set's rewordings are other prompts)."""
        missing = {name: rows for name, rows in self.eval_sets.items()
                   if not (folder / f"records-{name}.jsonl").exists()}
        if missing:
            # a problem is its id and its wording
            unique = list({(r["info"].get("id"), r["prompt"]): r for rows in missing.values() for r in rows}.values())
            answers = evaluate(backend, unique, "chat-0shot", max_new_tokens=self.params.eval_max_new_tokens,
                               seed=self.params.seed).records
            by_key = {(r["id"], r["prompt"]): r for r in answers}
            folder.mkdir(parents=True, exist_ok=True)
            for name, rows in missing.items():  # whole or absent: a set's file is its answers, every one
                atomic_write_text(folder / f"records-{name}.jsonl", "".join(
                    json.dumps(by_key[r["info"].get("id"), r["prompt"]]) + "\n" for r in rows))
        return {name: load_records(folder / f"records-{name}.jsonl") for name in self.eval_sets}

    def _arm(self, arm: str, seed: int) -> ArmResult:
        folder = self._arm_folder(arm, seed)
        saved = json.loads((folder / "result.json").read_text())
        return ArmResult(arm, seed, saved["tokens"], saved["log"], self._evaluate(None, folder))

    def _train(self, arm: str, seed: int, engines: Engines) -> None:
        """Train one arm with one seed to the budget (train.token_budget; train.steps ends it sooner if reached
        first), unless it is trained already: its adapter to `train/adapter/` (TRL's too), then its tokens and step
        log to `trained.json` (whole or absent). It generates through `engines`' student engine (generation
        "vllm"), asks `engines`' teachers (if it asks any), and closes what its trainer opened of its own."""
        folder = self._arm_folder(arm, seed)
        if (folder / "trained.json").exists() or self._done(arm, seed):
            return
        p = self.params
        if arm == "trl":
            from azlib.lab.trl_arm import train_with_trl

            peer = train_with_trl(p.model_copy(update={"seed": seed}), self.problems, folder / "train",
                                  token_budget=p.train.token_budget)  # its adapter to train/adapter/
            tokens, log = peer.tokens, peer.log
        else:
            fork, train = arm_settings(arm, p.fork, p.train.signal)
            # only the arms that ask teachers open their engines (the run's teachers are theirs)
            asks = arm_asks_teachers(arm, p.fork, p.train.signal)
            arm_params = p.model_copy(update={"seed": seed, "fork": fork} if asks else
                                      {"seed": seed, "fork": fork, "teacher_tier": "none", "teachers": []})
            # what the trainer opens of its own closes when the block ends, however it ends
            with from_params.trainer_from_params(arm_params, folder / "train", self.problems,
                                                 engine=engines.student(),
                                                 teacher_engines=engines.teachers() if asks else None,
                                                 **train) as trainer:
                log = trainer.run(resume=(folder / "train").exists(), progress=False)
                tokens = trainer.tokens
                trainer.student.save_adapter(_adapter(folder))
        atomic_write_text(folder / "trained.json", json.dumps({"tokens": tokens, "log": log}))

    # -- what the runs say ------------------------------------------------------------------------------
    def accuracies(self) -> list[dict]:
        """One row per (model, seed, set): accuracy (`correct` of `problems`), tokens trained, tokens per answer."""
        models = [("base", None, 0, self.base),
                  *((arm, seed, run.tokens, run.records) for (arm, seed), run in self.runs.items())]
        return [{"model": model, "seed": seed, "set": name, **_score(records), "tokens": tokens,
                 "tokens_per_answer": _mean(r["tokens"] for r in records)}
                for model, seed, tokens, sets in models for name, records in sets.items()]

    def summary(self) -> str:
        """Accuracy per set and model: the mean over seeds, each seed's, and the tokens each trained on."""
        rows, lines = self.accuracies(), []
        for name in self.eval_sets:
            for model in ["base", *self.params.arms]:
                runs = [r for r in rows if r["model"] == model and r["set"] == name]
                if runs:
                    mean = sum(r["accuracy"] for r in runs) / len(runs)
                    seeds = " ".join(f"{r['accuracy']:.1%}" for r in runs)
                    tokens = " ".join(f"{r['tokens']:,}" for r in runs)
                    lines.append(f"{name:9s} {model:13s} {mean:6.1%}  seeds {seeds}  tokens {tokens}")
        return "\n".join(lines)

    def comparisons(self, pairs: Sequence[tuple[str, str]] | None = None) -> list[dict]:
        """Each pair (a, b) on each set (default: `comparison_pairs` of the arms): the mean over seeds of b - a with
        its t-interval, the per-seed exact McNemar p-values, and Holm's correction over every pair and set compared
        here ("base" is the same model in every seed). A pair is compared over the seeds both have finished (all,
        once run); a pair with none is left out."""
        per_seed, mcnemar, named, rows_of = {}, {}, [], []
        for name in self.eval_sets:
            for a, b in pairs if pairs is not None else comparison_pairs(self.params.arms):
                seeds = [s for s in self.params.seeds
                         if all(name in self.base if m == "base" else (m, s) in self.runs for m in (a, b))]
                if not seeds:
                    continue
                key = (f"{a}|{b}|{name}|a", f"{a}|{b}|{name}|b")
                for model, k in zip((a, b), key):
                    per_seed[k] = [_accuracy(self._records(model, s, name)) for s in seeds]
                mcnemar[key] = [compare(self._records(a, s, name), self._records(b, s, name)).p_value for s in seeds]
                named.append(key)
                rows_of.append((a, b, name, per_seed[key[1]], per_seed[key[0]]))
        rows = comparison_table(per_seed, named, mcnemar)
        for row, (a, b, name, accuracy_b, accuracy_a) in zip(rows, rows_of):
            row |= {"a": a, "b": b, "set": name, "b_above_a_in": sum(y > x for x, y in zip(accuracy_a, accuracy_b))}
        return rows

    def trained_records(self, name: str = "heldout") -> list[dict]:
        """Every trained arm's per-problem records on one evaluation set, arm after arm (in `runs`' order)."""
        return [r for run in self.runs.values() for r in run.records[name]]

    def _records(self, model: str, seed: int, name: str) -> list[dict]:
        return self.base[name] if model == "base" else self.runs[(model, seed)].records[name]

    def mechanism(self) -> list[dict]:
        """Per arm and seed: distinct verified answers and problems with one, per 1,000 generated tokens
        (what an improvement step has to imitate, and what it cost to find); the share of the verified
        answers the hint teacher wrote (None: a log without forking trees)."""
        out = []
        for (arm, seed), run in self.runs.items():
            if arm == "trl" or not run.log:
                continue
            tokens, verified = sum(r["tokens"] for r in run.log), sum(r["verified"] for r in run.log)
            taught = "search/verified_by_teacher" in run.log[0]
            out.append({"arm": arm, "seed": seed, "tokens": tokens,
                        "verified_per_1k": 1000 * verified / max(tokens, 1),
                        "solved_per_1k": 1000 * sum(r["solved"] for r in run.log) / max(tokens, 1),
                        "prefill_per_generated": sum(r.get("prefill_tokens") or 0 for r in run.log) / max(tokens, 1),
                        "truncated": _mean(r["truncated"] for r in run.log),
                        "teacher_share": sum(r["search/verified_by_teacher"] for r in run.log) / max(verified, 1)
                        if taught else None})
        return out


def comparison_pairs(arms: Sequence[str]) -> list[tuple[str, str]]:
    """The comparisons notebook 05 and benchmarks/tree_vs_sampling.py report, as (a, b) for b - a: every other
    arm against the tree (where the tree is one of the arms), then every arm against the base. Holm's correction
    runs over all of them, on every set."""
    against_tree = [(arm, "tree") for arm in arms if arm != "tree"] if "tree" in arms else []
    return against_tree + [("base", arm) for arm in arms]


def verdict(rows: Sequence[dict], budget: int) -> str:
    """Notebook 05's verdict in words, from `Experiment.comparisons` rows: every arm against the tree and the tree
    against the base where the tree is an arm, else every arm against the base. It opens with what it compared,
    and says so when there was nothing to compare."""
    by_tree = any(r["b"] == "tree" for r in rows)
    shown = [r for r in rows if r["a"] != "base" or r["b"] == "tree" or not by_tree]
    head = f"At {budget:,} generated tokens per arm and seed"
    if not shown:
        return f"{head}: nothing to compare (no trained arm answered a held-out set)."
    pairs = list(dict.fromkeys(f"{r['b']} against {r['a']}" for r in shown))
    sets = list(dict.fromkeys(r["set"] for r in shown))
    lines = []
    for r in shown:
        side = "above" if r["difference"] > 0 else "below" if r["difference"] < 0 else "level with"
        gap = f" by {abs(r['difference']) * 100:.1f} points" if r["difference"] else ""
        interval = (f"95% CI {r['ci_low'] * 100:+.1f} to {r['ci_high'] * 100:+.1f}" if math.isfinite(r["ci_low"])
                    else f"no interval: it needs {MIN_SEEDS_FOR_INTERVAL} seeds or more")
        lines.append(f"{r['set']}: {r['b']} is {side} {r['a']}{gap} (mean of {r['seeds']} seeds, {interval}; "
                     f"above in {r['b_above_a_in']} of {r['seeds']}; Holm p = {r['p_holm']:.3g}: "
                     f"{'significant' if r['significant'] else 'not significant'}).")
    return f"{head}, {', '.join(pairs)} on {' and '.join(sets)}: " + " ".join(lines)


def _adapter(folder: Path) -> Path:
    """Where an arm's trained LoRA adapter is kept (beside its checkpoints; azlib.lab.trl_arm saves TRL's there too)."""
    return folder / "train" / "adapter"


def _accuracy(records: Sequence[dict]) -> float:
    return sum(r["correct"] for r in records) / max(len(records), 1)


def _score(records: Sequence[dict]) -> dict:
    return {"accuracy": _accuracy(records), "correct": sum(bool(r["correct"]) for r in records), "problems": len(records)}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / max(len(values), 1)


class Engines(Resource):
    """The engines one process of notebook 05 keeps across its arms and seeds, one per model, each opened when
    first asked for and closed together: the instrument (`instrument`), which with generation "vllm" is also
    the engine every arm generates through as it trains (its adapter loaded by LoRA id after each optimiser
    step), and the run's teachers' engines (for the arms that ask teachers). TRL's arm opens an engine of its
    own inside TRL's trainer."""

    def __init__(self, params):
        self.params = params
        self._instrument: Backend | None = None
        self._teachers = None  # a TeacherBackends, opened when first asked for

    def instrument(self) -> Backend:
        if self._instrument is None:
            self._instrument = instrument(self.params)
        return self._instrument

    def student(self) -> Backend | None:
        """The engine a trained arm generates through: the instrument with generation "vllm"; None otherwise (hf
        generates with the student's own weights, a server is its own)."""
        return self.instrument() if self.params.generation == "vllm" else None

    def teachers(self) -> dict[str, Backend]:
        """The run's local teachers' engines, keyed as azlib.teachers.TeacherEnsemble's `shared` reads them."""
        if self._teachers is None:
            from azlib.teachers import chosen_teachers
            from azlib.teachers.backends import TeacherBackends

            specs = [s for s in chosen_teachers(self.params.teachers, self.params.teacher_tier)
                     if s.backend != "openai"]  # a remote teacher is a client each ensemble opens
            self._teachers = TeacherBackends(specs)
        return self._teachers.engines

    def close_teachers(self) -> None:
        if self._teachers is not None:
            self._teachers.close()
        self._teachers = None

    def close(self) -> None:
        self.close_teachers()
        if self._instrument is not None:
            self._instrument.close()
        self._instrument = None


def instrument(params) -> Backend:
    """The one backend every model of a comparison answers through, so that a difference between two models is
    theirs and not their instruments': the base weights (`params.model`) in the run's dtype, and each trained
    adapter put on them in turn (`use_adapter`). With generation "vllm" one vLLM engine as the trained models
    generate with (the adapters as LoRA ids), else the hf decode loop. Notebook 05's models, notebook 06's students."""
    from azlib.models import make_backend
    from azlib.parallel import local_device
    if params.generation == "vllm":
        return make_backend("vllm", params.model, lora_rank=params.lora.r, **from_params.generation_engine(params))
    device = local_device(params.device)
    backend = make_backend("hf", params.model, dtype=params.dtype, device=device)
    if device.startswith("cuda"):  # batches sized by half the memory free now, for the longest answers it writes
        import torch

        backend.size_batches(PROMPT_TOKENS + params.eval_max_new_tokens, torch.cuda.mem_get_info(device)[0] / 2)
    return backend
