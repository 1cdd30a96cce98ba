"""benchmarks/gpu_smoke.py, the H100 path's smoke run, on the CPU with a tiny random model: every
phase runs, training resumes from its checkpoint, and the report holds each phase's time and memory."""

import json
import subprocess
import sys

import pytest

from azlib.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.model]


def test_gpu_smoke_benchmark_runs_on_the_cpu(tmp_path):
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_smoke.py"), "--device", "cpu",
                          "--dtype", "float32", "--shape", "tiny", "--out", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    phases = report["phases"]
    assert list(phases) == ["versions", "student", "decode", "score_demo", "train_sft_step", "train_grpo_step",
                            "resume", "evaluate_64"]
    assert all(p["seconds"] >= 0 and p["peak_rss_mb"] > 0 for p in phases.values())
    assert phases["score_demo"]["answers"] == 16 and phases["score_demo"]["tokens"] == 16 * 48
    assert phases["score_demo"]["finite"] and phases["score_demo"]["plan_logits_mb"] > 0
    assert phases["train_sft_step"]["steps"] == phases["train_grpo_step"]["steps"] == 1
    assert phases["train_grpo_step"]["plan_micro_batch_mb"] > 0 and phases["train_grpo_step"]["tokens"] > 0
    assert phases["resume"]["resumed_at_step"] == 1 and phases["resume"]["optimizer_state_restored"]
    assert phases["decode"]["tokens"] > 0 and phases["evaluate_64"]["tokens"] > 0
    assert report["optimizer_check"] == phases["train_grpo_step"]["optimizer"] == "AdamW", "no bitsandbytes here"
