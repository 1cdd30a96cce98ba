"""An OpenAI request body (/v1/chat/completions, /v1/completions) checked field by field before any work, and
the OpenAI error shape every refusal is sent in. Not the server (azlib.models.serve) and not a client."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from azlib.models.generation import Message

ROLES = {"system", "developer", "user", "assistant", "tool"}
MAX_STOPS = 4  # stop strings per request, as OpenAI allows
MAX_STOP_CHARS = 64  # the hf backend decodes this many of the newest tokens at every step to look for a stop
SEED_RANGE = (-(2**63), 2**63 - 1)  # what torch.Generator.manual_seed takes


class ApiError(Exception):
    """A refusal with its HTTP status, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class CompletionRequest:
    """What the server reads from a request, typed. max_tokens None: the server's default, cut to the context."""

    chat: bool
    prompt: str | tuple[Message, ...]
    n: int
    max_tokens: int | None
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None
    stream: bool

    @property
    def prompt_param(self) -> str:
        return "messages" if self.chat else "prompt"


def parse_request(raw: bytes, *, chat: bool, model: str, max_n: int, max_tokens: int) -> CompletionRequest:
    """The request in `raw`, or ApiError: 400 for a malformed body or field, 404 for a model not served here."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as err:
        raise ApiError(400, f"the body is not valid JSON: {err}", code="invalid_json") from None
    except RecursionError:  # the json module parses nested arrays and objects by recursion
        raise ApiError(400, "the body's JSON is nested too deep to parse", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, got {_kind(body)}", code="invalid_type")
    asked = body.get("model")
    if not isinstance(asked, str):
        raise ApiError(400, f"'model' must be a string naming the served model ({model!r}), got {_kind(asked)}",
                       param="model", code="invalid_type" if "model" in body else "missing_required_parameter")
    if asked != model:
        raise ApiError(404, f"The model {asked!r} does not exist; this server serves {model!r}", param="model",
                       code="model_not_found")
    tokens_field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return CompletionRequest(
        chat=chat,
        prompt=_messages(body) if chat else _prompt(body),
        n=_integer(body, "n", 1, 1, max_n),
        max_tokens=_integer(body, tokens_field, None, 1, max_tokens),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, open_low=True),
        stop=_stop(body),
        seed=_integer(body, "seed", None, *SEED_RANGE),
        stream=_flag(body, "stream"),
    )


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def _bad(name: str, message: str, code: str = "invalid_type") -> ApiError:
    return ApiError(400, f"'{name}' {message}", param=name, code=code)


def _integer(body: dict, name: str, default, low: int, high: int):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an integer, got {_kind(value)}")
    if not low <= value <= high:
        raise _bad(name, f"must be from {low} to {high} on this server, got {value}", "invalid_value")
    return value


def _number(body: dict, name: str, default: float, low: float, high: float, *, open_low: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, f"must be a number, got {_kind(value)}")
    if not math.isfinite(value) or not (low < value if open_low else low <= value) or value > high:
        raise _bad(name, f"must be in {'(' if open_low else '['}{low}, {high}], got {value}", "invalid_value")
    return float(value)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise _bad(name, f"must be a boolean, got {_kind(value)}")
    return bool(value)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
        raise _bad("stop", f"must be a string or an array of strings, got {_kind(stop)}")
    if len(stops) > MAX_STOPS or not all(0 < len(s) <= MAX_STOP_CHARS for s in stops):
        raise _bad("stop", f"takes up to {MAX_STOPS} strings of 1 to {MAX_STOP_CHARS} characters", "invalid_value")
    return tuple(stops)


def _prompt(body: dict) -> str:
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise _bad("prompt", f"must be a string (this server takes one prompt per request), got {_kind(prompt)}",
                   "invalid_type" if "prompt" in body else "missing_required_parameter")
    if not prompt:
        raise _bad("prompt", "must not be empty", "invalid_value")
    return prompt


def _messages(body: dict) -> tuple[Message, ...]:
    """Chat messages with list-of-parts content flattened to its text (chat templates want text)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", f"must be a non-empty array of messages, got {_kind(messages)}",
                   "invalid_type" if "messages" in body else "missing_required_parameter")
    plain = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(where, f"must be an object with 'role' and 'content', got {_kind(message)}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise _bad(f"{where}.role", f"must be one of {sorted(ROLES)}, got {role!r}", "invalid_value")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise _bad(f"{where}.content", "parts must be {'type': 'text', 'text': <string>} (text only here)")
            content = "".join(p["text"] for p in content)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise _bad(f"{where}.content", f"must be a string or an array of text parts, got {_kind(content)}")
        plain.append({"role": role, "content": content})
    return tuple(plain)
