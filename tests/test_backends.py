"""The generation interface: hf on the real embedded model; openai against real local HTTP servers."""

import pytest

from azlib.models import BackendError, make_backend
from azlib.models.openai import OpenAIBackend

QUESTIONS = ["What is 12 + 7?", "What is the capital of France?", "Say hi.",
             "Tom has 3 apples and buys 5 more. How many apples does he have?"]
CHATS = [[{"role": "user", "content": q}] for q in QUESTIONS]


HF_BATCH_SIZE = 3  # the four prompts span two batches of different widths (the conftest `hf` fixture reads it)


def test_batching_gives_the_same_greedy_text_as_one_at_a_time(hf):
    batched = hf.generate(CHATS, max_new_tokens=24)
    single = [hf.generate([c], max_new_tokens=24)[0][0] for c in CHATS]
    assert [s[0].token_ids for s in batched] == [s.token_ids for s in single]
    assert [s[0].text for s in batched] == [s.text for s in single]
    assert "Paris" in batched[1][0].text


def test_sample_records_are_consistent(hf):
    (sample,), = hf.generate(CHATS[1:2], max_new_tokens=40)
    assert sample.finish_reason == "stop" and sample.token_ids[-1] in hf.eos_ids
    assert sample.completion_tokens == len(sample.token_ids) == len(sample.logprobs)
    assert sample.prompt_tokens == len(hf.encode_prompt(CHATS[1]))
    assert all(lp <= 0 for lp in sample.logprobs)
    (short,), = hf.generate(CHATS[3:4], max_new_tokens=5)
    assert short.finish_reason == "length" and short.completion_tokens == 5


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_score_reproduces_generation_logprobs(hf, temperature):
    out = hf.generate(CHATS, n=2, max_new_tokens=20, temperature=temperature, top_p=0.9, seed=3)
    flat = [(c, s) for c, samples in zip(CHATS, out) for s in samples]
    scores = hf.score([c for c, _ in flat], [s.token_ids for _, s in flat])
    for (_, s), sc in zip(flat, scores):
        assert len(sc) == len(s.logprobs)
        assert max(abs(a - b) for a, b in zip(sc, s.logprobs)) < 1e-3


def test_score_ranks_a_fact_above_a_falsehood(hf):
    paris, london = hf.score(["The capital of France is"] * 2, [" Paris", " London"])
    assert sum(paris) > sum(london) + 2


def test_sampling_is_seeded(hf):
    a = hf.generate(CHATS[:2], n=3, max_new_tokens=12, temperature=1.0, seed=11)
    b = hf.generate(CHATS[:2], n=3, max_new_tokens=12, temperature=1.0, seed=11)
    assert [[s.text for s in g] for g in a] == [[s.text for s in g] for g in b]
    assert len({s.text for s in a[0]}) > 1, "three samples at temperature 1 should differ"


def test_stop_strings_end_a_sample_and_are_cut(hf):
    prompt = "Question: What is 2 + 2?\nAnswer:"
    (free,), = hf.generate([prompt], max_new_tokens=30)
    assert "\n" in free.text, "the check needs a completion that goes on past a newline"
    (stopped,), = hf.generate([prompt], max_new_tokens=30, stop=["\n"])
    assert "\n" not in stopped.text and free.text.startswith(stopped.text)
    assert stopped.finish_reason == "stop"
    assert "\n" in hf.tokenizer.decode(stopped.token_ids), "the stop string's tokens stay in token_ids"
    assert stopped.completion_tokens < free.completion_tokens


def test_a_row_can_end_at_its_answer_line(hf):
    prompt = "Count: #### 1\n#### 2\n#### 3\n#### 4\n"
    (free,), = hf.generate([prompt], max_new_tokens=12)
    (stopped,), = hf.generate([prompt], max_new_tokens=12, stop_at_answer=True)
    assert free.text.count("####") > 1, "the model goes on after its first answer line"
    assert stopped.text.count("####") == 1 and stopped.text.endswith("\n") and free.text.startswith(stopped.text)
    assert stopped.finish_reason == "stop" and stopped.completion_tokens < free.completion_tokens
    assert hf.tokenizer.decode(stopped.token_ids) == stopped.text and len(stopped.logprobs) == len(stopped.token_ids)


def test_the_backend_knows_which_ids_write_a_newline_and_end_an_answer(hf):
    line, two_lines = hf.encode_continuation("12 + 7 = 19"), hf.encode_continuation("12 + 7 = 19\n#### 19")
    assert not any(hf.writes_newline(t) for t in line) and sum(hf.writes_newline(t) for t in two_lines) == 1
    assert not hf.writes_newline(len(hf.tokenizer) + 3), "an id past the tokenizer's vocabulary writes nothing"
    [blank_line] = [t for t in range(len(hf.tokenizer)) if hf.tokenizer.decode([t]) == "\n\n"]
    assert hf.writes_newline(blank_line) and not hf.writes_newline(two_lines[-1])
    eos = hf.tokenizer.eos_token_id
    assert hf.with_eos(line, finished=True) == [*line, eos]
    assert hf.with_eos([*line, eos], finished=True) == [*line, eos] and hf.with_eos(line, finished=False) == line
    with pytest.raises(BackendError, match="openai backend has no tokenizer"):
        OpenAIBackend("m", "http://127.0.0.1:9/v1").writes_newline(5)


def test_a_final_assistant_message_is_continued(hf):
    partial = [{"role": "user", "content": "What is 12 + 7?"}, {"role": "assistant", "content": "12 + 7 ="}]
    rendered = hf.render(partial)
    assert rendered.endswith("12 + 7 =") and rendered.count("<|im_start|>assistant") == 1


def test_bad_sampling_arguments_are_refused(hf):
    with pytest.raises(ValueError, match="top_p"):
        hf.generate(CHATS[:1], top_p=0.0)
    with pytest.raises(ValueError, match="n >= 1"):
        hf.generate(CHATS[:1], n=0)
    with pytest.raises(ValueError, match="unknown backend 'tgi'"):
        make_backend("tgi")


# --- openai backend against real HTTP servers on 127.0.0.1 -------------------------------------


def test_openai_backend_retries_server_errors_and_garbage(server_factory):
    server, url = server_factory(["http500", "garbage", "http503"])
    backend = OpenAIBackend("m", url, max_retries=3, backoff=0.01)
    (sample,), = backend.generate([[{"role": "user", "content": "2+2?"}]], max_new_tokens=5, seed=1)
    assert sample.text == "#### 4" and sample.logprobs == (-0.5, -0.25) and sample.prompt_tokens == 9
    assert len(server.requests) == 4
    path, _, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["max_tokens"] == 5 and body["seed"] == 1 and body["logprobs"]


def test_openai_backend_gives_up_with_a_clear_error(server_factory):
    server, url = server_factory(["http500"] * 10)
    with pytest.raises(BackendError, match=r"/v1/chat/completions failed after 3 attempts; last error: HTTP 500"):
        OpenAIBackend("m", url, max_retries=2, backoff=0.01).generate(CHATS[:1])
    server, url = server_factory(["http400"])
    with pytest.raises(BackendError, match="answered HTTP 400"):
        OpenAIBackend("m", url, backoff=0.01).generate(CHATS[:1])
    assert len(server.requests) == 1, "a client error is not retried"


def test_openai_backend_reports_a_dead_server(dead_port):
    port = dead_port
    with pytest.raises(BackendError, match=rf"127.0.0.1:{port}/v1/completions failed after 2 attempts; last error: Connect"):
        OpenAIBackend("m", f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01).generate(["hi"])


def test_api_key_comes_from_the_environment_and_is_never_echoed(server_factory, monkeypatch):
    server, url = server_factory(["http401"])
    with pytest.raises(BackendError, match="environment variable AZLIB_TEST_KEY .* is not set"):
        OpenAIBackend("m", url, api_key_env="AZLIB_TEST_KEY")
    monkeypatch.setenv("AZLIB_TEST_KEY", "sk-secret-123")
    with pytest.raises(BackendError) as err:
        OpenAIBackend("m", url, api_key_env="AZLIB_TEST_KEY").generate(CHATS[:1])
    headers = {k.lower(): v for k, v in server.requests[0][1].items()}
    assert headers["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in str(err.value)


GEMMA_LIKE = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
              "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def test_a_template_without_a_system_role_gets_the_system_text_in_the_user_turn(hf):
    import copy

    from azlib.models.generation import TokenizerPrompts

    prompts = TokenizerPrompts()
    prompts.tokenizer = copy.deepcopy(hf.tokenizer)
    prompts.tokenizer.chat_template = GEMMA_LIKE  # Gemma 2's rule: a system turn raises
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}]
    with pytest.raises(Exception, match="System role not supported"):
        prompts.tokenizer.apply_chat_template(messages, tokenize=False)
    assert prompts.render(messages) == "<start_of_turn>user\nBe terse.\n\n2+2?<end_of_turn>\n<start_of_turn>model\n"


def test_hf_batches_sized_by_memory_hold_that_many_rows_of_kv_cache(hf):
    """Rows x tokens x (2 x layers x kv heads x head dim x bytes) within the memory given, clamped to
    [BATCH_SIZE, MOST_ROWS]; an evaluation then hands the backend at least a whole batch at once."""
    from azlib.models.hf import BATCH_SIZE, MOST_ROWS

    config, before = hf.model.config.get_text_config(), hf.batch_size
    try:
        # SmolLM2-135M: 30 layers, 3 KV heads of 64, fp32: 2 x 30 x 3 x 64 x 4 = 46,080 bytes a token
        per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * 64 * 4
        assert per_token == 46_080
        assert hf.size_batches(500, 100 * 500 * per_token + 1) == 100 == hf.batch_size == hf.prompts_per_call
        assert hf.size_batches(500, 1) == BATCH_SIZE and hf.prompts_per_call == 64
        assert hf.size_batches(500, 10**15) == MOST_ROWS
    finally:
        hf.batch_size = before
