"""The teachers' engines: one backend per TeacherSpec, local models loaded once and shared (the student's too, via
`shared`), remote ones as OpenAI-compatible clients. Starts no servers; closes what it opened, not what it was given."""

from __future__ import annotations

import json
from typing import Sequence

from azlib.models import Backend, make_backend
from azlib.models.generation import Resource
from azlib.teachers.spec import TeacherSpec


class TeacherBackends(Resource):
    def __init__(self, specs: Sequence[TeacherSpec], shared: dict[str, Backend] | None = None):
        self._owned: list[Backend] = []
        self.engines = dict(shared or {})  # the local teachers' engines by engine_key, the shared ones among them
        try:
            self.by_name = {spec.name: self._open(spec) for spec in specs}
        except Exception:  # e.g. a vLLM engine that finds no memory: the engines already started go too
            self.close()
            raise

    def _open(self, spec: TeacherSpec) -> Backend:
        if spec.backend == "openai":
            backend = make_backend("openai", spec.model, base_url=spec.base_url, api_key_env=spec.api_key_env,
                                   timeout=spec.timeout, max_retries=spec.max_retries, **spec.options)
            self._owned.append(backend)
            return backend
        key = engine_key(spec)
        if key not in self.engines:
            self.engines[key] = make_backend(spec.backend, spec.model, **spec.options)
            self._owned.append(self.engines[key])
        return self.engines[key]

    def close(self) -> None:
        while self._owned:
            self._owned.pop().close()


def engine_key(spec: TeacherSpec) -> str:
    """Local teachers of one model share its engine unless their options make another one: an adapter, a device
    (`{"device": "cuda:3"}` puts an hf teacher on its own GPU), the memory or batching it is given."""
    return spec.model if not spec.options else f"{spec.model}+{json.dumps(spec.options, sort_keys=True, default=str)}"
