"""Teacher ensemble and checker with real backends: the embedded model, a real local OpenAI-compatible
server, and scripted real HTTP servers on 127.0.0.1 that inject faults."""

import math
import random
from dataclasses import replace

import httpx
import pytest

from azlib.teachers import TeacherSpec
from azlib.data import arithmetic_problems
from azlib.mcts import search
from azlib.games.text.env import TEXT_SEARCH_SAMPLING, TextEnv, teacher_values
from azlib.models import DEFAULT_MODEL, Backend, BackendError, Sample, make_backend
from azlib.models.openai import OpenAIBackend
from azlib.models.serve import BatchingServer
from azlib.settings import SearchSettings, TextSearchSettings
from azlib.teachers import TeacherEnsemble, TerminalChecker, loopback_teacher, rule_verdict, tier_teachers

CONTEXTS = [("What is 12 + 7?", ""), ("Tom has 3 apples and buys 5 more. How many apples does he have?", "Tom has")]
CHAT = [{"role": "user", "content": "What is 12 + 7?"}]


@pytest.fixture(scope="module")
def student():
    return make_backend("hf")


def local(name, **extra):
    return TeacherSpec(name=name, backend="hf", model=DEFAULT_MODEL, tier="cpu", **extra)


def remote(name, url, **extra):
    options = {"backoff": 0.01}
    return TeacherSpec(name=name, backend="openai", model="m", tier="free", base_url=url, max_retries=1,
                       options=options, **extra)


def test_local_server_matches_the_backend_and_batches_concurrent_requests(student):
    direct = student.generate([CHAT, "The capital of France is"], max_new_tokens=12)
    with BatchingServer(student, "smol", gather_seconds=0.2) as server:
        client = OpenAIBackend("smol", server.url, max_concurrency=4)
        served = client.generate([CHAT, "The capital of France is", CHAT, CHAT], max_new_tokens=12)
        assert [s[0].text for s in served[:2]] == [s[0].text for s in direct]
        assert served[0][0].logprobs == pytest.approx(direct[0][0].logprobs, abs=1e-4)
        assert server.batches < 4, "requests arriving together are answered by one generate call per sampling"
        client.close()


def test_local_server_requires_its_key(student, monkeypatch):
    with BatchingServer(student, "smol", api_key="sk-local-1") as server:
        with pytest.raises(BackendError, match="HTTP 401"):
            OpenAIBackend("smol", server.url).generate([CHAT], max_new_tokens=2)
        monkeypatch.setenv("AZLIB_TEST_KEY", "sk-local-1")
        (sample,), = OpenAIBackend("smol", server.url, api_key_env="AZLIB_TEST_KEY").generate([CHAT], max_new_tokens=2)
        assert sample.completion_tokens == 2


def test_cpu_tier_proposes_right_and_wrong_from_every_drawn_teacher(student):
    """The cpu tier and a loopback HTTP teacher its caller started (as notebook 03 does): every teacher drawn
    answers both labels in one batched call; closing the ensemble closes its own HTTP client, never the
    server or the shared backend it was given."""
    with BatchingServer(student, DEFAULT_MODEL) as server:
        with TeacherEnsemble([*tier_teachers("cpu"), loopback_teacher(server.url)], shared={DEFAULT_MODEL: student}, per_node=3,
                             seed=1) as ensemble:
            out = ensemble.propose(CONTEXTS, n=2, max_new_tokens=6, seed=5)
            assert len(out) == 2
            for proposals in out:
                by_teacher = {(p.teacher, p.label) for p in proposals}
                assert by_teacher == {(t, label) for t in ("tutor", "terse", "http-tutor") for label in "10"}
                assert len(proposals) == 3 * 2 * 2
                assert all(0 < p.sample.completion_tokens <= 6 for p in proposals)
            rows = {r["teacher"]: r for r in ensemble.report()}
            for name in ("tutor", "terse", "http-tutor"):
                assert rows[name]["calls"] == 1, "one batched call per teacher for all nodes and both labels"
                assert rows[name]["requests"] == 4 and rows[name]["tokens"] > 0 and rows[name]["failures"] == 0
            assert rows["http-tutor"]["backend"] == "openai"
            client = ensemble.teachers[2].backend
        assert client.client.is_closed(), "the ensemble closed the HTTP client it opened"
        assert httpx.get(f"{server.url}/models", timeout=5).status_code == 200, "the caller's server still serves"
    assert student.generate(["2 + 2 ="], max_new_tokens=2)[0][0].token_ids, "a shared backend stays open"


def test_weights_follow_the_documented_rule(student):
    ensemble = TeacherEnsemble([local("a"), local("b"), local("c")], shared={DEFAULT_MODEL: student},
                               ema_rate=0.5, temperature=0.1, floor=0.1)
    assert ensemble.weights() == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    ensemble.credit({"a": [0.2, 0.4], "b": [0.0]})
    ensemble.credit({"a": [0.0], "b": [0.2]})
    score_a, score_b = 0.5 * 0.3 + 0.5 * 0.0, 0.5 * 0.0 + 0.5 * 0.2
    score_c = (score_a + score_b) / 2  # never credited: the mean of the others
    exp = [math.exp(s / 0.1) for s in (score_a, score_b, score_c)]
    expected = [0.9 * e / sum(exp) + 0.1 / 3 for e in exp]
    assert list(ensemble.weights().values()) == pytest.approx(expected)
    assert len(ensemble.rule.history) == 2
    ensemble.per_node = 1
    draws = [ensemble._draw(1)[0].name for _ in range(3000)]
    for name, w in zip("abc", expected):
        assert draws.count(name) / 3000 == pytest.approx(w, abs=0.03)


@pytest.mark.parametrize("fault, error", [
    ("http500", "HTTP 500"), ("garbage", "malformed response"), ("slow", "Timeout"), ("dead", "Connect"),
])
def test_a_failing_teacher_is_benched_and_the_others_carry_on(student, server_factory, dead_port, fault, error):
    if fault == "dead":
        url = f"http://127.0.0.1:{dead_port}/v1"
    else:
        _, url = server_factory([fault] * 20)
    flaky = remote("flaky", url, timeout=0.5)
    now = [1000.0]  # a fake clock: the bench passes when the test says so, not after a real wait
    ensemble = TeacherEnsemble([flaky, local("steady")], shared={DEFAULT_MODEL: student}, per_node=1,
                               bench_seconds=3.0, seed=0, clock=lambda: now[0])
    try:
        ensemble.rule.scores |= {"steady": -10.0, "flaky": 10.0}  # draw the flaky one
        out = ensemble.propose(CONTEXTS, n=1, max_new_tokens=4, seed=1)
        assert all({p.teacher for p in props} == {"steady"} for props in out), "its nodes went to the other teacher"
        rows = {r["teacher"]: r for r in ensemble.report()}
        assert rows["flaky"]["failures"] == 1 and rows["flaky"]["benched"] and error in rows["flaky"]["last_error"]
        assert rows["flaky"]["weight"] == 0.0 and rows["steady"]["weight"] == 1.0
        now[0] += 2.9
        assert ensemble.weights()["flaky"] == 0.0, "still benched before its time is up"
        now[0] += 0.2
        assert ensemble.weights()["flaky"] > 0.9, "back after the bench time, with its old score"
    finally:
        ensemble.close()


def test_a_retried_fault_is_not_a_failure(student, server_factory):
    server, url = server_factory(["http503", "ok", "ok", "ok"])
    ensemble = TeacherEnsemble([remote("remote", url)], per_node=1)
    out = ensemble.propose(CONTEXTS[:1], n=1, max_new_tokens=4)
    assert [p.sample.text for p in out[0]] == ["#### 4", "#### 4"]
    assert ensemble.report()[0]["failures"] == 0 and len(server.requests) == 3
    ensemble.close()


class ScriptedBackend(Backend):
    """A teacher backend with no model: answers "#### 4", or raises the error it was given."""

    name = "scripted"

    def __init__(self, error: Exception | None = None):
        self.error, self.calls = error, 0

    def _generate(self, prompts, args):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return [[Sample("#### 4", (), (), "stop", 1, 1)] * args.n for _ in prompts]

    def score(self, prompts, continuations):
        raise NotImplementedError


def scripted(error: Exception | None = None):
    backends = {"good": ScriptedBackend(), "bad": ScriptedBackend(error)}
    specs = [TeacherSpec(name=name, backend="hf", model=name, tier="cpu") for name in backends]
    return TeacherEnsemble(specs, shared=backends, per_node=1, seed=0), backends


def test_a_backend_failure_benches_the_teacher_but_a_bug_propagates():
    ensemble, backends = scripted(BackendError("the engine died"))
    ensemble.rule.scores |= {"good": -10.0, "bad": 10.0}  # draw the bad one
    out = ensemble.propose(CONTEXTS, n=1, max_new_tokens=4)
    assert all({p.teacher for p in props} == {"good"} for props in out), "its nodes went to the other teacher"
    bad = {r["teacher"]: r for r in ensemble.report()}["bad"]
    assert bad["failures"] == 1 and bad["benched"] and bad["last_error"] == "BackendError: the engine died"

    ensemble, backends = scripted(TypeError("generate() got an unexpected keyword argument 'top_k'"))
    ensemble.rule.scores |= {"good": -10.0, "bad": 10.0}
    with pytest.raises(TypeError, match="unexpected keyword argument 'top_k'"):
        ensemble.propose(CONTEXTS, n=1, max_new_tokens=4)
    assert backends["bad"].calls == 1 and ensemble.report()[1]["failures"] == 0, "a bug is not a failure to bench"


def test_a_malformed_choice_is_the_servers_fault_not_a_crash(server_factory):
    _, url = server_factory(["no_message"] * 4)
    client = OpenAIBackend("m", url, max_retries=0)
    with pytest.raises(BackendError, match="sent a malformed response: KeyError"):
        client.generate([CHAT], max_new_tokens=2)
    client.close()


def test_search_with_an_ensemble_credits_the_teachers(student):
    rows = arithmetic_problems(2, seed=3, steps=(1,))
    ensemble = TeacherEnsemble([local("tutor"), local("terse", persona="terse")], shared={DEFAULT_MODEL: student},
                               per_node=2)
    env = TextEnv(student, rows, TextSearchSettings(student_samples=2, chunk_tokens=8),
                  replace(TEXT_SEARCH_SAMPLING, max_new_tokens=32), teachers=ensemble)
    results = search(env, [env.root(i) for i in range(2)], SearchSettings(num_simulations=4, max_depth=4),
                     random.Random(0))
    nodes = results[0].tree.nodes
    proposed = {p.split(":")[0] for n in nodes for p in n.info.get("proposers", []) if ":" in p}
    assert proposed == {"tutor", "terse"}, "per_node 2: both teachers were asked at every expansion"
    open_states = [n.state for r in results for n in r.tree.nodes if not n.state.answer.finished]
    assert len(open_states) > 2 and all(st.tokens == len(st.answer.token_ids) for st in open_states), \
        "a partial answer's length is its ids' (a teacher's chunk counted as the student encodes it)"
    values = teacher_values(results[0])
    assert values and set(values) <= proposed
    visited = {name: [n for n in nodes if n.visits and any(p.startswith(f"{name}:") for p in n.info.get("proposers", []))]
               for name in proposed}
    for name in proposed:  # a teacher is credited with the backed-up value of each visited child it proposed
        assert values.get(name, []) == pytest.approx([n.q for n in visited[name]])
    weights = ensemble.credit(values)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert ensemble.rule.credited == {"tutor": len(visited["tutor"]), "terse": len(visited["terse"])}


def test_checker_rule_fast_path_and_model_fallback(student):
    assert rule_verdict("so 3 + 4 = 7\n#### 7") is True
    assert rule_verdict("Let me think about this") is False
    assert rule_verdict("3 + 4 = 7") is None

    calls = []

    class Counting:
        def generate(self, prompts, **kw):
            calls.append(len(prompts))
            return student.generate(prompts, **kw)

    checker = TerminalChecker(Counting())
    texts = ["#### 7", "hmm", "3 + 4 = 7", "The answer is 7."]
    verdicts = checker.check(["What is 3 + 4?"] * 4, texts)
    assert verdicts[:2] == [True, False] and all(isinstance(v, bool) for v in verdicts)
    assert calls == [2], "one batched model call, only for the two texts the rule leaves open"
    assert (checker.by_rule, checker.by_model) == (2, 2)
    report = checker.agreement(["What is 3 + 4?"] * 4, texts)
    model = checker.ask(["What is 3 + 4?"] * 2, texts[:2])  # what the model says of the two the rule decides
    assert report["decided"] == 2 and report["agreement"] == sum(m == v for m, v in zip(model, [True, False])) / 2
    assert report["model_yes_rate"] == sum(model) / 2


def test_local_teachers_share_an_engine_unless_their_options_make_another(tiny_model_dir):
    """One model, one engine; an option (a device such as cuda:3, an adapter, a batch size) makes another."""
    from azlib.teachers.backends import TeacherBackends

    def spec(name, **options):
        return TeacherSpec(name=name, backend="hf", model=tiny_model_dir, tier="cpu", options=options)

    with TeacherBackends([spec("a"), spec("b"), spec("c", batch_size=2), spec("d", batch_size=2)]) as backends:
        a, b, c, d = (backends.by_name[name] for name in "abcd")
        assert a is b and c is d and a is not c
        assert c.batch_size == 2 != a.batch_size
        assert list(backends.engines.values()) == [a, c], "one engine per engine_key, what Engines hands on"
        with TeacherBackends([spec("e"), spec("f", batch_size=2)], shared={tiny_model_dir: a}) as given:
            assert given.by_name["e"] is a, "a teacher without options asks the backend it is given (the student's)"
            assert given.by_name["f"] is not a


def test_bad_teacher_specs_are_refused():
    with pytest.raises(ValueError, match="needs base_url"):
        TeacherSpec(name="x", backend="openai", model="m", tier="free")
    with pytest.raises(ValueError, match="unique"):
        TeacherEnsemble([remote("x", "http://127.0.0.1:9/v1"), remote("x", "http://127.0.0.1:9/v1")])
    with pytest.raises(ValueError, match="unknown teacher tier"):
        tier_teachers("gold")
    specs = tier_teachers("free")
    assert {s.api_key_env for s in specs} == {"OPENROUTER_API_KEY"} and all(s.backend == "openai" for s in specs)
    url = "http://127.0.0.1:9/v1"
    for secret in ("api_key", "hf_token", "Password"):
        with pytest.raises(ValueError, match=rf"options \['{secret}'\] would be written into the run's config.json"):
            TeacherSpec(name="x", backend="openai", model="m", tier="free", base_url=url, options={secret: "sk-1"})
    kept = {"max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.2, "adapter": "teacher-lora"}
    assert TeacherSpec(name="x", backend="vllm", model="m", tier="vllm", options=kept).options == kept
