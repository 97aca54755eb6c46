"""The `Generator` protocol over any OpenAI-compatible endpoint (a vLLM server,
a hosted API): the `[endpoint]` next to the engine ES moves (it answers
base-weight requests in heuristic runs and distils skills in agent runs)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from coevolve.base.sections import EndpointSection
from coevolve.engine.base import check_seeds, Completion, Message, Sampling


class OpenAIGenerator:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        timeout_s: float = 300.0,
        retries: int = 3,
    ) -> None:
        from openai import OpenAI

        if not base_url:
            raise ValueError("endpoint.base_url must not be empty")
        if not model:
            raise ValueError("endpoint.model must not be empty")
        # Local servers accept any key; the SDK insists on one being set.
        key = os.environ.get(api_key_env) or "EMPTY"
        self.model = model
        self.base_url = base_url
        self.concurrency = max(1, concurrency)
        self.retries = retries
        self.client = OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=0)

    def chat(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: Sampling,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        check_seeds(conversations, seeds)
        jobs = [(list(c), None if seeds is None else int(seeds[i])) for i, c in enumerate(conversations)]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda job: self._one(job[0], sampling, job[1]), jobs))

    def _one(self, messages: list[Message], sampling: Sampling, seed: int | None) -> Completion:
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        kwargs = dict(
            model=self.model,
            messages=messages,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
        )
        if sampling.stop:
            kwargs["stop"] = list(sampling.stop)
        if seed is not None:
            kwargs["seed"] = seed
        for attempt in range(self.retries + 1):
            try:
                response = self.client.chat.completions.create(**kwargs)
                break
            except (APIConnectionError, APITimeoutError) as exc:
                if attempt == self.retries:
                    raise ConnectionError(f"{self.base_url}: {exc}") from exc
            except APIStatusError as exc:
                if exc.status_code < 500 or attempt == self.retries:
                    raise RuntimeError(f"{self.base_url} answered {exc.status_code}: {exc.message}") from exc
            time.sleep(min(2**attempt, 10))
        choice = response.choices[0]
        usage = response.usage
        return Completion(
            text=choice.message.content or "",
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
            finish_reason=choice.finish_reason or "stop",
        )


def open_endpoint(section: EndpointSection) -> OpenAIGenerator | None:
    """The configured `[endpoint]`, or None when the engine does everything."""
    if not section.base_url:
        return None
    return OpenAIGenerator(section.base_url, section.model, api_key_env=section.api_key_env,
                           concurrency=section.concurrency)
