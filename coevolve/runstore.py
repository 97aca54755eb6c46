"""A run directory: the resolved config, an append-only event log, and the
files derived from it.

`events.jsonl` is the run's source of truth. Each line is appended with
flush + fsync, so a run killed at any instant leaves every completed event on
disk and at worst one torn last line, which reading drops (and the next append
overwrites). Every other file (candidates, snapshots, summary) is derived and
written atomically (temp file + rename), so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from coevolve.base.errors import UsageError

EVENTS = "events.jsonl"
CONFIG = "config.toml"


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """Complete lines of a JSON-lines file; a torn (unterminated) last line is dropped.
    A malformed line elsewhere is damage we must not paper over."""
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    records = []
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: line {number} is not valid JSON ({exc.msg})") from None
    if tail.strip():
        try:  # a last line without its newline is only kept if it parses
            records.append(json.loads(tail))
        except json.JSONDecodeError:
            pass
    return records


class JsonlWriter:
    """Appends one JSON object per line, durably (flush + fsync per record)."""

    def __init__(self, path: str | Path, truncate: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not truncate and self.path.exists():
            _drop_torn_tail(self.path)
        self._handle = open(self.path, "w" if truncate else "a", encoding="utf-8")

    def append(self, record: dict) -> None:
        self._handle.write(json.dumps(record, sort_keys=True) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut an unterminated last line so the next append starts on a fresh line."""
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        keep = raw.rfind(b"\n") + 1
        with open(path, "r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())


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
        store.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(store.config_path, config_toml)
        return store

    @classmethod
    def open(cls, directory: str | Path) -> "RunStore":
        store = cls(directory)
        if not store.dir.is_dir():
            raise UsageError(f"run directory not found: {store.dir}")
        if not store.config_path.exists():
            raise UsageError(f"{store.dir} is not a run directory (no {CONFIG})")
        return store

    def events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def event_writer(self) -> JsonlWriter:
        return JsonlWriter(self.events_path)

    def iter_events(self, kind: str) -> Iterator[dict]:
        return (e for e in self.events() if e.get("type") == kind)
