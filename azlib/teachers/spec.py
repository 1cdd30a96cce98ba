"""One teacher of the ensemble as data: which backend and model, its tier, persona and limits.
Validated when built (pydantic); the ensemble that runs teachers is azlib.teachers.ensemble."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# An option that names a secret (api_key, token, hf_token, password, ...): a spec is written into the run's config.json
# and notebooks, so a secret is given by the name of its environment variable instead (api_key_env).
SECRET_OPTION = re.compile(r"(^|_)(api_?key|key|secret|password|token|authorization)$", re.I)


class TeacherSpec(BaseModel):
    """One teacher of the ensemble (azlib.teachers). backend 'openai' needs base_url (a loopback server is
    started by whoever wants one, as notebook 03 does); its key comes only from the env var api_key_env."""

    # an error does not echo the spec: its options may hold a secret (refused below)
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, hide_input_in_errors=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="short label used in tables and path records")
    backend: Literal["hf", "vllm", "openai"]
    model: str = Field(min_length=1)
    tier: Literal["free", "production", "vllm", "vllm-original", "cpu"]
    persona: Literal["tutor", "terse"] = Field("tutor", description="the right/wrong instructions it gets")
    temperature: float = Field(0.7, ge=0)
    max_tokens: int = Field(500, ge=1, description="cap on a proposal's tokens (the search asks for chunks)")
    base_url: str | None = None
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    timeout: float = Field(60.0, gt=0, description="seconds per HTTP request")
    max_retries: int = Field(2, ge=0)
    options: dict[str, Any] = Field(default_factory=dict, description="extra backend arguments (vllm memory, "
                                    "hf adapter: a LoRA folder such as notebook 06's trained teacher)")
    labels: list[Literal["1", "0"]] = Field(default_factory=lambda: ["1", "0"], min_length=1,
                                            description="branches it proposes: '1' right, '0' wrong")

    @model_validator(mode="after")
    def _remote_needs_url(self) -> TeacherSpec:
        if self.backend == "openai" and not self.base_url:
            raise ValueError(f"teacher {self.name}: backend 'openai' needs base_url")
        if secrets := sorted(k for k in self.options if SECRET_OPTION.search(k)):
            raise ValueError(f"teacher {self.name}: options {secrets} would be written into the run's config.json and "
                             "notebooks; put the secret in an environment variable and name it in api_key_env")
        return self
