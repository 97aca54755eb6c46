"""The `Generator` protocol over any OpenAI-compatible endpoint (a vLLM server,
a hosted API): the `[endpoint]` next to the engine ES moves (it answers
base-weight requests in heuristic runs and distils skills in agent runs)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import re

from coevolve.base.sections import EndpointSection
from coevolve.engine.base import check_requests, Completion, ConstraintError, Message, Sampling


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
        constraints: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """`constraints` go to the server as vLLM's `structured_outputs`
        request field; a reply that does not match its pattern (a server that
        ignored the field) raises ConstraintError rather than pass unchecked."""
        check_requests(conversations, seeds, constraints)
        jobs = [(list(c), None if seeds is None else int(seeds[i]), None if constraints is None else constraints[i])
                for i, c in enumerate(conversations)]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda job: self._one(job[0], sampling, job[1], job[2]), jobs))

    def _one(self, messages: list[Message], sampling: Sampling, seed: int | None,
             pattern: str | None = None) -> Completion:
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
        if sampling.presence_penalty:
            kwargs["presence_penalty"] = sampling.presence_penalty
        if seed is not None:
            kwargs["seed"] = seed
        extra = {}
        if sampling.top_k != -1:
            extra["top_k"] = sampling.top_k  # vLLM's extension of the OpenAI API
        if pattern is not None:
            extra["structured_outputs"] = {"regex": pattern}
        if extra:
            kwargs["extra_body"] = extra
        for attempt in range(self.retries + 1):
            try:
                response = self.client.chat.completions.create(**kwargs)
                break
            except (APIConnectionError, APITimeoutError) as exc:
                if attempt == self.retries:
                    raise ConnectionError(f"{self.base_url}: {exc}") from exc
            except APIStatusError as exc:
                if pattern is not None and exc.status_code == 400:
                    raise ConstraintError(f"{self.base_url} rejected the decoding constraint {pattern!r}: "
                                          f"{exc.message}") from exc
                if exc.status_code < 500 or attempt == self.retries:
                    raise RuntimeError(f"{self.base_url} answered {exc.status_code}: {exc.message}") from exc
            time.sleep(min(2**attempt, 10))
        choice = response.choices[0]
        usage = response.usage
        text = choice.message.content or ""
        # a length-cut reply is a prefix of a match, not a match
        if pattern is not None and choice.finish_reason != "length" and re.fullmatch(pattern, text, re.DOTALL) is None:
            raise ConstraintError(f"{self.base_url} ignored the decoding constraint {pattern!r} (reply {text[:80]!r}); "
                                  "use a vLLM server, or run without constrained actions")
        return Completion(
            text=text,
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
