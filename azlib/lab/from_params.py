"""Each notebook's components made from its parameters (azlib.lab.config): problems, trainer, referee arms, Countdown's
setup. The algorithms take settings, never a notebook's parameters; this is where the parameters become them."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import torch

from azlib.data import task_problems
from azlib.data.rows import Row
from azlib.games.countdown.experiment import CountdownSetup
from azlib.parallel import local_device
from azlib.referee.data import CharCorpus
from azlib.referee.train import Arms, arm_specs
from azlib.settings import GPTSettings, TrainerSettings

if TYPE_CHECKING:
    from azlib.training import Trainer

GENERATION_MAX_MODEL_LEN = 4096  # tokens of one sequence in the student's vLLM engine (prompt + answer)


def training_problems(params) -> tuple[list[Row], str]:
    """The training rows a TrainingParams names, and a note when GSM8K was unreachable (gsm8k_fallback)."""
    return task_problems(params.task, params.gsm8k, "train", params.num_train_problems, seed=params.seed,
                         fallback=params.gsm8k_fallback, steps=tuple(params.arithmetic_steps))


def generation_engine(params) -> dict:
    """The vLLM engine options of a trained model that generates through one (generation "vllm": notebook 04 and
    05's student, 06's teacher): its dtype, share and length."""
    return {"dtype": params.dtype, "gpu_memory_utilization": params.generation_memory,
            "max_model_len": GENERATION_MAX_MODEL_LEN}


def trainer_from_params(params, folder: str | Path, problems: Sequence[Row], *, engine=None,
                        teacher_engines: dict | None = None, **train_changes) -> Trainer:
    """Student, teachers and trainer as a TrainingParams (notebooks 04, 05; `python -m azlib train`) says;
    `train_changes` replace fields of its `train` section (05's equal-budget arms). `engine` (generation "vllm")
    and `teacher_engines` (keyed as azlib.teachers.backends.engine_key): engines the caller opened and keeps open
    across trainers, used instead of new ones. The caller closes the trainer when done with it (`with
    trainer_from_params(...) as trainer:`): its student and teachers may hold engines of their own."""
    from azlib.models.student import Student  # the model libraries load when a trainer is made, not before
    from azlib.teachers import TeacherEnsemble, chosen_teachers
    from azlib.training import Trainer

    specs = chosen_teachers(params.teachers, params.teacher_tier)
    if params.fork.writer == "teachers" and not specs:
        raise ValueError("fork.writer 'teachers' needs teachers: set teacher_tier (cpu, vllm, ...) or teachers")
    settings = TrainerSettings(train=replace(params.train, seed=params.seed, **train_changes), search=params.search,
                               text=params.text, fork=params.fork, grpo=params.grpo, lora=params.lora)
    torch.manual_seed(params.seed)  # the LoRA initialisation
    student = Student(params.model, lora=settings.lora, reference=params.reference, dtype=params.dtype,
                      device=local_device(params.device), gradient_checkpointing=params.gradient_checkpointing,
                      use_unsloth=params.use_unsloth, generation=params.generation,
                      server={"base_url": params.generation_url, "model": params.model},
                      vllm_options=generation_engine(params), engine=engine)
    teachers = None
    if specs:  # their own copies: a teacher must not drift with the student
        try:
            teachers = TeacherEnsemble(specs, shared=teacher_engines, per_node=params.teachers_per_node,
                                       seed=params.seed)
        except Exception:  # e.g. a teacher engine that finds no memory: the student's engine goes too
            student.close()
            raise
    return Trainer(student, problems, folder, settings, teachers=teachers)


def referee_shapes(params, vocab_size: int) -> tuple[GPTSettings, GPTSettings]:
    """Notebook 07's networks over the corpus's vocabulary: the main models' (`params.model`) and the small
    referee's (`params.small_referee`, reading the main models' windows: their block_size)."""
    small = replace(params.small_referee, block_size=params.model.block_size)
    return params.model.gpt(vocab_size), small.gpt(vocab_size)


def arms_from_params(params, corpus: CharCorpus) -> Arms:
    """Notebook 07's run from its parameters (azlib.lab.config.RefereeRLParams): the arms, their shapes and the loop
    settings, seeded by `params.seed`."""
    main, small = referee_shapes(params, corpus.vocab_size)
    device = local_device(params.device)
    if device.startswith("cuda"):  # fp32 GPTs from scratch: TF32 matmuls, as nanoGPT trains them (not on the CPU)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    specs = arm_specs(main, small, params.reward, list(params.ablations), params.seed)
    return Arms(specs, corpus, replace(params.train, seed=params.seed), device)


def countdown_setup(params) -> CountdownSetup:
    """Notebook 08's setup from its parameters (azlib.lab.config.CountdownParams) of the same names."""
    return CountdownSetup(**{f.name: getattr(params, f.name) for f in dataclasses.fields(CountdownSetup)})
