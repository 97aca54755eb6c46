"""A run directory: the resolved config, an append-only event log, and the
files derived from it.

`events.jsonl` is the run's source of truth, appended durably; every other
file (candidates, snapshots, summary) is derived and replaced atomically. Both
follow coevolve.base.durable's rules (the torn-line rule, fsync, atomic
replace); the names are re-exported here for the modules that use a run store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from coevolve.base.durable import JsonlWriter, atomic_write_json, atomic_write_text, make_directory, read_jsonl
from coevolve.base.errors import UsageError

__all__ = ["RunStore", "JsonlWriter", "atomic_write_json", "atomic_write_text", "ended", "extended_budget",
           "first_difference", "read_jsonl", "same_settings"]

EVENTS = "events.jsonl"
CONFIG = "config.toml"
PROMPTS = "prompts.jsonl"  # a heuristic run's requests as sent ([log] prompts; coevolve.search.loop)
# what agent runs wrote before they kept events.jsonl: such a directory is a run (es_agent says it cannot resume)
BEFORE_EVENTS = ("history.jsonl", "eval.jsonl", "summary.json")
ABSENT = "(absent)"  # first_difference's value of a setting one side lacks


class RunStore:
    """Paths and writers of one run directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    # layout -----------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG

    @property
    def events_path(self) -> Path:
        return self.dir / EVENTS

    @property
    def history_path(self) -> Path:
        return self.dir / "history.jsonl"

    @property
    def candidates_path(self) -> Path:
        return self.dir / "candidates.jsonl"

    def population_path(self, generation: int) -> Path:
        return self.dir / "population" / f"gen_{generation:04d}.json"

    def path(self, name: str) -> Path:
        return self.dir / name

    # lifecycle --------------------------------------------------------------
    @classmethod
    def create(cls, directory: str | Path, config_toml: str) -> "RunStore":
        """A new run: refuses a directory that already holds one (resume it instead)."""
        store = cls(directory)
        if store.events_path.exists() or store.config_path.exists():
            raise UsageError(f"{store.dir} already holds a run; continue it with `coevolve run --resume {store.dir}`"
                             " or choose another --out")
        make_directory(store.dir, "run.out (--out)")
        atomic_write_text(store.config_path, config_toml)
        # the run log, empty until the run's start event: it tells a run killed before that event (which
        # --resume continues) from a folder that only holds a config.toml (open_run refuses it)
        atomic_write_text(store.events_path, "")
        return store

    @classmethod
    def open(cls, directory: str | Path) -> "RunStore":
        store = cls(directory)
        if not store.dir.is_dir():
            raise UsageError(f"{store.dir} is a file; give the run's directory" if store.dir.exists()
                             else f"run directory not found: {store.dir}")
        if not store.config_path.exists():
            raise UsageError(f"{store.dir} is not a run directory (no {CONFIG})")
        return store

    @classmethod
    def open_run(cls, directory: str | Path) -> "RunStore":
        """`open`, for a directory a run wrote: one holding a config.toml but no run log (a task folder
        `coevolve new-task` made, a config copied there) is refused, so nothing is written into it."""
        store = cls.open(directory)
        if not store.events_path.exists() and not any(store.path(n).exists() for n in BEFORE_EVENTS):
            raise UsageError(f"{store.dir} holds a {CONFIG} but no run log ({EVENTS}): it is not a run; start one "
                             f"with `coevolve run {store.config_path}`")
        return store

    def events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def event_writer(self) -> JsonlWriter:
        return JsonlWriter(self.events_path)

    def iter_events(self, kind: str) -> Iterator[dict]:
        return (e for e in self.events() if e.get("type") == kind)


def ended(events: list[dict]) -> bool:
    """Whether a run's log says it finished: an "end" event after its last "extend" (a finished run
    given more budget, `coevolve run --resume DIR --budget N`, is running again until its next end)."""
    last = {e.get("type"): i for i, e in enumerate(events) if e.get("type") in ("end", "extend")}
    return "end" in last and last["end"] > last.get("extend", -1)


def extended_budget(events: list[dict]) -> int | None:
    """The budget the run was last extended to (None: never extended)."""
    budgets = [e["budget"] for e in events if e.get("type") == "extend"]
    return budgets[-1] if budgets else None


def same_settings(logged: Any, current: Any) -> bool:
    """Whether a run's logged config (its start event) is its current one, for
    `--resume`. A setting added to the code since the run started is absent
    from the log and takes its default, which keeps the old behaviour, so it
    does not count as a change."""
    return first_difference(logged, current) is None


def first_difference(logged: Any, current: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The first setting (dotted key, logged value, current value) where `current` is not `logged`
    (same_settings' rule: a key only `current` has does not count; one only `logged` has is ABSENT now)."""
    if isinstance(logged, dict) and isinstance(current, dict):
        for name, value in logged.items():
            dotted = f"{key}.{name}" if key else str(name)
            found = first_difference(value, current[name], dotted) if name in current else (dotted, value, ABSENT)
            if found is not None:
                return found
        return None
    return None if logged == current else (key, logged, current)
