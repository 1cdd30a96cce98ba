"""The GPU memory plan: its arithmetic on known configurations (numbers computed by hand in the comments), the
runner refusing a plan that does not fit, and the CLI printing every notebook. No model is loaded."""

from pathlib import Path

import pytest

from azlib.lab import config as azlib_config, plan, preflight, runner
from azlib.lab.cli import main
from azlib.models.student import LoraSettings
from azlib.teachers import tier_teachers

GIB = 2**30
H100 = 81_559 * 2**20  # bytes an H100 80 GB reports
QWEN_1_5B = plan.PUBLISHED_SHAPES["Qwen/Qwen2.5-1.5B-Instruct"]


def test_qwen_1_5b_student_on_one_h100_by_hand():
    # KV per token: 2 x 28 layers x 2 kv heads x 128 x 2 bytes = 28,672; a 4096-token sequence 117,440,512
    assert QWEN_1_5B.kv_bytes_per_token(2) == 28_672
    engine = plan.Engine("student", QWEN_1_5B, 0.2, 4096)
    # share 0.2 x 85,520,809,984 = 17,104,161,996.8 (15.93 GiB); weights 2 x 1,543,714,304 = 3,087,428,608;
    # KV = share - weights - 2 GiB reserve = 11,869,249,740.8 = 101.07 sequences
    assert engine.share(H100) == pytest.approx(17_104_161_996.8)
    assert engine.kv_cache(H100) == pytest.approx(11_869_249_740.8)
    assert engine.sequences(H100) == pytest.approx(101.07, abs=0.01)
    # LoRA r 32 per layer: (1536+1536) q + 2 x (1536+256) k, v + (1536+1536) o + 3 x (1536+8960) = 41,216 x 32 x 28
    lora = plan._adapter(QWEN_1_5B, LoraSettings(r=32), "adamw_8bit")
    assert QWEN_1_5B.lora_parameters(32) == 36_929_536
    assert lora.bytes == 36_929_536 * 10  # fp32 weight 4 + gradient 4 + 8-bit moments 2
    # one layer, one token: 2 x (4h + 2q + 2kv + 4i = 45,568 + 5h + q + i = 18,176) + 18,176 masks = 145,664;
    # checkpointed, 16 x 640 tokens: 10,240 x (28 x 1536 x 2 + 145,664) = 2,372,403,200
    assert QWEN_1_5B.layer_activation_bytes(2) == 145_664
    assert plan.activations(16, 640, QWEN_1_5B, "bfloat16", True).bytes == 2_372_403_200
    assert plan.activations(16, 640, QWEN_1_5B, "bfloat16", False).bytes == 10_240 * 28 * 145_664
    # 128 answers x 384 tokens x 151,936 with gradients: bf16 + three fp32 = 14 bytes a logit (the backward's
    # peak): 49,152 x 151,936 = 7,467,958,272 logits
    demo = plan.training_logits("demo", 128, 384, QWEN_1_5B, "bfloat16")
    assert demo.bytes == 104_551_415_808
    # peak = resident + engines and their processes' CUDA contexts (0.6 GiB, 644,245,094.4) + the largest phase only
    nb = plan.NotebookPlan("04", "qwen", (lora,), (engine,), (("train", (plan.Part("a", 1.0),)),
                                                              ("demo", (demo,))))
    assert nb.peak(H100) == pytest.approx(369_295_360 + 17_104_161_996.8 + 644_245_094.4 + 104_551_415_808)
    assert nb.problems(H100)[0].startswith("04: predicted peak 114.2 GiB exceeds the 79.6 GiB free by 34.6 GiB; "
                                           "its largest part: demo logits")


def test_the_original_systems_teachers_on_one_h100_are_sized_as_measured():
    engines = {e.name: e for e in plan._teacher_engines(type("P", (), {"teacher_tier": "vllm-original"}))}
    llama, gemma = engines["llama-3.1-8b"], engines["gemma-2-9b"]
    assert llama.weights() / GIB == pytest.approx(14.96, abs=0.005)  # more than the weights fill the 15.93
    assert llama.share(H100) / GIB == pytest.approx(15.93, abs=0.005)
    # short by one 4096-token sequence (2 x 32 x 8 x 128 x 2 x 4096 = 0.5 GiB) + 2 GiB reserve - (15.93 - 14.96)
    assert "vLLM engine llama-3.1-8b (0.2 x 79.6 GiB = 15.93 GiB) is 1.53 GiB short" in " ".join(
        plan.NotebookPlan("03", "x", engines=(llama,)).problems(H100))
    # Gemma 2 9B at 0.25: 19.91 - 17.21 weights - 2 = 0.70 GiB, half a sequence of 344,064 x 4096 bytes
    assert gemma.sequences(H100) == pytest.approx(0.53, abs=0.01)
    phi = {e.name: e for e in [plan.Engine(s.name, plan.model_shape(s.model)[0], s.options["gpu_memory_utilization"],
                                           4096) for s in tier_teachers("vllm")]}["phi-3.5-mini"]
    assert phi.kv_cache(H100) / GIB == pytest.approx(2.03, abs=0.01)  # 11.15 - 7.12 - 2
    assert phi.sequences(H100) == pytest.approx(1.36, abs=0.01)  # 393,216 bytes a token x 4096


@pytest.mark.parametrize("name", sorted(plan.PUBLISHED_SHAPES))
def test_published_parameter_counts_agree_with_the_published_shapes(name):
    """A typo in the copied table shows: the count from its shapes is within 0.2% of the model card's."""
    s = plan.PUBLISHED_SHAPES[name]
    config = {"num_hidden_layers": s.layers, "hidden_size": s.hidden, "num_attention_heads": s.heads,
              "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim, "vocab_size": s.vocab,
              "intermediate_size": s.intermediate, "tie_word_embeddings": s.tied_embeddings}
    assert plan.ModelShape.from_config(config).parameters == pytest.approx(s.parameters, rel=0.002)


def test_the_runner_refuses_a_plan_larger_than_the_free_memory_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(preflight, "gpu_memory", lambda: (20 * GIB, H100))
    out = tmp_path / "run"
    assert main(["run", "--profile", "h100", "--only", "04", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    # 34.0 GiB of weights, adapter, engine and micro-batch + 1.0 context + 5.3 allocator cache after training
    # + 0.6 the engine process's context
    assert "04_gsm8k_run: predicted peak 40.4 GiB exceeds the 20.0 GiB free by 20.4 GiB" in err
    assert "its largest part: vLLM engine student (15.9 GiB)" in err
    assert not (out / "config.json").exists()


def test_plan_cli_prints_every_notebook_of_h100_and_says_h100_original_needs_more(capsys):
    assert main(["plan", "--profile", "h100"]) == 0
    text = capsys.readouterr().out
    assert [nb.stem for nb in azlib_config.list_notebooks()] == [line.split()[0] for line in text.splitlines()
                                                           if line[:2].isdigit()]
    assert "DOES NOT FIT" not in text
    assert main(["plan", "--profile", "h100-original"]) == 1
    assert "needs a GPU of at least" in capsys.readouterr().out


def test_notebook_05s_time_counts_what_each_model_answers_through_which_backend_and_every_trained_token():
    """The h100 profile's 05: 6 arms x 3 seeds. azlib's 5 arms generate 3 x 400,000 tokens each through one
    engine of the student; TRL's 1,200,000 through its own engine, one per seed. Training is counted in the rate's
    unit, rows x (256 prompt + 384 answer) tokens: the GRPO arms (tree_grpo, grpo, trl) train each answer once,
    9 x 400,000 / 384 = 9,375 rows = 6,000,000 tokens; the imitation arms (tree, tree_teachers, rft) train their
    64-answer replay every step, ceil(400,000 / (8 x 8 x 384)) = 17 steps: 9 x 17 x 64 = 9,792 rows = 6,266,880.
    19 models (the base, 6 arms x 3 seeds) answer the 1,319 GSM8K test problems once (the 500 held-out among
    them) through one instrument: 19 x 1,319 x 384 = 9,623,424. Engines started: the student's once, the two
    teachers' once (tree_teachers asks them), TRL's three."""
    from azlib.lab.config import resolve_library

    params = resolve_library("05_base_vs_trained", "h100", "outputs/plan")[0]
    notebook = plan.notebook_plan("05_base_vs_trained", params)
    assert [(w.what.split(" (")[0].split(",")[0], w.tokens) for w in notebook.work] == [
        ("generation", 6_000_000), ("training: GRPO arms' answers", 6_000_000),
        ("training: imitation arms' replay", 6_266_880), ("evaluation of 19 models", 9_623_424),
        ("the TRL arm's generation", 1_200_000)]
    assert {w.rate.unit for w in notebook.work if w.what.startswith("training")} == {"prompt + answer tokens"}
    assert notebook.engine_starts == 6
    # seconds: each work at its rate scaled by 1.5e9 / 1,543,714,304 parameters, and 6 starts of 60 s
    scale = 1.5e9 / 1_543_714_304
    expected = ((6_000_000 + 9_623_424 + 1_200_000) / (5_000 * scale) + (6_000_000 + 6_266_880) / (7_000 * scale)
                + 6 * 60) / 3600
    assert notebook.hours() == pytest.approx(expected)


def test_notebook_06s_teacher_writes_through_an_engine_and_its_students_answer_through_one():
    """The h100 profile's 06: 50 steps x 8 problems x 16 explanations x 256 tokens = 1,638,400, and the untrained
    and trained teachers' 1,000 SFT explanations each (512,000) through the teacher's engine (0.2 of the GPU);
    the base and the 3 students answer 500 problems x 512 tokens each through one engine of the student model;
    no hf generation phase is left."""
    from azlib.lab.config import NOTEBOOKS_DIR, resolve

    params = resolve(NOTEBOOKS_DIR / "06_rlt_teachers.ipynb", "h100", Path("outputs/plan"))[0]
    notebook = plan.notebook_plan("06_rlt_teachers", params)
    work = {w.what: w.tokens for w in notebook.work}
    assert work["teacher generation (vllm)"] == 1_638_400 + 512_000
    assert work["evaluation of the base and 3 students (vllm)"] == 4 * 500 * 512
    assert [(e.name, e.utilization) for e in notebook.engines] == [("teacher", 0.2)]
    assert [name for name, _ in notebook.phases] == ["teacher's micro-batch", "scoring explanations"]


def test_the_h100_profile_is_planned_within_three_hours_and_fits_an_h100_with_a_tenth_spare(capsys):
    from azlib.lab.config import NOTEBOOKS_DIR, resolve

    hours = 0.0
    for nb in runner.list_notebooks():
        params = resolve(NOTEBOOKS_DIR / nb.name, "h100", Path("outputs/plan"))[0]
        notebook = plan.notebook_plan(nb.stem, params)
        assert notebook.peak(plan.H100_GIB * plan.GIB) <= 0.9 * plan.H100_GIB * plan.GIB, nb.stem
        hours += notebook.hours()
    assert hours <= 3.0
    assert main(["plan", "--profile", "h100"]) == 0
    assert f"the whole profile: predicted {hours:.2f} h" in capsys.readouterr().out


def test_notebook_07_holds_its_small_referee_beside_the_main_size_arms():
    """h100: ce, rl, rl_gt_only, rl_small_referee at 12 x 6 x 384^2 = 10,616,832 parameters and the small
    referee at 12 x 3 x 192^2 = 1,327,104: (4 x 10,616,832 + 1,327,104) x 16 bytes = 700,710,912."""
    from azlib.lab.config import resolve_library

    params = resolve_library("07_referee_rl", "h100", "outputs/plan")[0]
    weights = plan.notebook_plan("07_referee_rl", params).resident[0]
    assert weights.name.startswith("5 GPTs") and weights.bytes == 700_710_912


def test_notebook_08_on_a_gpu_holds_a_gpt_per_worker_and_predicts_no_time():
    """h100 with device=cuda: the kernel and 2 workers, each 12 x 4 x 128^2 = 786,432 parameters x 16 bytes =
    12,582,912 and a CUDA context; no time, since no GPU run of notebook 08 measured a rate."""
    from azlib.lab.config import resolve_library

    params = resolve_library("08_countdown_alphazero", "h100", "outputs/plan", ["device=cuda"])[0]
    countdown = plan.notebook_plan("08_countdown_alphazero", params)
    assert countdown.resident[0].bytes == 37_748_736 and countdown.resident[1].name.startswith("3 CUDA contexts")
    assert countdown.hours() == 0 and "time not predicted" in countdown.models
