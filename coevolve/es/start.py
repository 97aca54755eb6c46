"""How a run starts or continues, for both run kinds (heuristic search in
coevolve.search.loop, agent runs in coevolve.agents.es_agent): the start event
that opens events.jsonl, the check that a log can be continued under the
current config, and the ES optimizer started fresh or rebuilt from
history.jsonl. One error type, ResumeError, for every directory a run cannot
continue: `coevolve run --resume` and `coevolve compare` report it as one line
(exit status 2) before any step or round runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.base.errors import UsageError
from coevolve.es.config import ESConfig, upgraded
from coevolve.es.optimizer import ESOpt, ReplayError
from coevolve.runstore import RunStore, same_settings

HEURISTIC = "heuristic"  # start events written before runs logged their kind are heuristic runs


class ResumeError(UsageError):
    """A run directory this run cannot continue (another kind's or version's
    log, a log written under another config, a history that does not replay);
    the message names the file."""


def start_event(kind: str, version: int, config: dict[str, Any]) -> dict[str, Any]:
    """The first event of a run's events.jsonl."""
    return {"type": "start", "kind": kind, "version": version, "config": config}


def logged_config(store: RunStore, events: list[dict], *, kind: str, version: int) -> dict | None:
    """The config a run's start event logged; None for a new run (no events).
    ResumeError when the first event is not a version-`version` start of `kind`."""
    if not events:
        return None
    start = events[0]
    if start.get("type") != "start" or start.get("kind", HEURISTIC) != kind or start.get("version") != version:
        raise ResumeError(f"{store.events_path}: first event is not a version-{version} {kind} start")
    return start.get("config")


# how requests reach the endpoint, not what they ask: a run that died of timeouts resumes with more time
TRANSPORT = ("timeout_s", "retries", "concurrency")


def _without_transport(config: Any) -> Any:
    if isinstance(config, dict) and isinstance(config.get("endpoint"), dict):
        return {**config, "endpoint": {k: v for k, v in config["endpoint"].items() if k not in TRANSPORT}}
    return config


def same_run_settings(logged: Any, current: dict[str, Any]) -> bool:
    """Whether a start event's config is `current`, read in today's shape (runstore.same_settings);
    the endpoint's transport settings (TRANSPORT) may differ."""
    if isinstance(logged, dict) and "es" in logged:
        logged = {**logged, "es": upgraded(logged["es"])}
    return same_settings(_without_transport(logged), _without_transport(current))


def check_same_config(store: RunStore, logged: Any, current: dict[str, Any]) -> None:
    """Refuse to continue a log written under another config (settings added
    to the code since it started take their defaults: runstore.same_settings)."""
    if not same_run_settings(logged, current):
        raise ResumeError(f"{store.events_path} was written under another config than "
                          f"{store.config_path}; refusing to mix them")


def check_start(store: RunStore, events: list[dict], current: dict[str, Any], *, kind: str, version: int) -> None:
    """Both checks: the log is this kind's and was written under `current`."""
    logged = logged_config(store, events, kind=kind, version=version)
    if logged is not None:
        check_same_config(store, logged, current)


def start_es(cfg: ESConfig, history_path: Path, engine: Any, seed: int) -> ESOpt:
    """The run's ES optimizer: fresh, or, when history.jsonl holds generations,
    with every recorded update re-applied to `engine` (ESOpt.resume)."""
    if history_path.exists() and history_path.stat().st_size > 0:
        try:
            return ESOpt.resume(cfg, history_path, engine, seed=seed)
        except ReplayError as exc:
            raise ResumeError(f"cannot continue the run: {exc}") from None
    return ESOpt(cfg, history_path, seed=seed)
