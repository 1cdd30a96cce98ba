"""The student's generator on a vLLM OpenAI-compatible server (`vllm serve`, started by the user; docs/gpu.md): token
ids in and out, the student's LoRA adapter loaded at run time after each optimiser step. Generation only, no score."""

from __future__ import annotations

import uuid
from pathlib import Path

import openai

from azlib.models.generation import BackendError, GenerateArgs, Prompt, Sample, TokenizerPrompts
from azlib.models.openai import OpenAIBackend
from azlib.parallel import barrier, gather, world


class VLLMServerBackend(TokenizerPrompts, OpenAIBackend):
    """model: the server's name for the base model (`--served-model-name`); tokenizer: the student's, which
    turns prompts into the ids the server continues. After `use_adapter`, every call names the adapter."""

    name = "vllm-server"

    def __init__(self, model: str, base_url: str, tokenizer, **options):
        super().__init__(model, base_url, **options)
        self.base_model, self.tokenizer = model, tokenizer
        self.adapters_loaded = 0
        # this student's adapter names: its own on a server other students (or a crashed run's) may have used,
        # one for all ranks (rank 0's)
        self.prefix = f"{model}-{gather(uuid.uuid4().hex[:8])[0]}"

    def close(self) -> None:
        """Unload this student's adapter from the server (rank 0; the server keeps running) and close the client."""
        if self.model != self.base_model and world()[0] == 0:
            try:
                self._manage("/unload_lora_adapter", {"lora_name": self.model})
            except BackendError:  # a server already gone has nothing to unload
                pass
        self.model = self.base_model
        super().close()

    def use_adapter(self, folder: str | Path) -> None:
        """Load the peft adapter saved in `folder` under a new name and generate with it from now on; the
        adapter used before is unloaded (the server keeps only the newest). Under torchrun every rank holds the
        same adapter after a step: rank 0 loads it, and the others name it once it is loaded."""
        name = f"{self.prefix}-adapter-{self.adapters_loaded + 1}"
        first = world()[0] == 0
        if first:
            self._manage("/load_lora_adapter", {"lora_name": name, "lora_path": str(Path(folder).resolve())})
        barrier()
        previous, self.model = self.model, name
        self.adapters_loaded += 1
        if first and previous != self.base_model:
            self._manage("/unload_lora_adapter", {"lora_name": previous})

    def _manage(self, route: str, body: dict) -> None:
        try:
            self.client.post(route, body=body, cast_to=str)
        except openai.APIStatusError as err:
            hint = (" (start the server with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
                    if err.status_code == 404 else "")
            raise BackendError(f"{self.base_url}{route} answered HTTP {err.status_code}: "
                               f"{err.response.text[:300]}{hint}") from None
        except openai.APIConnectionError as err:
            raise BackendError(f"{self.base_url}{route} failed: {type(err.__cause__ or err).__name__}: "
                               f"{err.__cause__ or err}") from None

    def _generate(self, prompts: list[Prompt], args: GenerateArgs) -> list[list[Sample]]:
        """One /v1/completions request per prompt, its token ids as the prompt."""
        common = {**self._request_body(args), "logprobs": 0, "return_token_ids": True}

        def one(prompt: Prompt) -> list[Sample]:
            ids = self.encode_prompt(prompt)
            body = self._post("/completions", {**common, "prompt": ids})
            return self._samples("/completions", body, lambda choice, _: self._sampled(choice, len(ids)))

        return self._each(one, prompts)

    def _sampled(self, choice: dict, prompt_tokens: int) -> Sample:
        ids = tuple(choice["token_ids"])
        logprobs = tuple(choice["logprobs"]["token_logprobs"])
        if len(logprobs) != len(ids):
            raise KeyError(f"{len(ids)} token ids but {len(logprobs)} log-probs")
        return Sample(text=choice["text"], token_ids=ids, logprobs=logprobs, finish_reason=self._finish(choice),
                      prompt_tokens=prompt_tokens, completion_tokens=len(ids))
