"""Budget-matched comparisons: methods × tasks × budgets × seeds, each run
under the same ledger, then each run's best heuristic scored on test sets.

Fairness rules, enforced here rather than left to the user:
- every run of a comparison shares every setting except method, task, budget
  and seed (one config builds them all);
- the artefact scored on the test sets is the run's `best.py`, which the loop
  chose by its training objective alone; test scores never feed back;
- test scores come from `Sandbox.evaluate_many` on the file's text, the same
  path `coevolve eval FILE` takes, so the two agree on the same file.

Layout of a comparison directory:
    compare.toml                 the resolved comparison config
    runs/<task>/<method>-b<budget>-s<seed>/    one `coevolve run` directory each,
        ... + test.json          its test scores (keyed by best.py's hash)
    report.md, table.csv, runs.csv, results.json, plots/*.png   (coevolve.report)

Resumable: a finished run (its events end with `end`) is skipped, a killed one
is resumed from its events, and test scores are reused while best.py and the
test settings are unchanged.
"""

from __future__ import annotations

import dataclasses

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from coevolve.base.errors import UsageError
from coevolve.base.config import as_dict, build_config, dump_toml, one_of, read_toml, require
from coevolve.runstore import RunStore, atomic_write_json, atomic_write_text, read_jsonl
from coevolve.search.runconfig import METHODS, RunConfig, RunSection, SearchSections

COMPARE_CONFIG = "compare.toml"
TEST_SCORES = "test.json"

# The test sets the paper's Table 5 reports; other tasks default to every size of the split.
PAPER_TEST_SIZES = {"tsp_construct": [50, 100], "kp_construct": [100], "asp": [15]}


@dataclass
class CompareSection:
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    tasks: list[str] = field(default_factory=lambda: ["tsp_construct"])
    budgets: list[int] = field(default_factory=lambda: [1000, 2000])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    out: str = ""  # empty: runs/compare-<time>

    def check(self, name: str) -> None:
        for key in ("methods", "tasks", "budgets", "seeds"):
            values = getattr(self, key)
            require(len(values) >= 1, f"{name}.{key}", "must list at least one value", values)
            require(len(set(values)) == len(values), f"{name}.{key}", "must not repeat a value", values)
        for method in self.methods:
            one_of(method, METHODS, f"{name}.methods")
        for budget in self.budgets:
            require(budget >= 1, f"{name}.budgets", "must all be >= 1", self.budgets)
        for seed in self.seeds:
            require(seed >= 0, f"{name}.seeds", "must all be >= 0", self.seeds)


@dataclass
class HoldoutSection:
    """[test]: the held-out sets each run's best heuristic is scored on."""

    split: str = "test"
    sizes: list[int] = field(default_factory=list)  # empty: PAPER_TEST_SIZES, else every size of the split
    limit: int = 0  # score the first `limit` instances of each set; 0: all of them (the paper's sets)
    timeout_s: float = 1800.0  # per scored file and set: full test sets are 1000 instances
    workers: int = 0  # 0: the sandbox's default (one per core)
    memory_mb: int = 4096  # as `coevolve eval`

    def check(self, name: str) -> None:
        require(bool(self.split), f"{name}.split", "must not be empty")
        require(self.limit >= 0, f"{name}.limit", "must be >= 0 (0: every instance)", self.limit)
        require(self.timeout_s > 0, f"{name}.timeout_s", "must be > 0", self.timeout_s)
        require(self.workers >= 0, f"{name}.workers", "must be >= 0", self.workers)
        require(self.memory_mb >= 64, f"{name}.memory_mb", "must be >= 64", self.memory_mb)


@dataclass
class CompareConfig(SearchSections):
    """[compare] and [test], plus the run sections every run shares."""

    compare: CompareSection = field(default_factory=CompareSection)
    test: HoldoutSection = field(default_factory=HoldoutSection)

    def check(self) -> None:
        for index, name in enumerate(self.compare.tasks):
            task = _task_or_error(name, f"compare.tasks[{index}]")
            scored_sets(self, task)  # every task must have the test sets asked for


def _task_or_error(name: str, field_name: str) -> Any:
    from coevolve.base.config import config_error
    from tasks.registry import UnknownTask, heuristic_task

    try:
        return heuristic_task(name)
    except UnknownTask as exc:
        raise config_error(field_name, str(exc)) from None


def scored_sets(config: CompareConfig, task: Any) -> list[tuple[str, int]]:
    """The (split, size) sets a task's best heuristics are scored on."""
    from coevolve.base.config import config_error

    split = config.test.split
    available = task.splits()
    if split not in available:
        raise config_error("test.split", f"is not a split of task {task.name} (splits: {', '.join(available)})",
                           split)
    sizes = available[split]
    if config.test.sizes:
        chosen = [s for s in config.test.sizes if s in sizes]
        if not chosen:
            raise config_error("test.sizes", f"has none of task {task.name}'s {split} sizes {sizes}",
                               config.test.sizes)
    else:
        chosen = [s for s in PAPER_TEST_SIZES.get(task.name, sizes) if s in sizes] or sizes
    return [(split, size) for size in chosen]


def load_compare_config(path: str | Path, out: str | None = None) -> CompareConfig:
    raw = read_toml(path)
    if out is not None:
        compare = raw.setdefault("compare", {})
        if not isinstance(compare, dict):
            raise UsageError("config error: compare must be a table")
        compare["out"] = out
    return build_config(CompareConfig, raw)


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class RunSpec:
    task: str
    method: str
    budget: int
    seed: int

    def directory(self, root: Path) -> Path:
        return root / "runs" / self.task / f"{self.method.replace('+', '_')}-b{self.budget}-s{self.seed}"


def planned_runs(config: CompareConfig) -> list[RunSpec]:
    """Seeds outermost: a comparison stopped early already holds every method on the first seeds."""
    c = config.compare
    return [RunSpec(task, method, budget, seed)
            for seed in c.seeds for task in c.tasks for budget in c.budgets for method in c.methods]


def run_config(config: CompareConfig, spec: RunSpec, directory: Path) -> RunConfig:
    run = RunSection(method=spec.method, task=spec.task, budget=spec.budget, seed=spec.seed, out=str(directory))
    run.check("run")
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(SearchSections)}
    return RunConfig(run=run, **shared)


def _settings(config: RunConfig) -> dict:
    """A run's config without its directory, which may move with the comparison."""
    data = as_dict(config)
    data["run"] = {k: v for k, v in data["run"].items() if k != "out"}
    return data


def _first_difference(a: dict, b: dict, prefix: str = "") -> str:
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            found = _first_difference(left, right, f"{prefix}{key}.")
            if found:
                return found
        elif left != right:
            return f"{prefix}{key} ({left!r} there, {right!r} here)"
    return ""


def run_state(directory: Path) -> str:
    """"new", "partial" (started, not ended) or "finished"."""
    store = RunStore(directory)
    if not store.config_path.exists():
        return "new"
    ended = any(e.get("type") == "end" for e in read_jsonl(store.events_path))
    return "finished" if ended and store.path("summary.json").exists() else "partial"


def open_or_create(config: RunConfig, directory: Path) -> tuple[RunStore, RunConfig]:
    """The run's store and the config it runs under. An existing run keeps its own
    config.toml (the loop replays against it); it must match the comparison's."""
    if not RunStore(directory).config_path.exists():
        return RunStore.create(directory, dump_toml(as_dict(config))), config
    store = RunStore.open(directory)
    existing = build_config(RunConfig, read_toml(store.config_path))
    if _settings(existing) != _settings(config):
        raise UsageError(f"{directory} holds a run under other settings: "
                         f"{_first_difference(_settings(existing), _settings(config))}; "
                         "use another --out, or delete that run to redo it")
    return store, existing


# ---------------------------------------------------------------- running
class _Resources:
    """The engine, endpoint and training sandbox, started on first need
    (a comparison whose runs are all finished never loads the model)."""

    def __init__(self, config: CompareConfig, engine: Any = None) -> None:
        self.config = config
        self._engine = engine
        self._own_engine = engine is None
        self._sandbox: Any = None
        self._endpoint: Any = None

    def engine(self) -> Any:
        if self._engine is None:
            from coevolve.engine.pool import build_engine

            self._engine = build_engine(self.config.model.path or None, self.config.distributed)
        return self._engine

    def sandbox(self) -> Any:
        if self._sandbox is None:
            from coevolve.sandbox import Sandbox

            s = self.config.sandbox
            self._sandbox = Sandbox(workers=s.workers or None, timeout_s=s.timeout_s, memory_mb=s.memory_mb)
        return self._sandbox

    def endpoint(self) -> Any:
        if self._endpoint is None:
            from coevolve.engine.openai_client import open_endpoint

            self._endpoint = open_endpoint(self.config.endpoint)
        return self._endpoint

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
        if self._own_engine and self._engine is not None:
            self._engine.close()


def execute_run(config: RunConfig, store: RunStore, resources: _Resources) -> dict:
    """One run through the search loop; the shared engine leaves it with the
    checkpoint's weights, whatever ES did to them."""
    from coevolve.search.loop import SearchLoop
    from tasks.registry import heuristic_task

    from coevolve.search.progress import progress_bar

    engine = resources.engine()
    bar = progress_bar(config, label=f"{config.run.method} {config.run.task} seed {config.run.seed}")
    loop = SearchLoop(config, store, engine, resources.sandbox(), heuristic_task(config.run.task),
                      endpoint=resources.endpoint(), on_progress=bar.update_from)
    try:
        return loop.run()
    finally:
        bar.close()
        if config.uses_es:
            engine.reset()


Progress = Callable[[str], None]


def run_comparison(config: CompareConfig, root: str | Path, *, engine: Any = None,
                   log: Progress = print) -> Path:
    """Run every planned run (skipping finished ones), score each best heuristic
    on the test sets, and render the report. Returns the comparison directory.
    `engine`: an already started engine to use (it is reset after ES runs and
    not closed); None starts the configured model when a run needs it."""
    from coevolve.report import render_comparison

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / COMPARE_CONFIG, dump_toml(as_dict(config)))
    runs = planned_runs(config)
    resources = _Resources(config, engine)
    try:
        for number, spec in enumerate(runs, start=1):
            directory = spec.directory(root)
            state = run_state(directory)
            what = f"[{number}/{len(runs)}] {spec.task} {spec.method} budget {spec.budget} seed {spec.seed}"
            store, run_cfg = open_or_create(run_config(config, spec, directory), directory)
            if state == "finished":
                log(f"{what}: finished earlier, skipped")
                continue
            log(f"{what}: {'resuming' if state == 'partial' else 'running'}")
            began = time.perf_counter()
            summary = execute_run(run_cfg, store, resources)
            best = (summary.get("best") or {}).get("objective")
            log(f"{what}: done in {time.perf_counter() - began:.0f} s, best train objective "
                f"{'-' if best is None else f'{best:.6g}'}, valid {summary['valid']}/{summary['evaluations']}")
    finally:
        resources.close()
    score_comparison(config, root, log=log)
    render_comparison(root)
    return root


# ------------------------------------------------------------- test scores
class LimitedTask:
    """A task whose instance sets are cut to their first `limit` instances.

    For quick comparisons on big test sets. It wraps the task's seeded sets
    (tasks.base.SeededSets), so instances, evaluation and the reference all see
    the same cut sets; its name differs from the task's, so cached reference
    values and the sandbox workers' instance caches never mix the two. It
    travels to sandbox workers as (task name, limit)."""

    def __init__(self, base_name: str, limit: int) -> None:
        from tasks.base import SeededSets
        from tasks.registry import heuristic_task

        self.base_name, self.limit = base_name, limit
        self._task = heuristic_task(base_name)
        sets = getattr(self._task, "_sets", None)
        if not isinstance(sets, SeededSets):
            raise ValueError(f"task {base_name} has no seeded instance sets to cut; use test.limit = 0")
        self._task._sets = _FirstOf(sets, limit)
        self.name = f"{base_name}-first{limit}"
        self._task.name = self.name

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "_task":  # not built yet (mid-unpickling): no recursion
            raise AttributeError(attribute)
        return getattr(self._task, attribute)

    def __reduce__(self) -> tuple:
        return (LimitedTask, (self.base_name, self.limit))


class _FirstOf:
    def __init__(self, sets: Any, limit: int) -> None:
        self.sets, self.limit = sets, limit

    def splits(self) -> dict[str, list[int]]:
        return self.sets.splits()

    def get(self, split: str, size: int) -> Any:
        return self.sets.get(split, size)[: self.limit]


def limits_apply(task_name: str) -> bool:
    """Whether test.limit can cut this task's sets (ASP's 'set' is one setting)."""
    from tasks.base import SeededSets
    from tasks.registry import heuristic_task

    return isinstance(getattr(heuristic_task(task_name), "_sets", None), SeededSets)


def file_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def score_files(jobs: list[tuple[str, str, str, int]], limit: int, sandbox: Any) -> list[dict]:
    """Test scores of (code, task name, split, size) jobs, in order: the objective
    (or the typed failure) from the sandbox, the set's reference and the gap."""
    from tasks.base import gap
    from tasks.registry import heuristic_task

    tasks: dict[str, Any] = {}

    def task_for(name: str) -> Any:
        if name not in tasks:
            tasks[name] = LimitedTask(name, limit) if limit and limits_apply(name) else heuristic_task(name)
        return tasks[name]

    results = sandbox.evaluate_many([(code, task_for(name), split, size) for code, name, split, size in jobs])
    references: dict[tuple[str, str, int], Any] = {}
    scores = []
    for (code, name, split, size), result in zip(jobs, results):
        task = task_for(name)
        if (name, split, size) not in references:
            references[(name, split, size)] = task.reference(split, size)
        reference = references[(name, split, size)]
        objective = result.objective if result.ok else None
        scores.append({
            "split": split, "size": size, "limit": limit if isinstance(task, LimitedTask) else 0,
            "objective": objective,
            "failure": None if result.ok else (result.failure.value if result.failure else "invalid"),
            "message": "" if result.ok else str(result.message)[-500:],
            "instances": result.instances, "seconds": round(result.seconds, 3),
            "reference": None if reference is None else reference.value,
            "reference_kind": None if reference is None else reference.kind,
            "gap": None if objective is None or reference is None or reference.value == 0
            else gap(objective, reference.value, task.direction),
        })
    return scores


def score_comparison(config: CompareConfig, root: str | Path, *, log: Progress = print) -> None:
    """Write test.json in every finished run whose scores are missing or stale."""
    root = Path(root)
    settings = {"split": config.test.split, "sizes": config.test.sizes, "limit": config.test.limit}
    pending: list[tuple[Path, str, list[tuple[str, int]], str]] = []
    for spec in planned_runs(config):
        directory = spec.directory(root)
        if run_state(directory) != "finished":
            continue
        sets = scored_sets(config, _task_or_error(spec.task, "compare.tasks"))
        best = directory / "best.py"
        code = best.read_text(encoding="utf-8") if best.exists() else None
        wanted = {"file": "best.py" if code is not None else None,
                  "sha256": None if code is None else file_digest(code), "settings": settings,
                  "sets": [list(s) for s in sets]}
        previous = _read_json(directory / TEST_SCORES)
        if previous and all(previous.get(k) == v for k, v in wanted.items()):
            continue
        if code is None:  # no valid heuristic in training: nothing to score
            atomic_write_json(directory / TEST_SCORES, {**wanted, "scores": []})
            continue
        pending.append((directory, spec.task, sets, code))
    if not pending:
        return
    jobs = [(code, task, split, size) for _, task, sets, code in pending for split, size in sets]
    log(f"scoring {len(pending)} best heuristics on {len(jobs)} test sets"
        + (f" (first {config.test.limit} instances each)" if config.test.limit else ""))
    from coevolve.sandbox import Sandbox

    t = config.test
    with Sandbox(workers=t.workers or None, timeout_s=t.timeout_s, memory_mb=t.memory_mb) as sandbox:
        scores = score_files(jobs, t.limit, sandbox)
    position = 0
    for directory, _, sets, code in pending:
        mine, position = scores[position:position + len(sets)], position + len(sets)
        atomic_write_json(directory / TEST_SCORES, {
            "file": "best.py", "sha256": file_digest(code), "settings": settings,
            "sets": [list(s) for s in sets], "scores": mine})


def _read_json(path: Path) -> dict | None:
    import json

    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None  # a damaged scores file is recomputed, never trusted
