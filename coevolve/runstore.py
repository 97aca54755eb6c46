"""A run directory: the resolved config, an append-only event log, and the
files derived from it.

`events.jsonl` is the run's source of truth, appended durably; every other
file (candidates, snapshots, summary) is derived and replaced atomically. Both
follow coevolve.base.durable's rules (the torn-line rule, fsync, atomic
replace); the names are re-exported here for the modules that use a run store.

One process writes a run directory: `create` and `open(..., write=True)` hold its
lock (`hold_directory`), as `coevolve report` does while it writes a run's report, and
a second writer is refused before it writes anything. Whoever holds a store closes it
(`with`, `close`) where its work ends; letting go of a collected store is a last resort.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import socket
import time
import weakref
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from coevolve.base.durable import JsonlWriter, atomic_write_json, atomic_write_text, make_directory, read_jsonl
from coevolve.base.errors import UsageError

__all__ = ["RunStore", "JsonlWriter", "atomic_write_json", "atomic_write_text", "ended", "extended_budget",
           "first_difference", "hold_directory", "kept_best_code", "log_damage", "logged_budget", "read_jsonl",
           "same_settings", "writer_of"]

EVENTS = "events.jsonl"
CONFIG = "config.toml"
PROMPTS = "prompts.jsonl"  # a heuristic run's requests as sent ([log] prompts; coevolve.search.loop)
# what agent runs wrote before they kept events.jsonl: such a directory is a run (es_agent says it cannot resume)
BEFORE_EVENTS = ("history.jsonl", "eval.jsonl", "summary.json")
ABSENT = "(absent)"  # first_difference's value of a setting one side lacks
LOCK = ".writer.lock"  # hold_directory's lock file, in the run (or comparison) directory it guards
ARM_DEPTH = 3  # a comparison's arm runs lie at ROOT/runs/TASK/ARM (coevolve.plan), its lock at ROOT


# ------------------------------------------------------------ one writer per directory
# An advisory flock on LOCK, held open while this process writes the directory: the kernel drops it when
# the process dies by any means (SIGKILL included), so a killed run never leaves a stale lock behind. The
# file's text (pid, host, since) only names the holder in the refusal; the lock itself decides. The file
# is written in place and never replaced (atomic_write_* renames): the lock belongs to its inode.
_TOKEN = secrets.token_hex(8)  # this process, in its lock records (a pid is not unique across hosts)
_HELD: dict[tuple[int, int], "_Lock"] = {}  # the lock files this process holds, by (device, inode)
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS)


class _Lock:
    """One held lock file, shared by every holder in this process: flock conflicts between two
    descriptors of one process too, and a run that raised (a test's "kill") may still be referenced by
    its traceback when the same process resumes it."""

    def __init__(self, fd: int, key: tuple[int, int]) -> None:
        self.fd: int | None = fd
        self.key = key
        self.holders = 0

    def release(self) -> None:
        self.holders -= 1
        if self.holders <= 0 and self.fd is not None:
            _HELD.pop(self.key, None)
            os.close(self.fd)  # drops the flock
            self.fd = None


def _forget_after_fork() -> None:
    # a forked child (a multiprocessing worker) shares the parent's lock through the inherited
    # descriptor: closed here, so a child outliving a killed parent does not keep the run locked
    global _TOKEN
    for lock in list(_HELD.values()):
        if lock.fd is not None:
            try:
                os.close(lock.fd)
            except OSError:
                pass
            lock.fd = None
    _HELD.clear()
    _TOKEN = secrets.token_hex(8)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _record(fd: int) -> dict:
    """The holder's record in a lock file ({} when unreadable or not written yet)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _holder(record: dict) -> str:
    """A lock record as the refusal says it: "pid 1234 on HOST, since 03:41" ("" when unknown)."""
    if not record.get("pid"):
        return ""
    since = ""
    try:
        started = datetime.fromisoformat(str(record.get("since")))
        today = started.date() == datetime.now(started.tzinfo).date()
        since = f", since {started.strftime('%H:%M' if today else '%Y-%m-%d %H:%M')}"
    except ValueError:
        pass
    return f"pid {record['pid']} on {record.get('host', '?')}{since}"


def hold_directory(directory: str | Path, again: str) -> Callable[[], None]:
    """Hold `directory`'s writer lock for this process; returns its release (until called, the lock is
    held as long as the process lives). A lock another process holds is refused with one line naming
    it and `again`, what to do once it is gone. Where the file system has no flock (some NFS or FUSE
    mounts) or the lock file cannot be made, the directory goes unguarded rather than unusable."""
    directory = Path(directory)
    try:
        # durable: a lock and its holder's name, written in place (the lock is the inode's), never read back
        fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return lambda: None  # e.g. a read-only directory: its own writes fail, with their own error
    try:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino)
        lock = _HELD.get(key)
        if lock is not None:  # this process holds it already: share that descriptor
            os.close(fd)
        else:
            _take(fd, directory, again)
            lock = _HELD[key] = _Lock(fd, key)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _UNSUPPORTED:
            return lambda: None
        raise
    except BaseException:
        os.close(fd)
        raise
    lock.holders += 1
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            lock.release()

    return release


def _take(fd: int, directory: Path, again: str) -> None:
    """flock `fd` exclusively, then record this process in it (a UsageError when another holds it)."""
    for attempt in range(5):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            # a reader's test (writer_of) holds a shared lock for an instant: wait it out
            if attempt == 4:
                raise UsageError(_refusal(directory, _record(fd), again)) from None
            time.sleep(0.05)
    if _record(fd).get("token") != _TOKEN:  # taken again by the same process (a test's resume): left as it is
        text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "token": _TOKEN,
                           "since": datetime.now().astimezone().isoformat(timespec="seconds")})
        os.ftruncate(fd, 0)
        os.pwrite(fd, (text + "\n").encode("utf-8"), 0)


def _refusal(directory: Path, record: dict, again: str) -> str:
    holder = _holder(record)
    return (f"{directory} is being written by another process{f' ({holder})' if holder else ''}: wait for it, "
            f"or stop it, then {again}")


def writer_of(directory: str | Path) -> str | None:
    """Who writes `directory` now ("pid 1234 on HOST, since 03:41", or "another process" when it left no
    record), or None when no other process holds its lock. For readers (the dashboard, `coevolve eval`,
    `coevolve report` before it holds the lock to write its files): the lock is only tested, a shared lock
    taken and dropped at once (a writer starting then retries), never held, and a directory without a lock
    file is left without one."""
    try:
        fd = os.open(Path(directory) / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) in _HELD:
            return None  # this process writes it
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(_record(fd)) or "another process"
        except OSError:
            return None  # no flock here: nothing to tell
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class RunStore:
    """Paths and writers of one run directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self._release: Callable[[], None] | None = None  # the writer lock's, while this store holds it

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
        """A new run, held for writing (`hold`): refuses a directory that already holds one (resume it
        instead), checked again once held, for a second `coevolve run --out` racing for the same folder."""
        store = cls(directory)
        store._refuse_a_run()
        make_directory(store.dir, "run.out (--out)")
        store.hold()
        try:
            store._refuse_a_run()
            atomic_write_text(store.config_path, config_toml)
            # the run log, empty until the run's start event: it tells a run killed before that event (which
            # --resume continues) from a folder that only holds a config.toml (open_run refuses it)
            atomic_write_text(store.events_path, "")
        except BaseException:
            store.close()
            raise
        return store

    def _refuse_a_run(self) -> None:
        if self.events_path.exists() or self.config_path.exists():
            raise UsageError(f"{self.dir} already holds a run; continue it with `coevolve run --resume {self.dir}`"
                             " or choose another --out")

    @classmethod
    def open(cls, directory: str | Path, *, write: bool = False) -> "RunStore":
        """An existing run directory; `write`: this process goes on writing it, so it holds it (`hold`)."""
        store = cls(directory)
        if not store.dir.is_dir():
            raise UsageError(f"{store.dir} is a file; give the run's directory" if store.dir.exists()
                             else f"run directory not found: {store.dir}")
        if not store.config_path.exists():
            raise UsageError(f"{store.dir} is not a run directory (no {CONFIG})")
        if write:
            store.hold()
        return store

    @classmethod
    def open_run(cls, directory: str | Path, *, write: bool = False) -> "RunStore":
        """`open`, for a directory a run wrote: one holding a config.toml but no run log (a task folder
        `coevolve new-task` made, a config copied there) is refused, so nothing is written into it.
        `write`: as `open`'s, taken once the directory is known to be a run."""
        store = cls.open(directory)
        if not store.events_path.exists() and not any(store.path(n).exists() for n in BEFORE_EVENTS):
            raise UsageError(f"{store.dir} holds a {CONFIG} but no run log ({EVENTS}): it is not a run; start one "
                             f"with `coevolve run {store.config_path}`")
        lost = _deleted_log(store)  # refused here, before a resume logs, builds or loads anything
        if lost is not None:
            raise UsageError(lost)
        if write:
            store.hold()
        return store

    def hold(self, again: str | None = None) -> None:
        """Hold the directory for writing until `close` (collection, or the process's end, only where an
        owner failed to close it); a second process's `hold` meanwhile is refused with one line naming this
        one. Where another process holds it, this one is refused so, the line ending with `again`, what to
        do once it is gone (default: resume the run; a report's: report again). Stores of one process share
        the hold, so a run resumed in the process that ran it (a test) is not refused."""
        if self._release is None:
            again = again or f"`coevolve run --resume {self.dir}`"
            for above in list(self.dir.resolve().parents)[:ARM_DEPTH]:
                # a comparison's arm run (ROOT/runs/TASK/ARM): the comparison holds its root while it runs and
                # would reach this arm later, so a second writer here is refused before it writes
                holder = writer_of(above)
                if holder is not None:
                    raise UsageError(f"{self.dir} is a run of the comparison in {above}, which is being run by "
                                     f"{holder}: wait for it, or stop it, then {again}")
            release = hold_directory(self.dir, again)
            self._release = weakref.finalize(self, release)

    def close(self) -> None:
        """Release the directory's writer lock, if this store holds it."""
        if self._release is not None:
            self._release()
            self._release = None

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writer(self) -> str | None:
        """Who else is writing this run now (`writer_of`), for readers such as `coevolve report`."""
        return writer_of(self.dir)

    def events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def event_writer(self) -> JsonlWriter:
        return JsonlWriter(self.events_path)

    def iter_events(self, kind: str) -> Iterator[dict]:
        return (e for e in self.events() if e.get("type") == kind)


# what a run writes only after its log holds a step (or round): records of these in a directory whose log is
# empty mean the log was lost, not that the run was killed before its start event (RunStore.create's empty log)
AFTER_STEPS = ("candidates.jsonl", "history.jsonl", "prompts.jsonl", "eval.jsonl")
NUMBERED = ("step", "round")  # the events a run appends once each, numbered 0, 1, 2, ... in order (key: the kind)


def log_damage(store: RunStore, events: list[dict]) -> str | None:
    """Why a run's log as read (`events`, from `store.events()`) cannot be the one its run wrote, in one
    line naming the file and what to do; None when nothing is seen. A resume replays the log step by step
    and a report reads it as the run's record, so both refuse or note what this finds rather than
    starting over (an emptied log) or re-running a step after later ones (a deleted line)."""
    if not events:
        if not store.events_path.exists():
            return _deleted_log(store)
        held = _written_after_steps(store)
        if held:
            return (f"{store.events_path} is empty while {store.dir} holds {held}: the log was lost or truncated, "
                    f"and nothing can be replayed from it; put back its events.jsonl from a copy, or start the run "
                    f"again with `coevolve run {store.config_path} --out NEW_DIR`")
        return None

    def edited(what: str, fix: str) -> str:
        return (f"{store.events_path}: {what}: the log was edited, and a run goes on only from the log it wrote; "
                f"{fix}, or start the run again with `coevolve run {store.config_path} --out NEW_DIR`")

    lines = _record_lines(store.events_path)  # an event's line as an editor shows it (blank lines counted)
    for kind in NUMBERED:
        seen: dict[int, int] = {}  # number -> its line
        for index, event in enumerate(events):
            line = lines[index] if index < len(lines) else index + 1
            if event.get("type") != kind:
                continue
            number = event.get(kind)
            if not isinstance(number, int) or isinstance(number, bool):
                return edited(f"line {line} is a {kind} event without its {kind} number", "put back the line")
            if number in seen:
                return edited(f"line {line} holds {kind} {number} again (line {seen[number]} holds it)",
                              "take out the repeated line")
            if number != len(seen):
                return edited(f"{kind} {len(seen)} is missing (line {line} holds {kind} {number})",
                              "put back the missing line from a copy")
            seen[number] = line
    return None


def _deleted_log(store: RunStore) -> str | None:
    """Why a run directory without its events.jsonl is not one to read or resume, when its candidates.jsonl
    shows a heuristic run wrote it (the loop opens both together, and RunStore.create writes the log
    first): the log was deleted. None otherwise (a log still there, or an agent run from before agent runs
    kept one, which es_agent names)."""
    if store.events_path.exists() or not store.candidates_path.exists():
        return None
    held = _written_after_steps(store) or store.candidates_path.name
    return (f"{store.events_path} is missing while {store.dir} holds {held}: the run's log was deleted, and "
            f"nothing can be replayed from it; put back its events.jsonl from a copy, or start the run again "
            f"with `coevolve run {store.config_path} --out NEW_DIR`")


def _record_lines(path: Path) -> list[int]:
    """The line number (from 1) of each record read_jsonl reads from `path`: its complete lines that are
    not blank."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return [number for number, line in enumerate(raw.split(b"\n")[:-1], start=1) if line.strip()]


def kept_best_code(store: RunStore, events: list[dict], best_id: int, objective: float | None) -> str | None:
    """The code of a run's best, candidate `best_id` (not 0: the task's template is the task's), as the run
    kept it: a starting program's (a negative id) in its "seed" event of `events`, a proposal's in
    candidates.jsonl where its record scores `objective` (a damaged file is not trusted); None when neither
    holds it. search.loop.restore_best's rule for what `coevolve run --resume` writes a lost best.py again
    from, so `coevolve report` says it will only where it can."""
    if best_id < 0:
        seed = next((e for e in events if e.get("type") == "seed" and e.get("id") == best_id), None)
        code = (seed or {}).get("code")
    else:
        record = next((c for c in read_jsonl(store.candidates_path) if c.get("id") == best_id), None)
        code = record.get("code") if record is not None and record.get("objective") == objective else None
    return code if isinstance(code, str) else None


def _written_after_steps(store: RunStore) -> str | None:
    """What in `store`'s directory a run writes only after a step ("12 candidates (candidates.jsonl)",
    "population/, summary.json"), or None when it holds nothing of the kind."""
    candidates = store.candidates_path
    count = len(read_jsonl(candidates)) if candidates.is_file() else 0
    held = [f"{count} candidate{'s' * (count != 1)} ({candidates.name})"] if count else []
    # the others only named (not parsed: prompts.jsonl may be large); an empty one is opened before the start event
    held += [name for name in AFTER_STEPS[1:] if store.path(name).is_file() and store.path(name).stat().st_size]
    if any(store.path("population").glob("gen_*.json")):
        held.append("population/")
    held += [name for name in ("summary.json", "best.py") if store.path(name).exists()]
    return ", ".join(held) or None


def ended(events: list[dict]) -> bool:
    """Whether a run's log says it finished: an "end" event after its last "extend" (a finished run
    given more budget, `coevolve run --resume DIR --budget N`, is running again until its next end)."""
    last = {e.get("type"): i for i, e in enumerate(events) if e.get("type") in ("end", "extend")}
    return "end" in last and last["end"] > last.get("extend", -1)


def extended_budget(events: list[dict]) -> int | None:
    """The budget the run was last extended to (None: never extended)."""
    budgets = [e["budget"] for e in events if e.get("type") == "extend"]
    return budgets[-1] if budgets else None


def logged_budget(events: list[dict]) -> int | None:
    """The budget a run's log goes on under: the last extension's, else its start event's config's (None
    before its start event)."""
    start = next((e for e in events if e.get("type") == "start"), {})
    config = start.get("config") if isinstance(start.get("config"), dict) else {}
    run = config.get("run") if isinstance(config.get("run"), dict) else {}
    extended = extended_budget(events)
    return run.get("budget") if extended is None else extended


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


def scored_candidates(events: list[dict]) -> int:
    """The candidates a run's log (store.events()) says its steps scored: what candidates.jsonl holds."""
    # a step event holds one result per candidate it made (a skill refresh's none)
    return sum(len(e.get("results") or []) for e in events if e.get("type") == "step")
