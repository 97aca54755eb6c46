"""Mirror a run to MLflow or TensorBoard (`[log] mlflow = true` /
`tensorboard = true`, or `coevolve mirror RUN_DIR --to ...` afterwards).

The mirror reads the run directory's own records, the way the dashboard
does, and writes what is new since its last look: the loop knows nothing of
trackers, `coevolve run` calls `update` at each step (or round) boundary and
`close` at the end, and a finished or killed run is mirrored by the same code.

What is mirrored (tags; the step is the candidate id for heuristic scalars,
the ES generation for `es/*`, the episodes used for agent scalars):

- heuristic runs: `best_so_far`, `valid_rate` (cumulative), and the best
  program's code whenever it improves (`best_program.py`);
- ES (both kinds of run): `es/reward_mean|min|max`, `es/member_NN/reward`,
  `es/sigma`, `es/alpha`, `es/all_equal` (1 when every member earned the
  same reward: the update moved nothing);
- agent runs: `agent/mean_reward`, `agent/solved_rate` per round, every
  held-out metric as `eval/<name>` (Mean@k / Pass@k with `_low`/`_high`),
  each distilled skill's text;
- at the end: `best.py`, `summary.json`, `config.toml` as artefacts (MLflow)
  or text (TensorBoard).

Each JSON-lines file is followed from a byte offset (`durable.read_jsonl_from`,
the run store's torn-line rule); how many records each tracker already has is
kept in RUN_DIR/mirror.json, so a resumed run (whose candidates.jsonl is
rewritten by its replay) or a second `coevolve mirror` adds no point twice.
A tracker that fails mid-run is switched off with one warning: the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from coevolve.base.durable import atomic_write_json, read_jsonl, read_jsonl_from
from coevolve.base.config import config_error
from coevolve.base.errors import UsageError
from coevolve.base.logsection import LogSection

TRACKERS = {"mlflow": ("mlflow", "MLflow"), "tensorboard": ("tensorboard", "TensorBoard")}  # name -> (module, label)
STATE = "mirror.json"
FOLLOWED = ("candidates.jsonl", "history.jsonl", "events.jsonl")
BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics a call


def require(trackers: list[str], asked: str = "[log] {name} = true") -> None:
    """A one-line UsageError when a tracker's package is not installed (checked
    before a run directory or an engine exists). `asked` names what asked for the
    tracker `{name}`, as the user wrote it: a run's [log] key, `coevolve mirror`'s --to."""
    for name in trackers:
        module, label = TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"{asked.format(name=name)} needs {label}, which is not installed: "
                             f"pip install 'coevolve[{name}]'")


def check_log(log: LogSection) -> None:
    """A run's [log], checked before its run directory or engine exists: each tracker switched on is
    installed (`require`) and can open where [log] sends it. Mid-run, a tracker that cannot open is only
    warned about (Mirror): the run would go on unmirrored after the engine's minutes of loading."""
    require(log.trackers)
    if log.mlflow and log.mlflow_uri:  # "" is the run's own SQLite store, in a folder the run creates
        problem = mlflow_uri_problem(log.mlflow_uri)
        if problem:
            raise config_error("log.mlflow_uri", problem, log.mlflow_uri)
    if log.tensorboard and log.tensorboard_dir:
        problem = unwritable(Path(log.tensorboard_dir))
        if problem:
            raise config_error("log.tensorboard_dir", f"cannot hold the event files: {problem}",
                               log.tensorboard_dir)


def mlflow_uri_problem(uri: str) -> str | None:
    """Why MLflow could not open a tracking store at `uri`, without building the store (a SQLite store
    creates its file) or asking a server (one that is down now may be up when the run starts); None
    when it can, as far as that tells."""
    from mlflow.exceptions import MlflowException  # optional: the [mlflow] extra
    from mlflow.tracking._tracking_service import utils  # the scheme registry MlflowClient builds its store by

    registry = getattr(utils, "_tracking_store_registry", None)  # private: an MLflow without it is not checked
    builders = getattr(registry, "_registry", None)  # scheme -> store builder
    if not isinstance(builders, dict):
        return None
    try:
        builder = registry.get_store_builder(uri)
    except MlflowException:
        known = ", ".join(sorted(scheme for scheme in builders if scheme))
        return f"has a scheme MLflow has no tracking store for (it has: {known})"
    if builder is builders.get("file") and not file_store_allowed():  # a plain path is a file store too
        return ("is a path, which MLflow opens as a file store and refuses unless MLFLOW_ALLOW_FILE_STORE=true: "
                "give sqlite:///PATH/mlflow.db, a server's http(s):// URI, or \"\" for the run's own store")
    parts = urlsplit(uri)
    if parts.scheme == "sqlite" and parts.path not in ("", "/", "/:memory:"):
        problem = unwritable(Path(parts.path[1:]).parent)  # sqlite:///rel.db is rel.db, sqlite:////abs.db /abs.db
        return f"cannot hold its database: {problem}" if problem else None
    return None


def file_store_allowed() -> bool:
    """Whether MLflow opens a folder as a file store: MLflow 3 refuses one unless the user opts in."""
    import mlflow.environment_variables as variables  # optional: the [mlflow] extra

    allowed = getattr(variables, "MLFLOW_ALLOW_FILE_STORE", None)  # an MLflow without it takes a folder
    return allowed is None or bool(allowed.get())


def unwritable(folder: Path) -> str | None:
    """Why `folder` (made by the tracker when it is missing) could not be made or written to; None when it
    can. Tried on its nearest existing folder by making an empty folder there and removing it at once:
    nothing is left behind, and os.access says yes to root everywhere, /proc included, which refuses."""
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".coevolve-check-", dir=existing))
    except OSError as exc:
        return f"{existing} takes no new folder ({type(exc).__name__}: {exc.strerror or exc})"
    return None


@dataclass
class Point:
    tag: str
    value: float
    step: int
    time: float


@dataclass
class Text:
    name: str  # an artefact path for MLflow, a tag for TensorBoard
    body: str
    step: int
    time: float


def finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def tag_name(name: str) -> str:
    """A metric name both trackers take (MLflow allows letters, digits, _ - . / and space)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name.replace("@", "_at_"))


# ------------------------------------------------------------------ reading the run directory
@dataclass
class Tail:
    """One JSON-lines file followed from a byte offset; `index` counts the records read."""

    path: Path
    offset: int = 0
    index: int = 0

    def new(self) -> list[tuple[int, dict]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # rewritten from the start (a resumed run replays candidates.jsonl)
            self.offset, self.index = 0, 0
        records, self.offset = read_jsonl_from(self.path, self.offset)
        out = [(self.index + i, r) for i, r in enumerate(records) if isinstance(r, dict)]
        self.index += len(records)
        return out


@dataclass
class Follower:
    """What is new in a run directory for one tracker, as points and texts.
    Every record is read (best-so-far needs them all); only those at an index
    of at least `done[file]` are emitted."""

    run_dir: Path
    direction: str  # min | max: which objective is better
    done: dict[str, int] = field(default_factory=dict)
    best: float | None = None
    valid: int = 0
    count: int = 0

    def __post_init__(self) -> None:
        self.tails = {name: Tail(self.run_dir / name) for name in FOLLOWED}

    def better(self, a: float, b: float | None) -> bool:
        return b is None or (a < b if self.direction == "min" else a > b)

    def read(self) -> tuple[list[Point], list[Text]]:
        points: list[Point] = []
        texts: list[Text] = []
        now = time.time()
        for name, tail in self.tails.items():
            for index, record in tail.new():
                fresh = index >= self.done.get(name, 0)
                if name == "candidates.jsonl":
                    self._candidate(record, index, fresh, now, points, texts)
                elif fresh and name == "history.jsonl":
                    points += es_points(record, now)
                elif fresh:
                    self._event(record, now, points, texts)
                if fresh:
                    self.done[name] = index + 1
        return points, texts

    def _candidate(self, record: dict, index: int, fresh: bool, now: float, points: list[Point],
                   texts: list[Text]) -> None:
        self.count += 1
        step = record.get("id") if isinstance(record.get("id"), int) else index + 1
        objective = finite(record.get("objective"))
        improved = False
        if objective is not None:
            self.valid += 1
            if self.better(objective, self.best):
                self.best, improved = objective, True
        if not fresh:
            return
        if self.best is not None:
            points.append(Point("best_so_far", self.best, step, now))
        # over the evaluations charged, as the dashboard plots it: a candidate's id is its evaluation number,
        # and skill analysts' requests (charged, no candidate) fall between ids
        points.append(Point("valid_rate", self.valid / max(step, self.count), step, now))
        if improved and record.get("code"):
            header = f"# candidate {record.get('id')}, objective {objective!r}\n"
            texts.append(Text("best_program.py", header + str(record["code"]), step, now))

    def _event(self, event: dict, now: float, points: list[Point], texts: list[Text]) -> None:
        kind = event.get("type")
        step = event.get("episodes_used") if isinstance(event.get("episodes_used"), int) else 0
        if kind == "round":
            for key in ("mean_reward", "solved_rate"):
                if finite(event.get(key)) is not None:
                    points.append(Point(f"agent/{key}", finite(event[key]), step, now))
        elif kind == "eval":
            for key, value in event.items():
                if key in ("type", "round", "episodes_used", "seconds", "skills"):
                    continue
                if isinstance(value, dict):  # Mean@k / Pass@k with a Student-t interval
                    for part, suffix in (("mean", ""), ("low", "_low"), ("high", "_high")):
                        if finite(value.get(part)) is not None:
                            points.append(Point(tag_name(f"eval/{key}{suffix}"), finite(value[part]), step, now))
                elif finite(value) is not None:
                    points.append(Point(tag_name(f"eval/{key}"), finite(value), step, now))
        elif kind == "skill" and event.get("text"):
            round_index = event.get("round") if isinstance(event.get("round"), int) else 0
            texts.append(Text(f"skills/{tag_name(str(event.get('name') or 'skill'))}/SKILL.md", str(event["text"]),
                              round_index, now))


def es_points(record: dict, now: float) -> list[Point]:
    """One ES generation of history.jsonl as scalars."""
    generation = record.get("generation") if isinstance(record.get("generation"), int) else 0
    when = finite(record.get("time")) or now
    rewards = [finite(r) for r in record.get("rewards", [])]
    present = [r for r in rewards if r is not None]
    points = [Point(f"es/member_{i:02d}/reward", r, generation, when) for i, r in enumerate(rewards) if r is not None]
    if present:
        points += [Point("es/reward_mean", sum(present) / len(present), generation, when),
                   Point("es/reward_min", min(present), generation, when),
                   Point("es/reward_max", max(present), generation, when),
                   Point("es/all_equal", float(max(present) == min(present)), generation, when)]
    for key in ("sigma", "alpha"):
        if finite(record.get(key)) is not None:
            points.append(Point(f"es/{key}", abs(finite(record[key])), generation, when))
    return points


def run_finished(run_dir: Path) -> int:
    """How many times the run's event log has ended (an `end` or a cap's clean `stop`) when it ends now;
    0 while it runs: a run given more budget (an `extend` after its end) runs until its next end."""
    kinds = [e.get("type") for e in read_jsonl(run_dir / "events.jsonl") if e.get("type") in ("end", "stop", "extend")]
    return 0 if not kinds or kinds[-1] == "extend" else sum(kind != "extend" for kind in kinds)


def run_params(run_dir: Path) -> dict[str, str]:
    """The run's config, flattened (`run.task`, `es.sigma`, ...), for MLflow's params."""
    try:
        config = tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    params = {}
    for section, table in config.items():
        for key, value in (table.items() if isinstance(table, dict) else [("", table)]):
            params[f"{section}.{key}" if key else section] = json.dumps(value)[:6000] if not isinstance(value, str) \
                else value[:6000]
    return params


# ------------------------------------------------------------------ the trackers
class MLflowSink:
    """An MLflow run: a SQLite store under RUN_DIR/mlflow by default (no server;
    MLflow keeps its file store in maintenance mode and refuses it by default)."""

    name = "mlflow"

    def __init__(self, run_dir: Path, log: LogSection, state: dict) -> None:
        from mlflow.tracking import MlflowClient  # optional: the [mlflow] extra

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # its store migrations log at INFO (set on import)

        local = not log.mlflow_uri
        if local:
            (run_dir / "mlflow").mkdir(exist_ok=True)
        self.target = log.mlflow_uri or f"sqlite:///{(run_dir / 'mlflow' / 'mlflow.db').resolve()}"
        with warnings.catch_warnings():  # SQLAlchemy's deprecation notes about MLflow's own mappings
            warnings.simplefilter("ignore")
            self.client = MlflowClient(tracking_uri=self.target)
            self.run_id = state.get("run_id") if state.get("target") == self.target else None
            if self.run_id is None:
                experiment = self.client.get_experiment_by_name(log.experiment)
                experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(
                    log.experiment, artifact_location=(run_dir / "mlflow" / "artifacts").resolve().as_uri()
                    if local else None)
                run = self.client.create_run(experiment_id, run_name=run_dir.name,
                                             tags={"coevolve.run_dir": str(run_dir.resolve())})
                self.run_id = run.info.run_id
                from mlflow.entities import Param  # optional: the [mlflow] extra

                params = [Param(k, v) for k, v in run_params(run_dir).items()]
                for i in range(0, len(params), 100):
                    self.client.log_batch(self.run_id, params=params[i: i + 100])
            else:
                self.client.update_run(self.run_id, status="RUNNING")

    def state(self) -> dict:
        return {"target": self.target, "run_id": self.run_id}

    def where(self) -> str:
        return f"{self.target} (run {self.run_id})"

    def write(self, points: list[Point], texts: list[Text]) -> None:
        from mlflow.entities import Metric  # optional: the [mlflow] extra

        metrics = [Metric(p.tag, p.value, int(p.time * 1000), p.step) for p in points]
        for i in range(0, len(metrics), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i: i + BATCH])
        for t in texts:  # the newest version of an artefact replaces the older
            self.client.log_text(self.run_id, t.body, t.name)

    def files(self, paths: list[Path]) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path))

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status)


class TensorBoardSink:
    """Event files under RUN_DIR/tensorboard (or `tensorboard_dir`/RUN_NAME),
    written with TensorBoard's own EventFileWriter: no TensorFlow, no torch."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, log: LogSection, state: dict) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter  # optional: the [tensorboard] extra

        folder = Path(log.tensorboard_dir) / run_dir.name if log.tensorboard_dir else run_dir / "tensorboard"
        self.target = str(folder.resolve())
        self.writer = EventFileWriter(self.target)

    def state(self) -> dict:
        return {"target": self.target}

    def where(self) -> str:
        return self.target

    def write(self, points: list[Point], texts: list[Text]) -> None:
        # optional: the [tensorboard] extra
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

        for p in points:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=p.tag, simple_value=p.value)])
            self.writer.add_event(event_pb2.Event(wall_time=p.time, step=p.step, summary=summary))
        for t in texts:  # the text plugin's format: a string tensor tagged with plugin "text"
            tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[t.body.encode("utf-8")],
                                            tensor_shape=tensor_shape_pb2.TensorShapeProto())
            metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=t.name, tensor=tensor, metadata=metadata)])
            self.writer.add_event(event_pb2.Event(wall_time=t.time, step=t.step, summary=summary))
        self.writer.flush()

    def files(self, paths: list[Path]) -> None:
        now = time.time()
        self.write([], [Text(p.name, p.read_text(encoding="utf-8", errors="replace"), 0, now) for p in paths])

    def close(self, status: str) -> None:
        self.writer.close()


SINKS = {"mlflow": MLflowSink, "tensorboard": TensorBoardSink}


# ------------------------------------------------------------------ the mirror
class Mirror:
    """The trackers of one run directory, each fed what it has not had yet."""

    def __init__(self, run_dir: str | Path, log: LogSection, direction: str,
                 warn: Callable[[str], None] | None = None, live: bool = True) -> None:
        """`live`: beside a run, which a tracker's failure never stops; `coevolve mirror` passes
        False, where a damaged run file is the command's one error line and nothing "goes on"."""
        self.run_dir, self.live = Path(run_dir), live
        self.warn = warn or (lambda line: print(line, file=sys.stderr, flush=True))
        require(log.trackers)
        self.sinks: list[Any] = []
        self.followers: dict[str, Follower] = {}
        try:
            self.state: dict[str, dict] = self._load_state()
        except (OSError, ValueError) as exc:  # a damaged mirror.json: mirroring afresh would add points twice
            self.state = {}
            self.warn(f"warning: not mirroring {self.run_dir}: {self.run_dir / STATE} is unreadable ({exc}); "
                      "remove it to mirror the run afresh")
            return
        for name in log.trackers:
            previous = self.state.get(name, {})
            try:
                sink = SINKS[name](self.run_dir, log, previous)
            except Exception as exc:  # noqa: BLE001 - a tracker that cannot open never stops the run
                self.warn(f"warning: not mirroring to {name} ({type(exc).__name__}: {str(exc)[:300]})"
                          + self._later(name))
                continue
            same = previous.get("target") == sink.target
            self.followers[name] = Follower(self.run_dir, direction, dict(previous.get("done", {})) if same else {})
            self.state[name] = {**sink.state(), "done": self.followers[name].done,
                                "files": previous.get("files", 0) if same else 0}  # ends uploaded
            self.sinks.append(sink)

    def _load_state(self) -> dict:
        try:
            state = json.loads((self.run_dir / STATE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
        return state

    def update(self, *_: Any) -> int:
        """Write what is new; the number of points written. Any argument is
        ignored (so it can stand as a progress callback)."""
        written = 0
        for sink in list(self.sinks):
            follower = self.followers[sink.name]
            try:
                points, texts = follower.read()
                if points or texts:
                    sink.write(points, texts)
                written += len(points)
            except Exception as exc:  # noqa: BLE001 - a tracker never stops the run
                self._drop(sink, exc)
                continue
            self.state[sink.name] = {**self.state[sink.name], **sink.state(), "done": follower.done}
        if self.sinks:
            atomic_write_json(self.run_dir / STATE, self.state)
        return written

    def _drop(self, sink: Any, exc: Exception) -> None:
        if not self.live and isinstance(exc, UsageError):  # a damaged run file (CorruptFileError) names itself
            raise exc
        self.sinks.remove(sink)
        self.warn(f"warning: mirroring to {sink.name} stopped ({type(exc).__name__}: {str(exc)[:300]})"
                  + self._later(sink.name))

    def _later(self, name: str) -> str:
        return (f"; the run goes on; `coevolve mirror {self.run_dir} --to {name}` catches up later" if self.live
                else "")

    def close(self, failed: bool = False) -> None:
        """A last update; a finished run's files as artefacts; the tracker's run closed."""
        self.update()
        finished = run_finished(self.run_dir)
        status = "FAILED" if failed else "FINISHED" if finished else "KILLED"
        for sink in list(self.sinks):
            try:
                # once per end: a run given more budget uploads its files again when it ends again
                # (a state written before this counted True, which equals one end)
                if finished and self.state[sink.name].get("files") != finished:
                    sink.files([self.run_dir / f for f in ("best.py", "summary.json", "config.toml")
                                if (self.run_dir / f).is_file()])
                    self.state[sink.name]["files"] = finished
                sink.close(status)
            except Exception as exc:  # noqa: BLE001
                self._drop(sink, exc)
        if self.state:
            atomic_write_json(self.run_dir / STATE, self.state)

    def where(self) -> list[str]:
        return [f"{sink.name}: {sink.where()}" for sink in self.sinks]


class NoMirror:
    """[log] without trackers: nothing happens."""

    def after(self, callback: Callable | None) -> Callable | None:
        return callback


class Mirroring:
    """`with Mirroring(config.log, store.dir, task.direction) as mirror:` then
    `on_progress=mirror.after(bar_callback)`: the run's progress callback,
    followed by a mirror update at every step boundary; closed at the end."""

    def __init__(self, log: LogSection, run_dir: str | Path, direction: str | None = None) -> None:
        self.mirror = Mirror(run_dir, log, direction) if log.trackers else None

    def __enter__(self) -> "Mirroring | NoMirror":
        return self if self.mirror is not None else NoMirror()

    def after(self, callback: Callable | None) -> Callable:
        mirror = self.mirror

        def step(progress: Any) -> None:
            if callback is not None:
                callback(progress)
            mirror.update()
        return step

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if self.mirror is not None:
            self.mirror.close(failed=kind is not None and not issubclass(kind, KeyboardInterrupt))
