"""How a run starts or continues, for both run kinds (heuristic search in
coevolve.search.loop, agent runs in coevolve.agents.es_agent): the start event
that opens events.jsonl, the check that a log can be continued under the
current config, and the ES optimizer started fresh or rebuilt from
history.jsonl (a resume's replay logged as a `replay` event and said by
the command that asked for it: start_es's on_note). One error type, ResumeError,
for every directory a run cannot continue: `coevolve run --resume` and
`coevolve compare` report it as one line (exit status 2) before any step or
round runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from coevolve.base.durable import append_jsonl
from coevolve.base.errors import UsageError
from coevolve.es.config import ESConfig, upgraded
from coevolve.es.optimizer import LEGACY_DTYPE, ESOpt, ReplayError
from coevolve.runstore import ABSENT, RunStore, extended_budget, first_difference, log_damage

HEURISTIC = "heuristic"  # start events written before runs logged their kind are heuristic runs


class ResumeError(UsageError):
    """A run directory this run cannot continue (another kind's or version's
    log, a log written under another config, a history that does not replay);
    the message names the file."""


def start_event(kind: str, version: int, config: dict[str, Any]) -> dict[str, Any]:
    """The first event of a run's events.jsonl."""
    return {"type": "start", "kind": kind, "version": version, "config": config}


def logged_config(store: RunStore, events: list[dict], *, kind: str, version: int,
                  renamed: dict[str, str] | None = None) -> dict | None:
    """The config a run's start event logged, as the run goes on under it: sections renamed since
    (`renamed`, the config class's RENAMED) under today's names, and the budget `--resume DIR --budget N`
    last gave it. None for a new run (no events). ResumeError when the first event is not a
    version-`version` start of `kind`, or when the log is not the one its run wrote (runstore.log_damage:
    emptied while the directory holds steps, a step missing or out of order), before anything is appended."""
    damage = log_damage(store, events)
    if damage is not None:
        raise ResumeError(damage)
    if not events:
        return None
    start = events[0]
    if start.get("type") != "start" or start.get("kind", HEURISTIC) != kind or start.get("version") != version:
        raise ResumeError(f"{store.events_path}: first event is not a version-{version} {kind} start")
    logged = start.get("config")
    if not isinstance(logged, dict):
        return logged
    for old, new in (renamed or {}).items():  # runs written before [proposer]/[teacher] became [endpoint]
        if old in logged and new not in logged:
            logged = {(new if k == old else k): v for k, v in logged.items()}
    budget = extended_budget(events)
    if budget is not None and isinstance(logged.get("run"), dict):
        logged = {**logged, "run": {**logged["run"], "budget": budget}}
    return logged


# how requests reach the endpoint, not what they ask: a run that died of timeouts resumes with more time, one
# whose key moved to another environment variable resumes reading it there
TRANSPORT = ("timeout_s", "retries", "concurrency", "api_key_env")
# where the run's replies came from: kept, so the way out says to serve them there again
SERVED = {"endpoint.base_url": "that server: serve it there again",
          "endpoint.model": "that model: serve it under that name again",
          "endpoint.models": "those models: serve them under those names again"}
RAISABLE = ("caps",)  # limits a run may be given more of between sessions: not what it is


def _comparable(config: Any) -> Any:
    """A config less what may change between sessions (TRANSPORT, RAISABLE), [es] in today's shape."""
    if not isinstance(config, dict):
        return config
    config = {k: v for k, v in config.items() if k not in RAISABLE}
    if isinstance(config.get("endpoint"), dict):
        config["endpoint"] = {k: v for k, v in config["endpoint"].items() if k not in TRANSPORT}
    return config


def config_difference(logged: Any, current: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first setting where a start event's config is not `current` (runstore.first_difference: one
    added to the code since takes its default), read in today's shape; None: the same run."""
    if isinstance(logged, dict) and "es" in logged:
        logged = {**logged, "es": upgraded(logged["es"])}
    return first_difference(_comparable(logged), _comparable(current))


def same_run_settings(logged: Any, current: dict[str, Any]) -> bool:
    """Whether a start event's config is `current` (config_difference)."""
    return config_difference(logged, current) is None


def _shown(value: Any) -> str:
    return value if value is ABSENT else json.dumps(value)


def edited_line(store: RunStore, difference: tuple[str, Any, Any]) -> str:
    """What config_difference found, as a user reads it: config.toml edited since the run started."""
    key, was, now = difference
    return f"{store.config_path} was edited since the run started: {key} was {_shown(was)}, is now {_shown(now)}"


def check_same_config(store: RunStore, logged: Any, current: dict[str, Any]) -> None:
    """Refuse to continue a log written under another config, naming the first setting that differs and
    the way out (settings added to the code since it started take their defaults: first_difference)."""
    difference = config_difference(logged, current)
    if difference is None:
        return
    key, was, now = difference
    way = f"put back {key} = {_shown(was)}"
    served = next((why for name, why in SERVED.items() if key == name or key.startswith(f"{name}.")), None)
    if served is not None:
        way += f" (the run's replies came from {served})"
    # only a heuristic search takes more budget (an agent run's config has an [agent] section)
    if key == "run.budget" and "agent" not in current and isinstance(was, int) and isinstance(now, int) and now > was:
        way += f", or give the run more evaluations with `coevolve run --resume {store.dir} --budget {now}`"
    raise ResumeError(f"{edited_line(store, difference)}; a run goes on under the config it started with: {way}")


def check_start(store: RunStore, events: list[dict], current: dict[str, Any], *, kind: str, version: int,
                renamed: dict[str, str] | None = None) -> None:
    """Both checks: the log is this kind's and was written under `current`."""
    logged = logged_config(store, events, kind=kind, version=version, renamed=renamed)
    if logged is not None:
        check_same_config(store, logged, current)


def resume_note(history_path: Path, records: list[dict], *, logged_updates: int | None = None,
                log_path: Path | None = None) -> str:
    """The line a resume says of its weights once history.jsonl replayed (`records`, ESOpt.resume's): how
    many updates were re-applied and what replay verified, each update's checksum on an engine in the
    recorded dtype and noise mode; then any update the log holds and the history lacks, which the run
    re-applies from the log's members and rewards."""
    if records:
        held, checked = len(records), sum("checksum" in r for r in records)
        verified = ("checksum verified after each" if checked == held
                    else f"checksum verified after {checked} of {held}, the others recorded none" if checked
                    else "no checksum recorded: not verified")
        last = records[-1]
        dtype = last.get("dtype", LEGACY_DTYPE)
        mode = "full" if last.get("noise", "full") == "full" else f"lowrank rank {last.get('rank')}"
        # "unknown": recorded by an engine that names no dtype (the tests' fakes)
        kept = ([] if dtype == "unknown" else [f"{dtype} weights"]) + [f"{mode} noise"]
        line = (f"weights: replayed {held} ES update{'' if held == 1 else 's'} from {history_path} "
                f"({verified}; {', '.join(kept)})")
    else:
        line = f"weights: no ES update in {history_path} yet: the model's weights as loaded"
    missing = (logged_updates or 0) - len(records)
    if missing > 0:
        line += (f"; {missing} update{'' if missing == 1 else 's'} logged in {log_path or 'the run log'} but not "
                 "yet in the history, re-applied from the log")
    return line


REPLAY = "replay"  # the event a resume logs once it replayed history.jsonl into the weights

def replay_event(history_path: Path, records: list[dict], logged_updates: int | None) -> dict[str, Any]:
    """The event a resume appends to the run's log: how many ES updates history.jsonl gave back (and how many
    of those a checksum verified), from which file, and how many only the log holds (re-applied from it)."""
    return {"type": REPLAY, "history": str(history_path.absolute()), "updates": len(records),
            "verified": sum("checksum" in r for r in records),
            "from_log": max((logged_updates or 0) - len(records), 0)}


def _logged(log_path: Path | None) -> bool:
    """Whether the run's log holds events: a resume (a new run writes its start event after start_es)."""
    return log_path is not None and log_path.exists() and log_path.stat().st_size > 0


def resume_es(cfg: ESConfig, history_path: Path, engine: Any, seed: int, *, logged_updates: int | None = None,
              log_path: Path | None = None) -> tuple[ESOpt, str | None]:
    """The run's ES optimizer: fresh, or, when history.jsonl holds generations,
    with every recorded update re-applied to `engine` (ESOpt.resume). `logged_updates`: the ES updates
    the run's log (`log_path`) records, which the history may not exceed (one lost from the log's end
    would otherwise leave the run continuing from the wrong generation). With it, for a resume
    (history.jsonl or the log holds something), the line saying what was replayed and verified
    (resume_note), logged in the run's log as a `replay` event; None for a new run. Prints nothing."""
    if history_path.exists() and history_path.stat().st_size > 0:
        try:
            es = ESOpt.resume(cfg, history_path, engine, seed=seed, logged_updates=logged_updates,
                              log_path=log_path)
        except ReplayError as exc:
            raise ResumeError(f"cannot continue the run: {exc}") from None
        replayed = es.replayed
    elif _logged(log_path):  # a resume before any ES update says so too: silence would read as "not checked"
        es, replayed = ESOpt(cfg, history_path, seed=seed), []
    else:
        return ESOpt(cfg, history_path, seed=seed), None
    if log_path is not None:  # before this session appends its steps or rounds
        append_jsonl(log_path, replay_event(history_path, replayed, logged_updates))
    return es, resume_note(history_path, replayed, logged_updates=logged_updates, log_path=log_path)


def start_es(cfg: ESConfig, history_path: Path, engine: Any, seed: int, *, logged_updates: int | None = None,
             log_path: Path | None = None, on_note: Callable[[str], None] | None = None) -> ESOpt:
    """resume_es's optimizer, for the run kinds' loops; a resume's note goes to `on_note` (the command's
    stderr line, as `coevolve run` passes it through the loop) as the weights are replayed."""
    es, note = resume_es(cfg, history_path, engine, seed, logged_updates=logged_updates, log_path=log_path)
    if note is not None and on_note is not None:
        on_note(note)
    return es
