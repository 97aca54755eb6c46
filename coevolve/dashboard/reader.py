"""What the dashboard shows, read from run and comparison directories.

Read-only by construction: this module opens files for reading only (no
`repair_jsonl`, no writer, no report rendering), so pointing the dashboard
at a run that is being written cannot disturb it. JSON-lines files go
through `coevolve.base.durable.read_jsonl`, the run store's reader: a torn
last line (a write in progress) is ignored and shows up on the next poll.
Run files with a record type (coevolve.base.records: summary.json,
candidates.jsonl, eval.jsonl) are read as those records, old layouts
included; one that is not names its file and field and makes the run
"unreadable", not the server. So does a config.toml that is not TOML or
holds a value shown of the wrong type (run_config): the run is still listed.

Every file is parsed again only when its (inode, size, mtime) changed, so a
page polling a run of 10,000 candidates costs a `stat` per file while the
run is quiet. Text that a candidate or an LLM wrote goes through
`coevolve.base.untrusted.clean` here; the page inserts it as text, never as
markup.
"""

from __future__ import annotations

import csv
import difflib
import functools
import hashlib
import json
import math
import re
import threading
import time
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from pydantic import BaseModel, ConfigDict

from coevolve.agents.runconfig import ES_METHODS
from coevolve.base.config import build_config
from coevolve.base.durable import read_jsonl
from coevolve.base.errors import CorruptFileError, UsageError
from coevolve.base.records import (AgentEvalRound, Candidate, IslandsSnapshot, MapElitesSnapshot, ParetoSnapshot,
                                   RunSummary, SearchSummary, SnapshotPart, Versioned, parse, parse_summary,
                                   summary_kind)
from coevolve.base.untrusted import clean
from coevolve.plan import COMPARE_CONFIG, RunSpec
from coevolve.plan import run_state as planned_run_state
from coevolve.report.collecting import failure_causes, heldout_change, planned_folders
from coevolve.report.rendering import change_line, fmt_delta, fmt_mean_std, run_table_rows
from coevolve.runstore import LOCK, PROMPTS, RunStore, ended, writer_of
from coevolve.search.builtin.islands import IslandsMethod
from coevolve.search.builtin.map_elites import MapElitesMethod
from coevolve.search.builtin.pareto import ParetoMethod
from coevolve.search.methods import (DISTILL, display_name, is_method, method_class, outside_budget, parse_name,
                                     uses_es)
from coevolve.search.population import better, parse_tie, sort_key
from coevolve.search.runconfig import RunConfig
from coevolve.search.skill import requests_name_versions, shown_counts, trial_line, version_label
from coevolve.search.skill_versions import SkillVersions
from coevolve.stats import mean_at_k, pass_at_k
from tasks.base import HeuristicTask, gap as task_gap
from tasks.check import checked_reference
from tasks.loader import TaskExited, exited
from tasks.registry import heuristic_task

RUN_MARKER = "config.toml"
COMPARE_MARKERS = (COMPARE_CONFIG, "table.csv")
SCAN_DEPTH = 3  # how deep a folder of runs is searched (runs/<task>/<method>-b<budget>-s<seed>)
MESSAGE_LIMIT = 4000  # characters of a failure message shown (its end: where errors say what went wrong)
PROMPT_LIMIT = 40_000  # characters of one prompt message shown (the skill, parents and failures fit)
TEXT_LIMIT = 200_000  # characters of any one candidate text shown
TABLE_LIMIT = 4000  # characters of one value of the run table (its starting programs and trials run long)


def text(value: object, limit: int = TEXT_LIMIT) -> str:
    """Untrusted text, safe to hand to the page (which inserts it as text);
    a long one keeps its end (where an error says what went wrong)."""
    return clean(value, limit)


def head(value: object, limit: int) -> str:
    """Untrusted text cut to its first `limit` characters (a summary line)."""
    body = clean(value)
    return body if len(body) <= limit else body[: limit - 1] + "…"


# ------------------------------------------------------------------ file cache
class FileCache:
    """Parsed files, re-read only when their (inode, size, mtime) changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[Path, str], tuple[tuple[int, int, int], Any]] = {}

    def get(self, path: Path, parse: Callable[[Path], Any], default: Any = None, kind: str = "") -> Any:
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return default
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            hit = self._entries.get((path, kind))
        if hit is not None and hit[0] == key:
            return hit[1]
        value = parse(path)
        with self._lock:
            self._entries[(path, kind)] = (key, value)
        return value


CACHE = FileCache()


def jsonl(path: Path) -> list[Any]:
    return CACHE.get(path, read_jsonl, default=[], kind="jsonl")


def _load(path: Path, loads: Callable[[str], Any], errors: tuple[type[Exception], ...], what: str) -> Any:
    """A whole file (replaced atomically by its writer, so a parse error is
    damage, not a write in progress)."""
    try:
        return loads(path.read_text(encoding="utf-8"))
    except (*errors, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"{path}: not valid {what} ({exc})") from None


def _whole(path: Path, loads: Callable[[str], Any], errors: tuple[type[Exception], ...], what: str,
           default: Any) -> Any:
    return CACHE.get(path, lambda p: _load(p, loads, errors, what), default=default, kind=what)


def json_file(path: Path) -> Any:
    return _whole(path, json.loads, (json.JSONDecodeError,), "JSON", None)


def toml_file(path: Path) -> dict:
    return _whole(path, tomllib.loads, (tomllib.TOMLDecodeError,), "TOML", {})


def _typed(data: Any, read: Callable[[Any, str], Any], where: str) -> Any:
    """A record as its type, or CorruptFileError (the server's "unreadable") naming file and field."""
    try:
        return read(data, where)
    except UsageError as exc:  # records.parse: "<where>: not a valid <Type>: <field>: <problem>"
        raise CorruptFileError(f"unexpected file content: {exc}") from None


def typed_lines(lines: list[Any], kind: type[Versioned], where: str) -> list[Any]:
    return [_typed(line, lambda d, w: parse(d, kind, w), f"{where} line {n}") for n, line in enumerate(lines, start=1)]


def records_file(path: Path, kind: type[Versioned]) -> list[Any]:
    """A JSON-lines file of `kind` records (candidates.jsonl, eval.jsonl)."""
    return CACHE.get(path, lambda p: typed_lines(read_jsonl(p), kind, str(p)), default=[], kind=kind.__name__)


def summary_file(path: Path) -> RunSummary | None:
    """summary.json as its run kind's summary; None before the run wrote one."""
    def read(p: Path) -> RunSummary:
        return _typed(_load(p, json.loads, (json.JSONDecodeError,), "JSON"), parse_summary, str(p))
    return CACHE.get(path, read, kind="summary")


def csv_file(path: Path) -> list[dict[str, str]]:
    def parse(p: Path) -> list[dict[str, str]]:
        with open(p, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    return CACHE.get(path, parse, default=[], kind="csv")


# ------------------------------------------------------------------ what a directory is
def kind_of(path: Path, known: str | None = None) -> str | None:
    """"comparison", "agent", "run" (heuristic) or None. A run whose config.toml cannot be read is `known`
    (the kind it was listed as before: an agent run stays one while its config is broken, so its page
    says why) or, found so, "run" unless its summary tells otherwise."""
    if not path.is_dir():
        return None
    if any((path / m).is_file() for m in COMPARE_MARKERS):
        return "comparison"
    if (path / RUN_MARKER).is_file():
        # an agent run's config has an [agent] section, a heuristic run's never does; agent runs written
        # before every section was dumped say so in their summary (records.summary_kind)
        try:
            if "agent" in toml_file(path / RUN_MARKER):
                return "agent"
        except CorruptFileError:  # listed all the same, and unreadable (file and line) when it is read: a
            if known is not None:  # broken config.toml stops neither the listing nor the folder's other runs
                return known
        try:
            summary = json_file(path / "summary.json")
        except CorruptFileError:  # shown as unreadable when the run is opened
            summary = None
        return "agent" if summary is not None and summary_kind(summary) == "agent" else "run"
    return None


KINDS = {"run": "a heuristic run", "agent": "an agent run", "comparison": "a comparison"}
UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # a URL path segment keeps these as they are


def url_id(place: tuple[str, ...]) -> str:
    """A directory's id from its place (the folder names from the served folder down): the names joined
    by "~", so the id is the same whatever else is found and whenever. A name with other characters has
    them replaced by "-" and the id ends with a digest of the place, so two places never share an id."""
    safe = [UNSAFE.sub("-", name) for name in place]
    ident = "~".join(safe)
    if safe != list(place):
        ident += "-" + digest("/".join(place))
    return ident


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def root_labels(roots: list[Path]) -> dict[Path, tuple[str, ...]]:
    """Each served directory's name, with as many of the folders above it as tell it from the others'
    (a/runs and b/runs)."""
    labels = {}
    for root in roots:
        n = 1
        while n < len(root.parts) and any(o != root and o.parts[-n:] == root.parts[-n:] for o in roots):
            n += 1
        labels[root] = root.parts[-n:]
    return labels


@dataclass
class Entry:
    id: str
    kind: str  # run | agent | comparison
    path: Path
    label: str
    parent: str | None = None  # the comparison an arm run belongs to


@dataclass
class Registry:
    """The directories the dashboard serves, each under a stable id. Folders
    given on the command line are searched again on every listing, so runs
    that start later under them appear without a restart."""

    roots: list[Path]
    stale_after: float = 600.0
    entries: dict[str, Entry] = field(default_factory=dict)
    _by_path: dict[Path, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, directories: list[str | Path], stale_after: float = 600.0) -> "Registry":
        """Refuses (UsageError) a directory that is missing or holds no run or comparison."""
        roots = []
        for raw in directories:
            path = Path(raw).expanduser().resolve()
            if not path.exists():
                raise UsageError(f"{raw}: no such directory")
            if not path.is_dir():
                raise UsageError(f"{raw}: not a directory (give a run, comparison or folder of runs)")
            roots.append(path)
        registry = cls(roots, stale_after)
        registry.scan()
        for root, raw in zip(roots, directories):
            if not any(e.path == root or root in e.path.parents for e in registry.entries.values()):
                raise UsageError(f"{raw}: not a run directory (no {RUN_MARKER}), not a comparison "
                                 f"(no {' or '.join(COMPARE_MARKERS)}) and no run below it")
        return registry

    def _add(self, path: Path, kind: str, parent: str | None, place: tuple[str, ...]) -> str:
        with self._lock:
            if path in self._by_path:
                entry = self.entries[self._by_path[path]]
                # a run found while its config.toml could not be read was taken for a heuristic run (kind_of):
                # mended, its config tells (an agent run's [agent]), and its pages are the agent ones from then on
                entry.kind = kind
                return entry.id
            ident = url_id(place)
            if ident in self.entries:  # two places spelt alike (given directories nested oddly): its own id,
                ident += "-" + digest(str(path))  # never the other's
            self.entries[ident] = Entry(ident, kind, path, str(path), parent)
            self._by_path[path] = ident
            return ident

    def scan(self) -> None:
        labels = root_labels(self.roots)
        for root in self.roots:
            # the runs of a folder served alone are named from inside it (tsp_construct~eoh-b12-s0); a run
            # or comparison given itself goes by its name, and beside other directories every id starts
            # with its directory's label: two given folders may hold the same tsp_construct/eoh-b12-s0
            named = len(self.roots) > 1 or kind_of(root) is not None
            self._scan(root, 0, None, labels[root] if named else ())

    def _scan(self, path: Path, depth: int, parent: str | None, place: tuple[str, ...]) -> None:
        listed = self._by_path.get(path)
        kind = kind_of(path, self.entries[listed].kind if listed is not None else None)
        if kind is not None:
            ident = self._add(path, kind, parent, place)
            if kind == "comparison":  # its arm runs live under runs/
                runs = path / "runs"
                if runs.is_dir():
                    self._scan(runs, 1, ident, (*place, runs.name))
            return
        if depth >= SCAN_DEPTH:
            return
        try:
            children = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for child in children:
            self._scan(child, depth + 1, parent, (*place, child.name))

    def get(self, ident: str, kinds: tuple[str, ...] = ("run", "agent", "comparison")) -> Entry:
        """The entry of `ident`; a KeyError that says why there is none (the API's 404 message)."""
        entry = self.entries.get(ident)
        shown = text(ident, 200)  # from the URL
        if entry is None:
            raise KeyError(f"no run or comparison here has the id {shown!r}: an id is the directory's path under "
                           "the folder served, so a link to a directory that was moved or removed, or one from "
                           "a dashboard that served other folders, finds none (the runs list has every id)")
        if entry.kind not in kinds:
            raise KeyError(f"{shown!r} is {KINDS[entry.kind]}, not {' or '.join(KINDS[k] for k in kinds)}")
        return entry

    def id_of(self, path: Path) -> str | None:
        return self._by_path.get(path.resolve())


# ------------------------------------------------------------------ state of a run
def newest_write(path: Path) -> float | None:
    times = []
    for name in ("events.jsonl", "candidates.jsonl", "history.jsonl", "eval.jsonl", "summary.json", RUN_MARKER):
        try:
            times.append((path / name).stat().st_mtime)
        except OSError:
            pass
    return max(times) if times else None


class Writer(NamedTuple):
    """What a run or comparison directory's writer lock (runstore.hold_directory) tells."""

    locked: bool  # it has a lock that tells: a lock file its writer recorded itself in, or one held now
    holder: str | None  # who holds it now ("pid 1234 on HOST, since 03:41"), None when no one does


def writer(path: Path) -> Writer:
    """Whether a process writes `path` now, by its writer lock. One open, flock and close (writer_of),
    never a hold: asked once per directory and look, never per file or candidate. A lock file without a
    record tells nothing: hold_directory made it and then found no flock on that file system (some NFS
    or FUSE mounts), so its writer went unguarded, and a killed one would seem stopped while running."""
    try:
        recorded = (path / LOCK).stat().st_size > 0
    except OSError:
        return Writer(False, None)  # written before the lock, or where it could not be made
    holder = writer_of(path)
    return Writer(recorded or holder is not None, holder)


def run_state_and_writer(path: Path, events: list[dict], stale_after: float) -> tuple[str, str | None]:
    """A run's state and who writes it now. finished (its log ends); running while a process holds its
    writer lock, or, for a run without one (written before the lock, or on a file system without flock),
    while its files were written within `stale_after` seconds; capped (a [caps] limit ended it: raise it
    and `--resume`) or stopped otherwise (killed or interrupted: `coevolve run --resume` continues it). A
    lock file nobody holds is stopped at once: the kernel drops a killed writer's flock."""
    if ended(events):
        return "finished", None  # no lock asked: a finished run is most of a folder of runs
    lock = writer(path)
    if lock.locked:
        live = lock.holder is not None
    else:
        last = newest_write(path)
        live = last is not None and time.time() - last < stale_after
    if live:
        return "running", lock.holder
    return (f"capped: {events[-1].get('cap')}" if events and events[-1].get("type") == "stop" else "stopped"), None


def run_state(path: Path, events: list[dict], stale_after: float) -> str:
    """A run's state (run_state_and_writer's, which decides it)."""
    return run_state_and_writer(path, events, stale_after)[0]


def finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def number(value: Any) -> int | float | None:
    """A count or score as JSON gives it: a whole number stays whole, a float is `finite`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else finite(value)


# what Python's csv module writes for an int or a finite float (repr: 7, -0.5, 1e-05)
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def csv_value(raw: str | None, limit: int = 300) -> int | float | str | None:
    """A CSV cell as the page and API clients want it: a number as a number, an empty cell as None, any
    other text cleaned (inf and nan too: JSON has no such number, and the text says what it was)."""
    if raw is None or raw == "":
        return None
    if NUMBER.fullmatch(raw):
        return number(int(raw) if raw.lstrip("+-").isdigit() else float(raw))  # 1e999: None, as JSON has no inf
    return text(raw, limit)


# ------------------------------------------------------------------ heuristic runs
_REFERENCES: dict[tuple[str, str, int], tuple[float | None, str]] = {}  # (value, why unavailable)


# one lock per task name: the page's parallel requests would each build a task not built yet, and a slow
# build must not hold up the runs of other tasks
_BUILDING: dict[str, threading.Lock] = {}
_BUILDING_LOCK = threading.Lock()


@functools.lru_cache(maxsize=32)
def _build(name: str) -> tuple[HeuristicTask | None, str]:
    try:
        return heuristic_task(name), ""
    except Exception as exc:  # a plugin task not installed here, a task file that is gone, a task's own error
        return None, head(str(exc) or type(exc).__name__, 300)


def built_task(name: str) -> tuple[HeuristicTask | None, str]:
    """The heuristic task `name`, built once per name, or None and why it cannot be built (the run is
    shown without it). Once: a page polls every run's row every few seconds, and building a task (its
    instances) is far dearer than the poll."""
    with _BUILDING_LOCK:
        lock = _BUILDING.setdefault(name, threading.Lock())
    with lock:
        return _build(name)


def cached_task(name: str) -> HeuristicTask:
    """built_task as a builder for the report's functions (run_table_rows): the task, or the reason it
    cannot be built raised, as building it there would raise; never a second build of the name."""
    task, why = built_task(name)
    if task is None:
        raise UsageError(why)
    return task


def task_info(name: str) -> tuple[str, tuple[str, int] | None]:
    """(direction, train set) of a heuristic task; ("min", None) for one that cannot be built here."""
    task, _ = built_task(name)
    return ("min", None) if task is None else (task.direction, tuple(task.train))


def reference(name: str, split: str, size: int) -> float | None:
    """The task's reference objective on the train set (memoised); None when it has none."""
    return reference_of(name, split, size)[0]


def reference_of(name: str, split: str, size: int) -> tuple[float | None, str]:
    """The task's reference objective (memoised) and, when there is none to use, the line that says why:
    its reference() tried to end the process (loader.exited: the task's own code runs in the dashboard's
    process, which must go on serving every other run), raised, or returned no Reference
    (checked_reference). A task that cannot be built here has none, without a word (its page says why)."""
    key = (name, split, size)
    if key not in _REFERENCES:
        task, _ = built_task(name)
        try:
            ref, problem = (None, "") if task is None else checked_reference(task, split, size)
            _REFERENCES[key] = (None if ref is None else ref.value, text(problem, 1000))
        except TaskExited as exc:
            _REFERENCES[key] = (None, text(exited(exc, f"reference({split!r}, {size})"), 1000))
    return _REFERENCES[key]


def gap(objective: float | None, ref: float | None, direction: str) -> float | None:
    return None if objective is None or ref is None or ref == 0 else task_gap(objective, ref, direction)


class ConfigPart(BaseModel):
    """What the reader shows of a run's config.toml, checked as `coevolve run` writes it: strict (a string is
    no budget), other sections and keys ignored: a config another version wrote, with sections this one
    does not know, is still read (only `coevolve run --resume` needs the whole config valid)."""

    model_config = ConfigDict(strict=True, extra="ignore")


class RunPart(ConfigPart):
    task: str = "?"
    method: str = "?"
    seed: int | None = None
    budget: int = 0


class SandboxPart(ConfigPart):
    timeout_s: float | None = None


class SamplingPart(ConfigPart):
    max_tokens: int | None = None


class RunConfigFile(ConfigPart):
    run: RunPart = RunPart()
    sandbox: SandboxPart = SandboxPart()
    sampling: SamplingPart = SamplingPart()


def run_config(path: Path) -> dict:
    """A run's config.toml as its tables, the values the reader shows checked (RunConfigFile); one that is
    not TOML, or holds such a value of the wrong type, is a CorruptFileError naming the file and the line or
    field (the run "unreadable", as a damaged log makes it), not a crash of the page or the listing."""
    def read(p: Path) -> dict:
        raw = _load(p, tomllib.loads, (tomllib.TOMLDecodeError,), "TOML")
        _typed(raw, lambda d, w: parse(d, RunConfigFile, w), str(p))
        return raw
    return CACHE.get(path, read, default={}, kind="run config")


class RunDir:
    """What every run directory (heuristic or agent) holds, as far as it is written."""

    def __init__(self, path: Path, stale_after: float = 600.0) -> None:
        self.path = path
        self.config = run_config(path / RUN_MARKER)
        run = self.config.get("run", {})
        self.task, self.method = str(run.get("task", "?")), str(run.get("method", "?"))
        self.seed, self.budget = run.get("seed"), int(run.get("budget") or 0)
        self.summary = summary_file(path / "summary.json")
        self.events = jsonl(path / "events.jsonl")
        self.state, self.writer = run_state_and_writer(path, self.events, stale_after)


class HeuristicRun(RunDir):
    """A heuristic-search run directory."""

    def __init__(self, path: Path, stale_after: float = 600.0) -> None:
        super().__init__(path, stale_after)
        self.candidates: list[Candidate] = records_file(path / "candidates.jsonl", Candidate)
        self.direction = self.summary.train.direction if self.summary else task_info(self.task)[0]

    def better(self, a: float, b: float) -> bool:
        return a < b if self.direction == "min" else a > b

    def valid(self) -> list[Candidate]:
        return [c for c in self.candidates if finite(c.objective) is not None]

    def ranked(self) -> list[Candidate]:
        """The valid candidates best first, as the run ranks its programs: by objective, equal ones by its
        [eoh] tie_break, then the earlier. A repeat (its original's score reused in no time) ranks as its
        original, right after it; one of a seeded program, not in candidates.jsonl, stands for it."""
        return self._ranking(self.valid())

    def _ranking(self, valid: list[Candidate]) -> list[Candidate]:
        """`valid` best first, by the run's rule (ranked)."""
        eoh = self.config.get("eoh")
        ties = eoh.get("tie_break") if isinstance(eoh, dict) else None
        well_formed = isinstance(ties, list) and all(isinstance(t, str) and parse_tie(t)[0] in ("min", "max")
                                                      for t in ties)
        key = sort_key(self.direction, ties if well_formed else ())
        originals = {c.id: c for c in valid}
        return sorted(valid, key=lambda c: (*key(originals.get(c.duplicate_of, c))[:-1], c.id))

    def best(self) -> Candidate | None:
        """The run's best, as summary.json names it: the archive's, which is a seeded program (the template,
        id 0, or a [start] one) where no proposal beat it, not a later proposal that scored the same (a copy
        of the template's code). While the run goes, the archive's rule: the scored seeded programs ranked
        with the candidates, the earlier of equal ones first."""
        seeds = [s for s in self.seeds() if finite(s.objective) is not None]
        if isinstance(self.summary, SearchSummary) and self.summary.best is not None and ended(self.events):
            named = next((c for c in seeds + self.candidates if c.id == self.summary.best.id), None)
            if named is not None:  # else a damaged summary or log: ranked below, as while the run goes
                return named
        ranked = self._ranking(seeds + self.valid())
        return ranked[0] if ranked else None

    def caps(self) -> dict[str, Any]:
        """The limits the run was given ([caps] ones only where set)."""
        caps = self.config.get("caps") if isinstance(self.config.get("caps"), dict) else {}
        return {"budget": self.budget,
                "timeout_s": self.config.get("sandbox", {}).get("timeout_s"),
                "max_tokens": self.config.get("sampling", {}).get("max_tokens"),
                **{k: v for k, v in caps.items() if k != "prices"}}

    def used(self) -> int:
        """The evaluations the run's ledger charged, as the run table counts them: the summary's once the
        run has ended; while it runs, its candidates and the skill analysts' requests of its refresh steps,
        each of which the ledger charges too (coevolve/search/loop.py) but which make no candidate."""
        if isinstance(self.summary, SearchSummary) and ended(self.events):
            return self.summary.evaluations
        analysts = sum(len(e.get("completions") or []) for e in self.events
                       if e.get("type") == "step" and e.get("operator") == DISTILL)
        return len(self.candidates) + analysts

    def outside_budget(self) -> int:
        """Evaluations charged beyond the budget T (EoH's initial population with eoh.init_in_budget = false):
        the summary's once the run wrote one, before that what its config plans."""
        if isinstance(self.summary, SearchSummary):
            return self.summary.outside_budget
        return CACHE.get(self.path / RUN_MARKER, planned_outside, default=0, kind="outside")

    def row(self) -> dict[str, Any]:
        best = self.best()
        used = self.used()
        ref, unavailable = None, ""
        if self.summary:
            ref = finite(self.summary.train.reference)
            # why the run had none to use, where its reference() gave none (the loop's `reference_problem`)
            unavailable = text(self.summary.train.reference_problem or "", 1000)
        elif best is not None:
            train = task_info(self.task)[1]
            ref, unavailable = reference_of(self.task, *train) if train else (None, "")
        # the budget T and what is charged outside it apart, as the run table says them (16 / 12 (+ 4 initial
        # outside T)): one total of 16 reads as if T were 16
        return {"kind": "run", "task": self.task, "method": display_name(self.method), "seed": self.seed,
                "used": used, "budget": self.budget, "outside_budget": self.outside_budget(), "state": self.state,
                "writer": self.writer,
                "best": best and best.objective, "best_id": best and best.id,
                "gap": gap(best and best.objective, ref, self.direction),
                # the gap's reference when it cannot be had: why (a task's reference() that exited)
                "reference_unavailable": unavailable or None,
                "valid_rate": (len(self.valid()) / used) if used else None, "caps": self.caps(),
                # valid programs of their own: a repeat of earlier code is valid as the original was
                "valid": len(self.valid()), "distinct_valid": sum(c.duplicate_of is None for c in self.valid()),
                "direction": self.direction, "uses_es": uses_es(self.method)}

    def failure_causes(self) -> list[dict[str, Any]]:
        """The run table's commonest failures, as text for the page; counted once per change of
        candidates.jsonl, not on every poll."""
        def count(path: Path) -> list[dict[str, Any]]:
            # read here, not self.candidates (read before the cache took the file's state as the key): a line
            # written in between would otherwise stay uncounted until the file changed again
            return [{"cause": text(cause, 100), "count": n}
                    for cause, n in failure_causes(records_file(path, Candidate))]
        return CACHE.get(self.path / "candidates.jsonl", count, default=[], kind="failure_causes")

    def table(self) -> list[tuple[str, str]] | None:
        """The table `coevolve run` printed when the run ended (coevolve.report.rendering.run_table_rows),
        as text for the page; None before the run wrote its summary, or when the table cannot be made.
        Made once per change of summary.json: a run with a summary no longer writes the files it reads."""
        def make(path: Path) -> list[tuple[str, str]] | None:
            try:
                # read here, not self.summary, for the reason failure_causes reads its file itself
                summary = summary_file(path)
                if not isinstance(summary, SearchSummary):
                    return None
                rows = run_table_rows(summary, self.path, cached_task)
            # the task's own code runs here (the best is compared with its template), and a damaged candidate
            # line or a summary another version wrote can fail as anything: the page goes on without the table
            except Exception:
                return None
            return [(text(name, 100), text(value, TABLE_LIMIT)) for name, value in rows]
        return CACHE.get(self.path / "summary.json", make, kind="run_table")

    def curves(self) -> dict[str, Any]:
        """Best-so-far and cumulative valid rate against evaluations as the ledger charged them: a
        candidate's id is its evaluation number, and skill analysts' requests (charged, no candidate) fall
        between ids, so the rate is over the id, not the candidates so far, and a refresh after the last
        candidate extends the curves to `used`. Failures per step."""
        xs, best_y, valid_rate = [], [], []
        best: float | None = None
        valid = 0
        failures_by_step: dict[str, Counter] = {}
        by_operator: dict[str, Counter] = {}
        steps: list[int] = []
        for c in self.candidates:
            objective = finite(c.objective)
            if objective is not None:
                valid += 1
                if best is None or self.better(objective, best):
                    best = objective
            xs.append(c.id)
            best_y.append(best)
            valid_rate.append(valid / c.id)
            outcome = outcome_of(c)
            if c.step not in steps:
                steps.append(c.step)
            failures_by_step.setdefault(outcome, Counter())[c.step] += 1
            by_operator.setdefault(outcome, Counter())[c.operator] += 1
        used = self.used()
        if xs and used > xs[-1]:
            xs.append(used)
            best_y.append(best)
            valid_rate.append(valid / used)
        operators = sorted({op for counts in by_operator.values() for op in counts})
        return {"x": xs, "best": best_y, "valid_rate": valid_rate, "steps": steps,
                "outcomes_by_step": {k: [v[s] for s in steps] for k, v in sorted(failures_by_step.items())},
                "operators": operators,
                "outcomes_by_operator": {k: [v[o] for o in operators] for k, v in sorted(by_operator.items())},
                "budget": self.budget, "direction": self.direction}

    def ranks(self) -> dict[int, int]:
        """Rank of each valid candidate (1 = best; `ranked`)."""
        return {c.id: rank for rank, c in enumerate(self.ranked(), start=1)}

    def by_id(self) -> dict[int, Candidate]:
        return {c.id: c for c in self.candidates}

    def seeds(self) -> list[Candidate]:
        """The programs the archive started with, from the log's seed events, in the order they were
        scored: the template (0, context.seed_template) and the [start] programs (-1, -2, ..., logged
        with their code). Not proposed and not charged: never in the run's proposal counts."""
        found = []
        for e in self.events:
            result = e.get("result")
            if e.get("type") != "seed" or not isinstance(result, dict) or not isinstance(e.get("id", 0), int):
                continue
            sid = e.get("id", 0)
            if sid == 0:  # the template is not logged: the task holds it
                task, why = built_task(self.task)
                code = task.template if task is not None else None
                idea = "the task's template" if task is not None else f"the task's template (cannot be shown: {why})"
            else:
                code, idea = e.get("code"), f"starting program {text(e.get('path'), 200)}"
            found.append(Candidate(
                id=sid, step=-1, operator="template" if sid == 0 else "start", parents=[],
                model_state={"kind": "template" if sid == 0 else "start"}, code=code if isinstance(code, str) else None,
                idea=idea, objective=finite(result.get("objective")), failure=result.get("failure") or None,
                message=result.get("message") or ""))
        return found

    def tree(self, mode: str = "auto", limit: int = 1000) -> dict[str, Any]:
        """Nodes and edges of the genealogy (from candidates.jsonl, so it grows
        while the run goes), the seeded programs as roots. A run of more than
        `limit` candidates collapses to the ones that matter: the best ten and
        all their ancestors, then the other valid ones, best first (a page
        stays quick to draw)."""
        ranks = self.ranks()
        seeds, proposed = self.seeds(), self.candidates
        seeded = len(seeds)
        collapsed = mode == "lineage" or (mode == "auto" and len(proposed) > limit)
        if collapsed:
            index = {**{s.id: s for s in seeds}, **self.by_id()}
            keep: set[int] = set()
            frontier = [cid for cid, r in ranks.items() if r <= 10]  # the best ten and their ancestors
            while frontier:
                cid = frontier.pop()
                if cid not in keep:
                    keep.add(cid)
                    frontier += index[cid].parents if cid in index else []
            if mode == "auto":  # then the valid ones, best first, up to the limit
                for cid in sorted(ranks, key=ranks.__getitem__):
                    if len(keep) >= limit:
                        break
                    keep.add(cid)
            seeds, proposed = [s for s in seeds if s.id in keep], [c for c in proposed if c.id in keep]
        seeds = seeds[:limit]  # the roots stay; the oldest proposals give way to the limit
        nodes = seeds + proposed[max(len(proposed) - (limit - len(seeds)), 0):]
        ids = {c.id for c in nodes}
        return {"collapsed": collapsed, "total": len(self.candidates), "seeded": seeded,
                "nodes": [{"id": c.id, "step": c.step, "operator": c.operator,
                           "objective": finite(c.objective), "outcome": outcome_of(c),
                           "rank": ranks.get(c.id), "parents": [p for p in c.parents if p in ids]}
                          for c in nodes],
                "direction": self.direction}

    def page(self, offset: int, limit: int, outcome: str | None = None, order: str = "id") -> dict[str, Any]:
        """One page of the candidate table (code left out: the detail view fetches it), the seeded
        programs included as rows of their own outcome, "seeded"."""
        ranks = self.ranks()
        rows = self.seeds() + self.candidates  # the seeded programs first: scored before the first step
        if outcome:
            rows = [c for c in rows if outcome_of(c) == outcome]
        if order == "rank":
            rows = sorted(rows, key=lambda c: (ranks.get(c.id, math.inf), c.id))
        elif order == "newest":
            rows = rows[::-1]
        chunk = rows[offset: offset + limit]
        return {"total": len(rows), "offset": offset, "limit": limit,
                "rows": [{"id": c.id, "step": c.step, "operator": text(c.operator, 40),
                          "objective": finite(c.objective), "outcome": outcome_of(c),
                          "rank": ranks.get(c.id), "parents": c.parents,
                          "model": text(c.model_state.get("kind"), 40),
                          "idea": head(c.idea or "", 160)} for c in chunk]}

    def candidate(self, cid: int) -> dict[str, Any] | None:
        index = {**{seed.id: seed for seed in self.seeds()}, **self.by_id()}  # a seeded parent can be opened too
        c = index.get(cid)
        if c is None:
            return None
        code = c.code
        if code is None and c.duplicate_of in index:
            code = index[c.duplicate_of].code
        diffs = []
        for pid in c.parents:
            parent = index.get(pid)
            if parent is None:
                continue
            before = (parent.code or "").splitlines()
            after = (code or "").splitlines()
            lines = list(difflib.unified_diff(before, after, f"candidate {pid}", f"candidate {cid}", lineterm="", n=3))
            diffs.append({"parent": pid, "lines": [text(line, 2000) for line in lines]})
        children = [x.id for x in self.candidates if cid in x.parents]
        return {"id": cid, "step": c.step, "operator": text(c.operator, 40),
                "objective": finite(c.objective), "outcome": outcome_of(c), "rank": self.ranks().get(cid),
                "failure": text(c.failure or "", 200), "message": text(c.message, MESSAGE_LIMIT),
                "feedback": text(c.feedback, MESSAGE_LIMIT),  # the task's note on a valid program ("" without)
                "skill_version": c.skill_version,  # the skill version its prompt showed (None: no skill)
                "idea": text(c.idea or ""), "code": None if code is None else text(code),
                "parents": c.parents, "children": children, "duplicate_of": c.duplicate_of,
                "reward": finite(c.reward),
                "model_state": {text(k, 40): (v if isinstance(v, (int, float)) or v is None else text(v, 200))
                                for k, v in c.model_state.items()},
                "seconds": finite(c.seconds), "diffs": diffs, "reply": self.reply(c), "prompt": self.prompt(c)}

    def _slot(self, c: Candidate) -> int:
        """The candidate's request in its step: a step's candidates are numbered in request order."""
        return sorted(x.id for x in self.candidates if x.step == c.step).index(c.id)

    def reply(self, c: Candidate) -> str | None:
        """The reply the candidate came from, as the model wrote it (its step event's completion); None
        for the seeded template and for a run whose log does not hold the step yet."""
        step = next((e for e in self.events if e.get("type") == "step" and e.get("step") == c.step), None)
        completions = step.get("completions") if isinstance(step, dict) else None
        if not isinstance(completions, list):
            return None
        slot = self._slot(c)
        reply = completions[slot] if slot < len(completions) else None
        return text(reply.get("text") or "") if isinstance(reply, dict) else None

    def prompt(self, c: Candidate) -> list[dict[str, str]] | None:
        """The messages the candidate's request sent (prompts.jsonl, [log] prompts); None for the seeded
        template, a run that kept none, or a step not written yet. The last record of a (step, slot)
        counts: a step a kill interrupted was asked again on resume."""
        if c.step < 0:  # a seeded program: no request
            return None
        records = [r for r in jsonl(self.path / PROMPTS) if isinstance(r, dict)]
        slot, sent = self._slot(c), {r.get("sha256"): r["messages"] for r in records if "messages" in r}
        digest = next((r.get("sha256") for r in reversed(records)
                       if r.get("step") == c.step and r.get("slot") == slot and not r.get("analyst")), None)
        messages = sent.get(digest)
        if not isinstance(messages, list):
            return None
        return [{"role": text(m.get("role"), 40), "content": text(m.get("content"), PROMPT_LIMIT)}
                for m in messages if isinstance(m, dict)]

    def skills(self) -> dict[str, Any]:
        """The skill the run's prompts showed, as far as the log holds it: each version's text (v000: the
        skill.start skill), the requests that showed each (how many scored and beat every parent shown),
        and the trials of skill.keep = "judged" in the run table's words (the one still running last)."""
        versions, trials = [], []
        seeded = self.seeds()  # the template's score, and the [start] programs: parents trials are judged against
        seed = next((s.objective for s in seeded if s.id == 0), None)
        starts = [s for s in seeded if s.id != 0]
        section = self.config.get("skill")
        # the versions and verdicts as the loop kept them, to find the trial still open
        book = SkillVersions(judged=isinstance(section, dict) and section.get("keep") == "judged")
        for e in self.events:
            kind = e.get("type")
            if kind == "skill_start":
                versions.append({"version": 0, "step": None, "text": text(e.get("text") or "")})
                book.add(0, None, -1)
            if kind == "step" and isinstance(e.get("trial"), dict):  # a refresh judges before it writes
                trials.append(e["trial"])
                kept = e["trial"].get("kept")
                book.settle(kept if isinstance(kept, int) else None)
            if kind == "step" and isinstance(e.get("skill"), dict):
                versions.append({"version": e["skill"].get("version"), "step": e.get("step"),
                                 "text": text(e["skill"].get("text") or "")})
                if isinstance(e["skill"].get("version"), int) and isinstance(e.get("step"), int):
                    book.add(e["skill"]["version"], None, e["step"])
        names_versions = requests_name_versions(self.events)
        if self.summary is not None and self.summary.context:  # finished: the last trial, judged as it stands
            trials += [t for t in self.summary.context.get("skill_trials", []) if t.get("final")]
        elif names_versions:
            try:  # still running: the open trial as it stands now
                trials += [{**t, "running": True} for t in [book.standing(self.candidates + starts, None,
                                                                         self.direction, seed)] if t]
            except (TypeError, ValueError):  # a log written by other code: no running trial
                pass
        # none for a run written before its log named each request's version: what each showed is not known
        counted = shown_counts(self.candidates + starts, self.direction, seed) if names_versions else {}
        shown = [{"version": version, "label": version_label(version), **counts} for version, counts in counted.items()]
        lines = []
        for trial in trials:
            try:
                lines.append(text(trial_line(trial), 400))
            except (KeyError, TypeError, ValueError):  # a trial written by other code: left out
                continue
        return {"versions": [{**v, "label": version_label(v["version"]) if isinstance(v["version"], int) else "?"}
                             for v in versions], "shown": shown if versions else [], "trials": lines}

    def population(self, step: int | None = None) -> dict[str, Any]:
        """The archive after one step (population/gen_NNNN.json snapshots)."""
        files = dict(snapshot_files(self.path))
        steps = list(files)
        if not steps:
            return {"steps": [], "step": None, "members": []}
        chosen = steps[-1] if step is None or step not in steps else step
        snap = json_file(files[chosen]) or {}
        members = [{"id": m.get("id"), "objective": finite(m.get("objective")), "operator": text(m.get("operator"), 40),
                    "idea": head(m.get("idea") or "", 300)} for m in snap.get("population", [])]
        return {"steps": steps, "step": chosen, "operator": text(snap.get("operator"), 40),
                "evaluations": snap.get("evaluations"), "members": members}

    def archive(self) -> dict[str, Any] | None:
        """The archive of an islands, MAP-Elites or Pareto run as its newest snapshot holds it, for the
        page's archive panel; None for a run of another method. A snapshot that cannot be read says why
        (`error`, naming the file and field) in place of the archive, never in place of the page."""
        files = snapshot_files(self.path)
        key = archive_key(self.method)
        if not files:
            return None if key is None else {**ARCHIVES[key].heading, "step": None, "file": None, "error": None}
        step, path = files[-1]
        where = path.relative_to(self.path).as_posix()
        try:
            raw = json_file(path)
            if key is None:  # a method the dashboard does not import (a method file): its snapshot says
                key = next((k for k in ARCHIVES if isinstance(raw, dict) and raw.get(k) is not None), None)
                if key is None:
                    return None
            archive = ARCHIVES[key]
            snap = CACHE.get(path, lambda p: archive.read(json_file(p), str(p)), kind=f"archive {key}")
            if snap is None:  # gone since it was listed (a run directory replaced): as if never written
                return {**archive.heading, "step": None, "file": None, "error": None}
            view = archive.view(snap, self.direction)
        except (CorruptFileError, UsageError, OSError, ValueError, TypeError) as exc:
            if key is None:  # unreadable, and no method of ours says there is an archive in it: no panel
                return None
            return {**ARCHIVES[key].heading, "step": step, "file": where, "error": text(exc, 1000)}
        evaluations = raw.get("evaluations") if isinstance(raw, dict) else None
        return {**archive.heading, "step": step, "file": where, "error": None, "evaluations": number(evaluations),
                "direction": self.direction, **view}


def snapshot_files(run: Path) -> list[tuple[int, Path]]:
    """A run's archive snapshots (population/gen_NNNN.json) by step, oldest first: sorted by the number,
    not the name (gen_10000 comes after gen_9999). The writer's temporary files (.gen_NNNN.*.tmp.json,
    durable.atomic_path) start with a dot and are never listed, so a snapshot being written is not seen
    until it is whole."""
    found = []
    try:
        names = list((run / "population").glob("gen_*.json"))
    except OSError:
        return []
    for f in names:
        try:
            found.append((int(f.stem.split("_", 1)[1]), f))
        except ValueError:
            continue
    return sorted(found)


# ------------------------------------------------------------------ archives (islands, MAP-Elites, Pareto)
# a snapshot is read through the record its method writes it with (coevolve.base.records)
def checked(model: type[SnapshotPart], check: Callable[[Any], tuple[str, str] | None]) -> Callable[[Any, str], Any]:
    """A reader of `model` that also holds it to `check` (what a type cannot say: a cell inside the grid);
    both refuse as records.parse does, naming the file, the type and the field."""
    def read(data: Any, where: str) -> Any:
        snap = _typed(data, lambda d, w: parse(d, model, w), where)
        problem = check(snap)
        if problem is not None:
            raise CorruptFileError(f"unexpected file content: {where}: not a valid {model.__name__}: "
                                   f"{problem[0]}: {problem[1]}")
        return snap
    return read


def grid_problem(snap: MapElitesSnapshot) -> tuple[str, str] | None:
    grid = snap.grid
    if len(grid.ranges) != len(grid.descriptors):
        return "grid.ranges", f"{len(grid.ranges)} ranges for {len(grid.descriptors)} descriptors"
    for n, cell in enumerate(grid.cells):
        if len(cell.cell) != len(grid.descriptors) or not all(0 <= i < grid.bins for i in cell.cell):
            return (f"grid.cells.{n}.cell", f"{cell.cell} is no cell of a grid of {grid.bins} cells per descriptor "
                    f"over {len(grid.descriptors)} descriptors")
    return None


def islands_view(snap: IslandsSnapshot, direction: str) -> dict[str, Any]:
    """One row per island: its programs, its best (an island lists its ids best first) and how often it
    was emptied and refounded."""
    objectives = {m.id: finite(m.objective) for m in snap.population}
    resets = snap.resets or []
    rows = []
    for index, ids in enumerate(snap.islands):
        steps = [r.step for r in resets if index in r.reset]
        rows.append({"island": index, "size": len(ids), "best_id": ids[0] if ids else None,
                     "best": objectives.get(ids[0]) if ids else None,
                     "resets": None if snap.resets is None else len(steps), "reset_steps": steps})
    return {"islands": rows, "resets": None if snap.resets is None else len(resets)}


def grid_view(snap: MapElitesSnapshot, direction: str) -> dict[str, Any]:
    """The grid as the page draws it: over its first two descriptors (a grid of three is drawn over the
    first two, each cell the best of the elites behind it, as the report's heat map), each cell's elite
    with its `quality`, 0 for the worst objective shown to 1 for the best (direction-aware)."""
    grid = snap.grid
    shown = list(range(min(2, len(grid.descriptors))))
    axes = []
    for i in shown:
        low, high = grid.ranges[i]
        axes.append({"name": text(grid.descriptors[i], 80), "low": finite(low), "high": finite(high),
                     "edges": [finite(low + (high - low) * k / grid.bins) for k in range(grid.bins + 1)]})
    drawn: dict[tuple[int, ...], dict[str, Any]] = {}
    for cell in grid.cells:
        place = tuple(cell.cell[i] for i in shown)
        value = finite(cell.objective)
        held = drawn.get(place)
        elites = held["elites"] + 1 if held else 1
        if held is None or (value is not None and (held["objective"] is None or better(value, held["objective"], direction))):
            held = {"x": place[0], "y": place[1] if len(place) > 1 else 0, "id": cell.id, "objective": value,
                    "descriptors": [finite(v) for v in cell.descriptors]}
        drawn[place] = {**held, "elites": elites}
    values = [c["objective"] for c in drawn.values() if c["objective"] is not None]
    low, high = min(values, default=0.0), max(values, default=0.0)
    best, worst = (low, high) if direction == "min" else (high, low)
    for c in drawn.values():
        v = c["objective"]
        c["quality"] = None if v is None else 1.0 if best == worst else max(0.0, round((v - worst) / (best - worst), 4))
    return {"descriptors": [text(n, 80) for n in grid.descriptors], "bins": grid.bins, "axes": axes,
            "hidden": [text(n, 80) for n in grid.descriptors[len(shown):]],
            "cells": sorted(drawn.values(), key=lambda c: (c["y"], c["x"])),
            "filled": len(grid.cells), "total": grid.bins ** len(grid.descriptors), "undescribed": grid.undescribed}


def pareto_view(snap: ParetoSnapshot, direction: str) -> dict[str, Any]:
    """The front in its snapshot's order (best objective first), each program with the instances it is
    the best on and its share of the parent draws (drawn in proportion to the instances won)."""
    front = snap.pareto
    total = sum(w.wins for w in front.wins)
    return {"instances": front.instances, "unprofiled": front.unprofiled,
            "front": [{"id": w.id, "objective": finite(w.objective), "wins": w.wins,
                       "share": w.wins / total if total else None} for w in front.wins]}


class Archive(NamedTuple):
    """An archive the page draws: the method class whose runs have it, how its part of a snapshot is
    read and turned into what the page shows."""

    method: type
    heading: dict[str, str]
    read: Callable[[Any, str], Any]
    view: Callable[[Any, str], dict[str, Any]]


# by the key each method's snapshot() writes its archive under (beside "population", which every method
# writes and the population table shows)
ARCHIVES: dict[str, Archive] = {
    "islands": Archive(IslandsMethod, {"kind": "islands", "title": "islands"},
                       checked(IslandsSnapshot, lambda snap: None), islands_view),
    "grid": Archive(MapElitesMethod, {"kind": "grid", "title": "MAP-Elites grid"},
                    checked(MapElitesSnapshot, grid_problem), grid_view),
    "pareto": Archive(ParetoMethod, {"kind": "pareto", "title": "Pareto front"},
                      checked(ParetoSnapshot, lambda snap: None), pareto_view),
}


@functools.lru_cache(maxsize=256)
def archive_key(method: str) -> str | None:
    """The ARCHIVES key of a run's method: by its class (a subclass of one of theirs counts), so a run
    shows its panel before its first snapshot; None for other methods. A method file or module is not
    looked up here: its snapshots tell (naming the run, display_name, imports a method file). Memoised: the page
    asks on every poll, and the registry looks its plugins up each time."""
    base = parse_name(method).base
    if not is_method(base):
        return None
    try:
        cls = method_class(base)
    except Exception:  # a plugin that fails to import here: its snapshots tell
        return None
    return next((key for key, archive in ARCHIVES.items() if issubclass(cls, archive.method)), None)


def planned_outside(config: Path) -> int:
    """What a run's config charges outside its budget (search.methods.outside_budget); 0 for a config this
    version cannot build (another version's, a task file gone): the run table of its summary says it then."""
    try:
        return outside_budget(build_config(RunConfig, toml_file(config)))
    except (UsageError, CorruptFileError, KeyError, TypeError, ValueError):
        return 0


def outcome_of(c: Candidate) -> str:
    """seeded, valid, valid repeat or the failure kind (parse, timeout, bad_signature, duplicate: a clone
    rejected unscored, ...), as the run table counts them: a repeat of earlier code takes its original's
    score, so a repeat of a valid program is valid ("N repeats" of its valid ones) and a repeat of a failed
    one is that failure."""
    if c.step < 0:  # scored before the first step, not proposed (its failure, if any, is in its detail)
        return "seeded"
    if finite(c.objective) is not None:
        return "valid" if c.duplicate_of is None else "valid repeat"
    return (c.failure or "invalid")[:40]


# ------------------------------------------------------------------ ES history
def es_history(path: Path) -> dict[str, Any]:
    """history.jsonl: one record per ES generation (heuristic and agent runs)."""
    records = jsonl(path / "history.jsonl")
    out = []
    for r in records:
        rewards = [finite(x) for x in r.get("rewards", [])]
        present = [x for x in rewards if x is not None]
        out.append({"generation": r.get("generation"), "step": (r.get("extra") or {}).get("step"),
                    "rewards": rewards, "z": [finite(x) for x in r.get("normalised", [])],
                    "sigma": finite(r.get("sigma")), "alpha": finite(r.get("alpha")),
                    "checksum": text(r.get("checksum"), 80), "population": r.get("population"),
                    "noise": text(r.get("noise") or "", 20),
                    "all_equal": bool(present) and max(present) == min(present),
                    "update_seconds": finite(r.get("update_seconds")), "time": finite(r.get("time"))})
    return {"generations": out}


# ------------------------------------------------------------------ agent runs
class AgentRun(RunDir):
    """An agent run directory: rounds, held-out evaluations, skills, episodes."""

    def evals(self) -> list[AgentEvalRound]:
        """The held-out evaluations: the eval events, or eval.jsonl for runs logged before them."""
        logged = [e for e in self.events if e.get("type") == "eval"]
        if logged:
            return typed_lines(logged, AgentEvalRound, f"{self.path / 'events.jsonl'} (eval events)")
        return records_file(self.path / "eval.jsonl", AgentEvalRound)

    def row(self) -> dict[str, Any]:
        rounds = [e for e in self.events if e.get("type") == "round"]
        used = rounds[-1].get("episodes_used", 0) if rounds else (self.summary.ledger.used if self.summary else 0)
        evals = self.evals()
        best = max((finite(e.mean_reward) for e in evals if finite(e.mean_reward) is not None), default=None)
        solved = [finite(r.get("solved_rate")) for r in rounds]
        return {"kind": "agent", "task": self.task, "method": self.method, "seed": self.seed, "used": used,
                "budget": self.budget, "state": self.state, "writer": self.writer, "best": best, "best_id": None,
                "gap": None,
                "valid_rate": solved[-1] if solved else None, "direction": "max", "uses_es": self.method in ES_METHODS,
                "caps": {"budget": self.budget, "rounds": len(rounds),
                         "max_tokens": self.config.get("sampling", {}).get("max_tokens")}}

    def detail(self) -> dict[str, Any]:
        rounds = [{"round": e.get("round"), "episodes_used": e.get("episodes_used"),
                   "mean_reward": finite(e.get("mean_reward")), "solved_rate": finite(e.get("solved_rate")),
                   "fitness": [finite(x) for x in e.get("fitness", [])]}
                  for e in self.events if e.get("type") == "round"]
        evals = []
        for e in self.evals():
            metrics: dict[str, Any] = {}
            scores = {"mean_reward": e.mean_reward, **(e.model_extra or {})}  # the task's scores ride as extra keys
            for key, value in scores.items():
                if key == "type":  # an eval event's own
                    continue
                if isinstance(value, dict) and "mean" in value:  # Mean@k / Pass@k with an interval
                    metrics[text(key, 40)] = {k: finite(value.get(k)) for k in ("mean", "low", "high")}
                elif finite(value) is not None:
                    metrics[text(key, 40)] = {"mean": finite(value), "low": None, "high": None}
            metrics.update(at_k(self.path / "trajectories" / f"eval_{e.round:03d}.jsonl"))
            evals.append({"round": e.round, "episodes_used": e.episodes_used, "metrics": metrics})
        skills = [{"round": e.get("round"), "name": text(e.get("name"), 80), "mode": text(e.get("mode") or "online", 20),
                   "text": text(e.get("text") or "")} for e in self.events if e.get("type") == "skill"]
        if not skills:  # SKILL.md files without events (older runs): the current text only
            for f in sorted((self.path / "skills").glob("*/SKILL.md")):
                skills.append({"round": None, "name": text(f.parent.name, 80), "mode": "file",
                               "text": text(f.read_text(encoding="utf-8", errors="replace"))})
        files = sorted((self.path / "trajectories").glob("*.jsonl")) if (self.path / "trajectories").is_dir() else []
        # the held-out reward from the first evaluation to the last, paired per problem (the run table's row)
        first, last = (evals[0]["round"], evals[-1]["round"]) if evals else (None, None)
        change = (heldout_change(self.path, first, last, jsonl) if isinstance(first, int) and isinstance(last, int)
                  and first != last else None)
        return {"rounds": rounds, "evals": evals, "skills": skills,
                "episode_files": [f.stem for f in files], "row": self.row(),
                "change": text(change_line(change), 300) if change else None}

    def episodes(self, name: str, offset: int, limit: int) -> dict[str, Any]:
        path = self.path / "trajectories" / f"{name}.jsonl"
        if not name.replace("_", "").isalnum() or not path.is_file():
            raise KeyError(name)
        records = jsonl(path)
        chunk = records[offset: offset + limit]
        return {"total": len(records), "offset": offset, "limit": limit, "episodes": [
            {"index": offset + i, "case_id": text(t.get("case_id"), 80), "label": text(t.get("label"), 80),
             "reward": finite(t.get("reward")), "turns": t.get("turns"), "finish": text(t.get("finish"), 20),
             "metrics": {text(k, 40): finite(v) for k, v in (t.get("metrics") or {}).items()},
             "messages": [{"role": text(m.get("role"), 20), "content": text(m.get("content"), 20_000)}
                          for m in t.get("messages", []) if isinstance(m, dict)]}
            for i, t in enumerate(chunk)]}


def at_k(path: Path) -> dict[str, dict[str, float | None]]:
    """Mean@k and Pass@k with their 95% intervals over the cases of one
    held-out evaluation (its trajectories: k attempts per case, 1 when greedy);
    none when the file is missing or its cases have unequal attempts."""
    by_case: dict[str, list[float]] = {}
    for t in jsonl(path):
        reward = finite(t.get("reward")) if isinstance(t, dict) else None
        if reward is not None:
            by_case.setdefault(str(t.get("case_id")), []).append(reward)
    attempts = list(by_case.values())
    if not attempts or len({len(a) for a in attempts}) != 1:
        return {}
    k = len(attempts[0])
    return {f"{name}@{k}": {key: finite(value) for key, value in interval(attempts).to_dict().items()
                            if key in ("mean", "low", "high")}
            for name, interval in (("Mean", mean_at_k), ("Pass", pass_at_k))}


# ------------------------------------------------------------------ comparisons
def comparison_plan(path: Path) -> list[tuple[RunSpec, Path]] | None:
    """The runs a comparison plans, each with its folder, as the comparison lists them itself and its
    report collects them (report.collecting.planned_folders: its compare.toml through plan.planned_runs, an
    agent comparison's training runs through plan.agent_runs, its base arm having no run); made once per
    change of compare.toml. None for a comparison written before compare.toml was (its runs.csv is all
    there is)."""
    def read(toml: Path) -> list[tuple[RunSpec, Path]]:
        raw = toml_file(toml)
        try:
            return planned_folders(path, raw)[1]  # as the report collects them
        except UsageError as exc:  # a config another version wrote, a file task gone: said, not a crash
            raise CorruptFileError(f"{toml}: its runs cannot be planned here ({exc})") from None
    return CACHE.get(path / COMPARE_CONFIG, read, kind="plan")


def planned_state(directory: Path) -> str:
    """A planned run's state as the comparison tells it (plan.run_state: "new", "partial" or "finished").
    That reads the whole event log, so a poll asks again only when the log changed, or when a file it
    looks at besides (config.toml, summary.json, written after the end event) appeared."""
    store = RunStore(directory)
    seen = (store.config_path.exists(), store.path("summary.json").exists())
    state = CACHE.get(store.events_path, lambda _: planned_run_state(directory), kind=f"planned_state {seen}")
    return state or planned_run_state(directory)  # no log yet: nothing to read twice


def run_states(rows: list[dict[str, str]]) -> dict[tuple, str]:
    """Each run's state from runs.csv, which has one row per run and test set: a comparison of 8 runs
    scored on 2 sets is 8 runs, not 16."""
    return {tuple(r.get(key) for key in ("dir", "task", "method", "budget", "seed")): r.get("state", "")
            for r in rows}


def comparison_progress(path: Path) -> tuple[int, int]:
    """(runs finished, runs planned): from the plan and the run folders as the comparison goes on, so
    before any report; from runs.csv (the report's) for a comparison without compare.toml."""
    plan = comparison_plan(path)
    if plan is None:
        states = list(run_states(csv_file(path / "runs.csv")).values())
    else:
        states = [planned_state(directory) for _, directory in plan]
    return sum(1 for state in states if state == "finished"), len(states)


def comparison_state(path: Path, finished: int, planned: int) -> tuple[str, str | None]:
    """A comparison's state and who writes it now: finished (every planned run finished); running while
    `coevolve compare` holds its writer lock; stopped once the process that held it is gone (interrupted or
    killed: running it again goes on); partial for one without a lock (written before it), which cannot
    tell running from stopped."""
    if planned and finished == planned:
        return "finished", None
    lock = writer(path)
    if lock.holder is not None:
        return "running", lock.holder
    return ("stopped" if lock.locked else "partial"), None


def report_note(path: Path, finished: int, planned: int) -> str | None:
    """What the page says of the report while it is missing or behind the runs: the table, verdicts and
    plots are the report's (`coevolve compare` renders it at its end; `coevolve report DIR` renders one
    from the runs finished, an interrupted comparison's too)."""
    if not (path / "table.csv").is_file():
        return (f"{finished} of {planned} runs finished. The table, verdicts and plots come when the report is "
                "rendered: `coevolve compare` renders it once every run has finished; "
                f"`coevolve report {text(path, 1000)}` renders it now from the runs finished.")
    reported = sum(1 for state in run_states(csv_file(path / "runs.csv")).values() if state == "finished")
    if comparison_plan(path) is not None and reported < finished:
        return (f"{finished} of {planned} runs finished. The report was rendered when {reported} had finished: "
                f"`coevolve report {text(path, 1000)}` renders it again.")
    return None


def percent(value: float) -> str:
    """A fraction as report.md's tables write a gap or a valid rate (22.17%): its mean ± std format, one value."""
    return fmt_mean_std({"mean": value, "std": None}, percent=True)


# a table.csv column that is a fraction by definition (its _mean and _std too), shown as report.md shows it
PERCENT = {"gap": percent, "train_valid_rate": percent, "delta": fmt_delta, "gap_closed": fmt_delta}


def shown(row: dict[str, Any]) -> dict[str, str]:
    """A table row's fractions as report.md writes them (23.33%, Δ +1.0%); the row keeps the numbers."""
    out = {}
    for column, value in row.items():
        show = PERCENT.get(re.sub(r"_(mean|std)$", "", column))
        if show is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[column] = show(value)
    return out


def comparison(path: Path, registry: Registry) -> dict[str, Any]:
    """A comparison's table with its verdicts, its plots and its arm runs; while it runs (no report yet)
    its planned runs from their folders, and a note on when the report comes."""
    results = json_file(path / "results.json") if (path / "results.json").exists() else None
    table = csv_file(path / "table.csv")
    columns = list(table[0].keys()) if table else []
    rows = [{text(k, 60): csv_value(v) for k, v in row.items()} for row in table]
    if results and isinstance(results.get("rows"), list):  # verdicts of the Δ rows, in table order
        deltas = [r for r in results["rows"] if r.get("kind") == "delta"]
        verdicts = iter(deltas)
        for row in rows:
            if row.get("kind") == "delta":
                d = next(verdicts, {})
                row["verdict"] = ("can be told apart" if d.get("distinct") else
                                  "cannot be told apart" if d.get("distinct") is False else "no verdict")
                row["why"] = text(d.get("why") or "", 300)
        if deltas:  # table.csv holds the Δ rows' `why` itself: each column once
            columns += [c for c in ("verdict", "why") if c not in columns]
    elif "distinct" in columns:
        for row in rows:
            if row.get("kind") == "delta":
                row["verdict"] = {"True": "can be told apart", "False": "cannot be told apart"}.get(
                    row.get("distinct", ""), "no verdict")
        columns.append("verdict")
    for row in rows:
        row["shown"] = shown(row)
    reported: dict[str, list[dict[str, str]]] = {}  # runs.csv: a row per run and test set, by folder
    for r in csv_file(path / "runs.csv"):
        reported.setdefault(r.get("dir", ""), []).append(r)
    plan = comparison_plan(path)
    if plan is None:  # a comparison without compare.toml: its report's runs
        listed = [(r, r.get("state")) for found in reported.values() for r in found]
    else:  # every planned run, in the plan's order, as it stands now; its test scores where the report has them
        listed = []
        for spec, directory in plan:
            where = directory.relative_to(path).as_posix()
            state = planned_state(directory)
            if state == "partial":  # not finished: running or stopped, as its own page says (lock, --stale-after)
                live = run_state(directory, jsonl(directory / "events.jsonl"), registry.stale_after)
                state = "partial" if live == "finished" else live  # ended, its summary about to be written
            for r in reported.pop(where, None) or [{"task": spec.task, "method": spec.method,
                                                    "budget": str(spec.budget), "seed": str(spec.seed), "dir": where}]:
                listed.append((r, state))
        # what the report lists besides (an agent comparison's base arm: a checkpoint scored, no run), as it says
        listed += [(r, r.get("state")) for found in reported.values() for r in found]
    runs = []
    for r, state in listed:
        directory = path / r.get("dir", "")
        ident = registry.id_of(directory) if r.get("dir") and directory.is_dir() else None
        gap_value = csv_value(r.get("gap"), 40)
        runs.append({"task": text(r.get("task"), 60), "method": text(r.get("method"), 60),
                     "seed": csv_value(r.get("seed"), 20), "budget": csv_value(r.get("budget"), 20),
                     "state": text(state, 20), "dir": text(r.get("dir"), 300),
                     "objective": csv_value(r.get("objective"), 40), "gap": gap_value, "id": ident,
                     "shown": shown({"gap": gap_value})})
    plots = sorted(p.name for p in (path / "plots").glob("*.png")) if (path / "plots").is_dir() else []
    conclusions = [text(c, 1000) for c in (results or {}).get("conclusions", [])]
    arms = [text(a, 1000) for a in (results or {}).get("named_arms", [])]  # what each sets (older: none)
    failures = [{"task": text(f.get("task"), 60), "method": text(f.get("method"), 60),
                 "budget": number(f.get("budget")), "failed": text(f"{f.get('failed')} of {f.get('candidates')}", 40),
                 "causes": [{"cause": text(c[0], 100), "count": number(c[1])} for c in f.get("causes", [])]}
                for f in (results or {}).get("failures", []) if f.get("failed")]  # older reports: none
    progress = comparison_progress(path)
    state, holder = comparison_state(path, *progress)
    return {"columns": columns, "rows": rows, "runs": runs, "plots": plots, "conclusions": conclusions, "arms": arms,
            "failures": failures, "note": report_note(path, *progress), "state": state, "writer": holder}


def summarise(entry: Entry, stale_after: float) -> dict[str, Any]:
    """The runs-list row of any entry; a damaged file makes a row that says so."""
    base = {"id": entry.id, "label": entry.label, "name": entry.path.name, "kind": entry.kind, "parent": entry.parent}
    try:
        if entry.kind == "run":
            return {**base, **HeuristicRun(entry.path, stale_after).row()}
        if entry.kind == "agent":
            return {**base, **AgentRun(entry.path, stale_after).row(), "kind": "agent"}
        plan = comparison_plan(entry.path)
        if plan is None:  # no compare.toml: its report's table names them
            table = csv_file(entry.path / "table.csv")
            tasks = {r.get("task", "") for r in table if r.get("task")}
            methods = {r.get("method", "") for r in table if r.get("kind") == "method"}
        else:
            tasks = {directory.parent.name for _, directory in plan}  # a file task by its name, not its path
            methods = {spec.method for spec, _ in plan}
        finished, planned = comparison_progress(entry.path)
        state, holder = comparison_state(entry.path, finished, planned)
        return {**base, "task": ", ".join(sorted(tasks)), "method": ", ".join(sorted(methods)),
                "seed": None, "used": finished, "budget": planned, "state": state, "writer": holder,
                "best": None, "gap": None, "valid_rate": None, "caps": {}}
    except (CorruptFileError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return {**base, "state": "unreadable", "error": text(exc, 500)}
