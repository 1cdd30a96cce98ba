"""The TRL arm's generation stops where azlib's samplers stop: at the first answer line."""

from __future__ import annotations

import torch

from azlib.data.arithmetic import arithmetic_problems
from azlib.lab.trl_arm import answer_line_stop
from azlib.prompts import ANSWER_LINE, chat_prompt
from azlib.rewards import complete_answer


def test_trl_generation_stops_at_the_answer_line(embedded):
    model, tokenizer = embedded
    prompts = [tokenizer.apply_chat_template(chat_prompt(r["prompt"]), tokenize=False, add_generation_prompt=True)
               for r in arithmetic_problems(8, seed=5, steps=(1,))]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")

    def completions(**stop):
        torch.manual_seed(0)
        out = model.generate(**inputs, do_sample=True, temperature=1.0, top_p=1.0, max_new_tokens=96,
                             pad_token_id=tokenizer.eos_token_id, **stop)
        return [tokenizer.decode(row, skip_special_tokens=True) for row in out[:, inputs["input_ids"].shape[1]:]]

    free, stopped = completions(), completions(stopping_criteria=answer_line_stop(tokenizer))
    # unstopped, some rows go on past their answer line; stopped, every row is what training keeps of it
    assert any(ANSWER_LINE.search(t) and complete_answer(t, False)[0] != t for t in free)
    assert all(complete_answer(t, False)[0] == t for t in stopped)
    assert sum(bool(ANSWER_LINE.search(t)) for t in stopped) >= 2
    # a row is the same sample up to where it stopped (the criterion changes nothing before)
    for a, b in zip(free, stopped):
        assert a.startswith(b)


def test_the_trl_arm_trains_in_the_runs_micro_batches_and_generates_as_the_run_does(tmp_path, embedded):
    """One optimiser step per problems_per_step x group_size answers, generated at once, trained in micro-batches
    of at most grpo.micro_batch_size rows, train.steps steps at most; generation "vllm" hands TRL its colocated
    engine with the run's share."""
    from azlib.lab.config import resolve_library
    from azlib.lab.trl_arm import trl_config

    _, tokenizer = embedded
    base = ["train.problems_per_step=6", "train.group_size=4", "grpo.micro_batch_size=16"]
    params, _ = resolve_library("05_base_vs_trained", "smoke", tmp_path, base)
    config = trl_config(params, tmp_path, tokenizer)
    assert (config.per_device_train_batch_size, config.gradient_accumulation_steps) == (12, 2)
    assert config.generation_batch_size == 24 and config.num_generations == 4 and not config.use_vllm
    assert config.max_steps == params.train.steps, "train.steps bounds the TRL arm as it bounds azlib's"
    params, _ = resolve_library("05_base_vs_trained", "smoke", tmp_path,
                                base + ["generation=vllm", "generation_memory=0.3"])
    config = trl_config(params, tmp_path, tokenizer)
    assert config.use_vllm and config.vllm_mode == "colocate" and config.vllm_gpu_memory_utilization == 0.3
    assert config.generation_batch_size == 24 and config.per_device_train_batch_size == 12
