"""The OpenAI-compatible HTTP backend: any server speaking /v1/completions and /v1/chat/completions (vllm serve,
llama.cpp server, OpenRouter) through the `openai` SDK's client, its timeouts and retries. Keys from env vars."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import openai

from azlib.models.generation import Backend, BackendError, GenerateArgs, Prompt, Sample

RETRIED_STATUS = {408, 409, 429} | set(range(500, 600))  # what the SDK retries (besides connection errors)


class OpenAIBackend(Backend):
    """api_key_env names the environment variable holding the key (api_key: a key held in memory, e.g.
    for a server this process started); the key itself is never stored in params, outputs or errors.
    max_retries: retries after a failed attempt (the SDK's, and this backend's for malformed replies, which
    wait `backoff` x 2^attempt seconds)."""

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key_env: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 8,
    ):
        if api_key_env and not api_key:
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise BackendError(f"environment variable {api_key_env} (the API key for {base_url}) is not set")
        self.model, self.base_url = model, base_url.rstrip("/")
        self.max_retries, self.backoff, self.max_concurrency = max_retries, backoff, max_concurrency
        # The SDK insists on a key; a server that checks none gets vLLM's placeholder (never the user's
        # OPENAI_API_KEY, which the SDK would otherwise read and send to whatever base_url says).
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "EMPTY", timeout=timeout,
                                    max_retries=max_retries)

    def close(self) -> None:
        self.client.close()

    def _post(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST through the SDK (which retries what a server may get right next time); a malformed reply is
        retried here; another 4xx is the caller's mistake, raised at once."""
        url, attempts = f"{self.base_url}{route}", self.max_retries + 1
        for attempt in range(attempts):
            try:
                body = self.client.post(route, body=payload, cast_to=object)
            except openai.APIStatusError as err:
                answer = f"HTTP {err.status_code}: {err.response.text[:300]}"
                if err.status_code in RETRIED_STATUS:
                    raise BackendError(f"{url} failed after {attempts} attempts; last error: {answer}") from None
                raise BackendError(f"{url} answered {answer}") from None
            except openai.APIConnectionError as err:
                cause = err.__cause__ or err
                raise BackendError(f"{url} failed after {attempts} attempts; last error: "
                                   f"{type(cause).__name__}: {cause}") from None
            except json.JSONDecodeError:
                problem = "malformed response: not JSON"
            else:
                if isinstance(body, dict) and body.get("choices"):
                    return body
                problem = "malformed response: no 'choices'"
            if attempt < self.max_retries:
                time.sleep(self.backoff * 2**attempt)
        raise BackendError(f"{url} failed after {attempts} attempts; last error: {problem}")

    def _request_body(self, args: GenerateArgs) -> dict[str, Any]:
        """The request fields every prompt of one generate call shares."""
        return {"model": self.model, "n": args.n, "max_tokens": args.max_new_tokens,
                "temperature": args.temperature, "top_p": args.top_p, "stop": list(args.stop) or None,
                "seed": args.seed}

    def _each(self, one, prompts: list[Prompt]) -> list[list[Sample]]:
        """`one(prompt)` for every prompt, up to max_concurrency requests in flight (servers batch them)."""
        with ThreadPoolExecutor(self.max_concurrency) as pool:
            return list(pool.map(one, prompts))

    def _generate(self, prompts: list[Prompt], args: GenerateArgs) -> list[list[Sample]]:
        """One request per prompt."""
        common = self._request_body(args)

        def one(prompt: Prompt) -> list[Sample]:
            if isinstance(prompt, str):
                body = self._post("/completions", {**common, "prompt": prompt, "logprobs": 0})
                return self._samples("/completions", body, self._completion_sample)
            messages = list(prompt)
            extra = {}
            if messages and messages[-1]["role"] == "assistant":  # vLLM's way to continue a partial answer
                extra = {"continue_final_message": True, "add_generation_prompt": False}
            body = self._post("/chat/completions", {**common, **extra, "messages": messages, "logprobs": True})
            return self._samples("/chat/completions", body, self._chat_sample)

        return self._each(one, prompts)

    def _samples(self, route: str, body: dict, read) -> list[Sample]:
        """One sample per choice; a choice not in the expected shape is the server's fault, a BackendError."""
        try:
            return [read(choice, body) for choice in body["choices"]]
        except (KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError) as err:
            raise BackendError(f"{self.base_url}{route} sent a malformed response: {type(err).__name__}: {err}") from None

    @staticmethod
    def _finish(choice: dict) -> str:
        return "length" if choice.get("finish_reason") == "length" else "stop"

    def _completion_sample(self, choice: dict, body: dict) -> Sample:
        logprobs = tuple((choice.get("logprobs") or {}).get("token_logprobs") or ())
        return self._sample(choice["text"], logprobs, self._finish(choice), body)

    def _chat_sample(self, choice: dict, body: dict) -> Sample:
        content = (choice.get("logprobs") or {}).get("content") or ()
        return self._sample(choice["message"]["content"] or "", tuple(t["logprob"] for t in content),
                            self._finish(choice), body)

    @staticmethod
    def _sample(text: str, logprobs: tuple[float, ...], finish: str, body: dict) -> Sample:
        usage = body.get("usage") or {}
        tokens = len(logprobs) or usage.get("completion_tokens", 0) // len(body["choices"])
        return Sample(text=text, token_ids=(), logprobs=logprobs, finish_reason=finish,
                      prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=tokens)

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[str | Sequence[int]]) -> list[list[float]]:
        raise BackendError("score() needs the model's tokenizer and logits: use a local hf or vllm backend")
