"""The verifiers taskset (azlib_gsm8k), in .venv-verifiers (make test-verifiers): it loads through
verifiers' own loader, its rewards equal azlib's on real completions, and `vf-eval` runs it end to end
against a real OpenAI-compatible server on 127.0.0.1 serving the embedded model."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from azlib.prompts import chat_prompt
from azlib.models.serve import BatchingServer
from azlib.rewards import hard_reward, perplexity_reward

pytestmark = pytest.mark.verifiers


@pytest.fixture(scope="module")
def vf():
    import verifiers.v1

    return verifiers.v1


def load(vf, **config):
    from verifiers.v1.utils.loaders import load_taskset

    return list(load_taskset(vf.taskset_config_type("azlib-gsm8k")(id="azlib-gsm8k", **config)))


def test_taskset_loads_gsm8k_and_the_easy_task(vf, gsm8k_dir):
    tasks = load(vf, source=str(gsm8k_dir), num_tasks=3)
    assert [t.data.id for t in tasks] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]
    assert tasks[0].data.answer == "18" and tasks[0].data.prompt == chat_prompt(tasks[0].data.question)[0]["content"]
    easy = load(vf, task_name="arithmetic", num_tasks=4, seed=3)
    assert len(easy) == 4 and all(t.data.source == "arithmetic" for t in easy)


def test_rewards_equal_azlib_on_real_completions(vf, hf, gsm8k_dir):
    tasks = load(vf, source=str(gsm8k_dir), num_tasks=3)
    replies = [g[0].text for g in hf.generate([chat_prompt(t.data.question) for t in tasks], max_new_tokens=48)]
    replies[0] += "\n#### 18"  # one correct answer among the real ones
    for task, reply in zip(tasks, replies):
        trace = vf.Trace.model_construct(root_reply=reply, rewards={}, metrics={}, nodes=[])
        asyncio.run(task.score(trace))
        hre = hard_reward(reply.strip(), task.data.answer)
        pre = perplexity_reward(hf.score([chat_prompt(task.data.question)], [reply.strip()])[0])
        assert trace.rewards["correctness"].score == hre and trace.rewards["correctness"].weight == 0.4
        assert trace.rewards["perplexity"].score == pytest.approx(pre, abs=1e-5)
        assert trace.rewards["perplexity"].weight == 0.6
        assert trace.reward == pytest.approx(0.4 * hre + 0.6 * pre, abs=1e-5)
    assert [hard_reward(r, t.data.answer) for r, t in zip(replies, tasks)][0] == 1.0


def test_vf_eval_runs_against_a_local_server(vf, hf, gsm8k_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("AZLIB_VF_TEST_KEY", "sk-vf-local-42")
    vf_eval = Path(sys.executable).parent / "vf-eval"
    with BatchingServer(hf, "smollm2", api_key="sk-vf-local-42") as server:
        proc = subprocess.run(
            [str(vf_eval), "azlib-gsm8k", "-n", "2", "-r", "1", "-m", "smollm2", "--client.base-url", server.url,
             "--client.api-key-var", "AZLIB_VF_TEST_KEY", "--env.agent.harness.id", "null",
             "--env.agent.runtime.type", "subprocess", "--no-push", "--env.agent.max-output-tokens", "32",
             "--env.taskset.source", str(gsm8k_dir), "-o", str(tmp_path)],
            capture_output=True, text=True, timeout=600, cwd=tmp_path, env=os.environ)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (traces_file,) = tmp_path.glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines()]
    traces = [t for e in episodes for t in e["traces"]]
    assert len(traces) == 2 and all(e["ok"] for e in episodes)
    for trace in traces:
        assert set(trace["rewards"]) == {"correctness", "perplexity"}
        assert trace["rewards"]["perplexity"]["score"] < 0, "scored under the embedded model"
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and b"sk-vf-local-42" in p.read_bytes()]
    assert not leaked, "the API key must not be written out"
    shutil.rmtree(tmp_path, ignore_errors=True)
