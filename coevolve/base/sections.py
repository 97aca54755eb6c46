"""Config sections shared by every kind of run (heuristic search, agent runs,
comparisons), declared once here so that run configs need not import the
layers that use them (the engine pool, the OpenAI client)."""

from __future__ import annotations

from dataclasses import dataclass

from coevolve.base.config import require

LOCAL = "local"


@dataclass
class ModelSection:
    path: str = ""  # empty: the embedded SmolLM2-135M-Instruct


@dataclass
class EndpointSection:
    """An optional OpenAI-compatible endpoint next to the engine ES moves. In
    heuristic runs it answers the base-weight requests; in agent runs it
    distils skills. Formerly `[proposer]` (heuristic) and `[teacher]` (agent)."""

    base_url: str = ""  # empty: the engine's own model does everything
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 8
    retries: int = 3  # per request, on no answer / HTTP 429 / 5xx, with exponential backoff

    def check(self, name: str) -> None:
        require(self.retries >= 0, f"{name}.retries", "must be >= 0", self.retries)
        if self.base_url:
            require(bool(self.model), f"{name}.model", f"is required when {name}.base_url is set")
        require(self.concurrency >= 1, f"{name}.concurrency", "must be >= 1", self.concurrency)


@dataclass
class DistributedSection:
    """The `[distributed]` section. The default (one engine, local) is the
    plain in-process engine with no Ray at all (coevolve.engine.pool)."""

    engines: int = 1
    # "local": start a private Ray cluster on loopback; "auto": join the cluster
    # this machine belongs to; "ray://host:port": Ray client to a remote head.
    address: str = LOCAL

    def check(self, name: str) -> None:
        require(self.engines >= 1, f"{name}.engines", "must be >= 1", self.engines)
        require(
            self.address in (LOCAL, "auto") or self.address.startswith("ray://"),
            f"{name}.address",
            'must be "local", "auto" or "ray://HOST:PORT"',
            self.address,
        )

    @property
    def uses_ray(self) -> bool:
        return self.engines > 1 or self.address != LOCAL
