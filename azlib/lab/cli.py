"""azlib's command line: notebooks (run, notebooks), headless training (train, experiment, referee), plan, check, serve.
It parses and hands over; `python -m azlib COMMAND --help` lists a command's flags."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

from azlib.data import DataUnavailable
from azlib.lab.config import PROFILES, ParamsError
from azlib.models import DEFAULT_MODEL
from azlib.models.loading import ModelLoadError
from azlib.paths import CheckpointError

# What the user asked for, refused with its reason (a parameter, a plan that does not fit, a run folder or checkpoint
# that is not the run asked for, a model or dataset that cannot be read): a message and exit status 2, no traceback
REFUSALS = (ParamsError, CheckpointError, ModelLoadError, DataUnavailable)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="azlib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute the notebooks under a profile into outputs/<run-id>/, ending "
                                          "with its page, index.md")
    run.add_argument("--out", type=Path, help="run folder (default outputs/<timestamp>-<profile>)")
    notebooks = commands.add_parser("notebooks", help="execute the notebooks at their defaults and store them, "
                                                      "outputs and all, in notebooks/ (what the repository shows)")
    check = commands.add_parser("check", help="the preflight: whether this machine has what the profile's notebooks "
                                              "need (CUDA, packages, models on disk, GPU memory, disk), in seconds")
    for command in (run, notebooks, check):
        command.add_argument("--only", type=lambda s: [p.strip() for p in s.split(",") if p.strip()],
                             help="comma-separated notebook prefixes, e.g. 01,04")
    train = commands.add_parser("train", help="notebook 04's training, headless, into <out>/train-04/")
    train.add_argument("--out", type=Path, required=True, help="run folder (keeps checkpoints and train_log.jsonl)")
    train.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    referee = commands.add_parser("referee", help="notebook 07's arms, headless; under torchrun one DDP process each")
    referee.add_argument("--out", type=Path, required=True, help="run folder; writes <out>/referee-07/")
    experiment = commands.add_parser("experiment", help="notebook 05's arms x seeds, headless, into "
                                                         "<out>/05-experiment/; under torchrun each process trains "
                                                         "its share of them")
    experiment.add_argument("--out", type=Path, required=True,
                            help="run folder; `azlib run --only 05 --out` the same folder then draws the results")
    experiment.add_argument("--arms", nargs="+", help="only these arms (default: the profile's)")
    experiment.add_argument("--seeds", type=int, nargs="+", help="only these training seeds (default: the profile's)")
    for command in (run, train, referee, experiment, check):
        command.add_argument("--profile", choices=PROFILES, default="cpu")
        command.add_argument("--set", nargs="+", default=[], metavar="NAME=VALUE", dest="assignments",
                             help="parameters over the profile's, e.g. train.steps=3 model=/path/to/model "
                                  "seeds='[0, 1]' (each value read as YAML)")
    plan = commands.add_parser("plan", help="each notebook's predicted peak GPU memory by part, and its time")
    plan.add_argument("--profile", choices=PROFILES, default="h100")
    plan.add_argument("--gpu-memory", type=float, help="GiB of the GPU (default: an H100 80 GB's 79.65)")
    serve = commands.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API (hf backend)")
    serve.add_argument("--model", default=DEFAULT_MODEL)
    serve.add_argument("--served-model-name", help="name clients send (default: --model)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key-env", help="require the key held in this environment variable")
    serve.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="bfloat16 on a GPU")
    serve.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    from azlib.settings import ServeLimits  # its fields are the limit flags, with their defaults and help

    for limit in fields(ServeLimits):
        serve.add_argument(f"--{limit.name.replace('_', '-')}", type=type(limit.default), default=limit.default,
                           help=f"{limit.metadata['help']} (default {limit.default})")
    args = parser.parse_args(argv)
    handlers = {"run": _run, "notebooks": _notebooks, "check": _check, "plan": _plan, "train": _train,
                "referee": _referee, "experiment": _experiment, "serve": _serve}
    try:
        return handlers[args.command](args)
    except REFUSALS as err:
        print(f"azlib: {err}", file=sys.stderr)
        return 2


def _run(args) -> int:
    from azlib.lab.runner import run

    return run(args.profile, only=args.only, out=args.out, assignments=args.assignments)


def _check(args) -> int:
    from azlib.lab.preflight import check_profile

    return check_profile(args.profile, only=args.only, assignments=args.assignments)


def _notebooks(args) -> int:
    from azlib.lab.runner import store_notebooks

    return store_notebooks(args.only)


def _plan(args) -> int:
    from azlib.lab.plan import H100_GIB, print_plan

    return print_plan(args.profile, args.gpu_memory or H100_GIB)


def _library_params(notebook: str, args):
    """A notebook's parameters from the library's defaults under --profile, env overrides and --set applied (no
    notebook read: a test keeps the defaults equal to the notebook's)."""
    from azlib.lab.config import resolve_library

    return resolve_library(notebook, args.profile, args.out.resolve(), args.assignments)[0]


def _train(args) -> int:
    import torch

    from azlib.lab.from_params import trainer_from_params, training_problems
    from azlib.parallel import init_from_env, world

    params = _library_params("04_gsm8k_run", args)
    if params.custom_reward:
        raise ParamsError("custom_reward = true needs the reward function written in notebook 04; the command line "
                          "trains with train.reward (run the notebook, or python -m azlib run --only 04)")
    init_from_env()
    rank, size = world()
    if params.generation == "vllm" and size > 1:
        raise ParamsError("under torchrun the ranks generate with their own student (generation 'hf') or through one "
                          "vLLM server (generation 'server', generation_url); a vLLM engine in every rank is not "
                          "supported")
    problems, note = training_problems(params)
    if note and rank == 0:
        print("NOTE:", note)
    # The student's engine (generation "vllm") and any teachers' engines stop when training ends, however it ends
    with trainer_from_params(params, args.out.resolve() / "train-04", problems) as trainer:
        log = trainer.run(resume=args.resume or params.resume)
    if rank == 0:
        print(f"{size} process(es), {trainer.step} steps, {trainer.tokens} tokens generated; "
              f"last: {log[-1] if log else None}")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


def _experiment(args) -> int:
    from azlib.lab.config import validate
    from azlib.lab.tree_vs_sampling import EXPERIMENT_FOLDER, Experiment, task_sets
    from azlib.parallel import independent_process

    params = _library_params("05_base_vs_trained", args)
    if changes := {k: v for k, v in (("arms", args.arms), ("seeds", args.seeds)) if v}:
        params = validate("05_base_vs_trained", {**params.model_dump(), **changes})
    # Each (arm, seed) is a whole training: the processes share them out and nothing passes between them (no
    # process group; each on its own GPU); under torchrun a failed process ends the others.
    rank, ranks = independent_process()
    problems, sets, note = task_sets(params)
    if note and rank == 0:
        print("NOTE:", note)
    experiment = Experiment(params, problems, sets, args.out.resolve() / EXPERIMENT_FOLDER)
    experiment.run(rank=rank, ranks=ranks)
    print(f"process {rank} of {ranks} finished {', '.join(f'{arm} seed {seed}' for arm, seed in experiment.runs)}")
    if rank == 0:
        print(experiment.wait().summary())
    return 0


def _referee(args) -> int:
    import json

    import torch

    from azlib.parallel import init_from_env, world
    from azlib.referee import load_corpus
    from azlib.lab.from_params import arms_from_params

    params = _library_params("07_referee_rl", args)
    init_from_env()
    corpus, note = load_corpus(params.gsm8k, params.max_chars or None, fallback=params.gsm8k_fallback)
    arms = arms_from_params(params, corpus)
    log, evals = arms.train()
    rank, size = world()
    if rank == 0:
        folder = args.out.resolve() / "referee-07"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "log.json").write_text(json.dumps({"corpus": corpus.source, "note": note, "processes": size,
                                                     "steps": log, "evals": evals}, indent=1))
        torch.save({name: m.state_dict() for name, m in arms.models.items()}, folder / "models.pt")
        print(f"{size} process(es), corpus {corpus.source}; final: {evals[-1]}")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


def _serve(args) -> int:
    import os

    from pydantic import ValidationError

    from azlib.models import make_backend
    from azlib.models.serve import BatchingServer
    from azlib.settings import ServeLimits

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        raise ParamsError(f"environment variable {args.api_key_env} is not set")
    try:  # checked before the model loads
        limits = ServeLimits(**{f.name: getattr(args, f.name) for f in fields(ServeLimits)})
    except ValidationError as err:
        first = err.errors()[0]
        flag = f"--{str(first['loc'][0]).replace('_', '-')}: " if first["loc"] else ""
        raise ParamsError(f"serve {flag}{first['msg']} (got {first.get('input')!r})") from None
    server = BatchingServer(make_backend("hf", args.model, dtype=args.dtype, device=args.device),
                            args.served_model_name or args.model, args.host, args.port, api_key=key,
                            limits=limits).start()
    print(f"serving {args.model} at {server.url} (Ctrl-C stops)", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        server.close()
    return 0
