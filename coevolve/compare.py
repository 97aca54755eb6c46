"""Budget-matched comparisons: methods × tasks × budgets × seeds, each run
under the same ledger, then each run's best heuristic scored on test sets.

Fairness rules, enforced here rather than left to the user:
- every run of a comparison shares every setting except method, task, budget
  and seed (one config builds them all), and a named arm's own settings
  (coevolve.plan.run_config; never the engine, sandbox, ledger or caps);
- the artefact scored on the test sets is the run's `best.py`, which the loop
  chose by its training objective alone; test scores never feed back;
- test scores come from `Sandbox.evaluate_many` on the file's text, the same
  path `coevolve eval FILE` takes, so the two agree on the same file.

Layout of a comparison directory:
    compare.toml                 the resolved comparison config
    runs/<task>/<method>-b<budget>-s<seed>/    one `coevolve run` directory each (a named arm: <arm>-b...),
        ... + test.json          its test scores (keyed by best.py's hash)
    report.md, table.csv, runs.csv, results.json, plots/*.png   (coevolve.report)

The plan (config, run list, structural matching) lives in coevolve.plan; the
`coevolve compare` command runs this module, then renders with coevolve.report.

Resumable: a finished run (its events end with `end`) is skipped, a killed one
is resumed from its events, and test scores are reused while best.py and the
test settings are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from coevolve.agents.es_agent import execute as execute_agent, run_seed_skills
from coevolve.agents.evaluate import attempts_of, check_heldout, eval_sampling, evaluate_arm, run_inputs
from coevolve.agents.rollout import drawn_cases
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.agents.tools import SandboxTool
from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.base.durable import make_directory, read_json
from coevolve.base.errors import CorruptFileError, UsageError
from coevolve.base.records import SearchSummary, TestScore, TestScores, read_record, write_record
from coevolve.base.sections import EndpointSection
from coevolve.base.untrusted import clean
from coevolve.engine.base import ConstraintError
from coevolve.engine.local import needs_engine, require_devices, require_engine, require_model
from coevolve.engine.openai_client import EndpointConfigError, EndpointError, open_endpoint, record_endpoint
from coevolve.engine import pool  # as a module: tests stand a fake engine in for pool.build_engine
from coevolve.es import engine_options
from coevolve.es import history as es_history
from coevolve.es.optimizer import ReplayError, check_generations, replay
from coevolve.plan import (COMPARE_CONFIG, HELDOUT_SCORES, PAPER_TEST_SIZES, TEST_SCORES,  # noqa: F401
                           AgentCompareConfig, CompareConfig, CompareSection, HoldoutSection, RunSpec,
                           agent_run_config, agent_runs, arm_method, arm_plans, arm_settings, arm_spend,
                           arm_warnings, base_directory, baseline_directory, check_arms, check_structure,
                           load_compare_config, planned_runs, run_config, run_state, scored_sets, skill_warnings,
                           spend_warnings, _task_or_error)
from coevolve.runstore import RunStore, atomic_write_json, atomic_write_text, hold_directory
from coevolve.sandbox import Sandbox
from coevolve.search.loop import SearchLoop
from coevolve.search.methods import es_population, record_methods
from coevolve.search.progress import progress_bar, say
from coevolve.search.runconfig import RunConfig
from tasks.base import Reference, SeededSets, gap, starting_program
from tasks.check import checked_reference
from tasks.loader import TaskExited, exited, record_tasks, task_label
from tasks.registry import heuristic_task


def _settings(config: RunConfig) -> dict:
    """A run's config without its directory, which may move with the comparison. An agent run's seed
    skills by the folders they name: a run from before they were recorded absolute holds them relative,
    counted from the working directory (as it started), which names the same folders as the TOML's own
    counting when the comparison is rerun from where it ran."""
    data = as_dict(config)
    data["run"] = {k: v for k, v in data["run"].items() if k != "out"}
    if isinstance(data.get("skills"), dict):
        data["skills"] = {**data["skills"], "paths": [str(Path(p).expanduser().resolve())
                                                      for p in data["skills"].get("paths", [])]}
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


def existing_config(config: RunConfig | AgentRunConfig, directory: Path) -> Any:
    """The config an existing run in `directory` runs under (None: no run there yet); it must match the
    comparison's: a run's settings changed since it started are refused, naming the first one."""
    store = RunStore(directory)
    if not store.config_path.exists():
        return None
    existing = build_config(type(config), read_toml(store.config_path))
    if _settings(existing) != _settings(config):
        raise UsageError(f"{directory} holds a run under other settings: "
                         f"{_first_difference(_settings(existing), _settings(config))}; "
                         "use another --out, or delete that run to redo it")
    return existing


def runs_held(config: CompareConfig | AgentCompareConfig, root: Path) -> dict[RunSpec, str]:
    """The planned runs `root` holds already, each checked as the comparison checks it before it runs
    (`existing_config`: a run under other settings refuses, with the comparison's line), with its state
    (`run_state`: "partial" or "finished"): what `--plan` says of an existing --out. Only a folder that
    holds a run has its config built, so a new --out costs nothing."""
    agents = isinstance(config, AgentCompareConfig)
    held = {}
    for spec in agent_runs(config) if agents else planned_runs(config):
        directory = spec.directory(root)
        if not RunStore(directory).config_path.exists():
            continue
        run_cfg = agent_run_config(config, spec, directory) if agents else run_config(config, spec, directory)
        existing_config(run_cfg, directory)
        held[spec] = run_state(directory)
    return held


def open_or_create(config: RunConfig | AgentRunConfig, directory: Path, existing: Any) -> tuple[RunStore, Any]:
    """The run's store and the config it runs under. An existing run keeps its own config.toml (the
    loop replays against it): `existing`, as `existing_config` read it while the comparison was
    checked (None: no run there yet, so `config` starts one)."""
    if existing is None:
        store = RunStore.create(directory, dump_toml(as_dict(config)))
        if isinstance(config, RunConfig):  # a method file's copy: the run directory resumes and reports alone
            record_methods(directory, [config.run.method])
        return store, config
    return RunStore.open(directory, write=True), existing


ROOT = "the comparison directory (compare.out, --out)"  # as its refusals name it


def default_root(agents: bool) -> Path:
    """Where a comparison goes when neither compare.out nor --out names a folder: a new one under runs/."""
    return Path("runs") / f"compare{'-agents' if agents else ''}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_root(root: Path) -> None:
    """The comparison directory can be made at `root`: a file there, or at a folder above it, refuses the
    comparison and its --plan alike with one line naming that file, before any other check (else the
    comparison would pass them all, probe its endpoints and load nothing, then fail in `begin`). Nothing
    is made; `begin` makes it."""
    for path in (root, *root.parents):
        if path.is_dir():
            return
        if os.path.lexists(path):  # a dangling link is in the way too
            raise UsageError(f"{ROOT}: cannot make the directory {root}: a file is in the way ({path})")


def begin(config: CompareConfig | AgentCompareConfig, root: Path) -> Callable[[], None]:
    """The comparison directory, once every check passed: made (or found), its file tasks and method
    files copied in (tasks.json, methods.json: a rerun refuses an edited one, the report reads the copy
    when the original is gone), and the resolved config written (compare.toml). Returns the release of
    its writer lock, for the caller to call once the comparison has written its last file: one comparison
    writes it, and a process that goes on after it (a notebook, a test) must not keep `coevolve report`
    refused."""
    make_directory(root, ROOT)
    release = hold_directory(root, "run the comparison again")
    record_tasks(root, config.compare.tasks)
    record_methods(root, [arm_method(config, m) for m in config.compare.methods])
    for line in dropped_lines(root, config):
        print(f"note: {line}", file=sys.stderr)
    atomic_write_text(root / COMPARE_CONFIG, dump_toml(as_dict(config)))
    return release


def dropped_lines(root: Path, config: CompareConfig | AgentCompareConfig) -> list[str]:
    """What a rerun's config no longer lists that the comparison's compare.toml did (a method, task,
    budget or seed): its runs stay on disk but leave every table, said rather than done silently."""
    path = root / COMPARE_CONFIG
    earlier = read_toml(path).get("compare", {}) if path.exists() else {}
    lines = []
    for key in ("methods", "tasks", "budgets", "seeds"):
        now = getattr(config.compare, key)
        gone = [v for v in earlier.get(key, []) if v not in now] if isinstance(earlier.get(key), list) else []
        if gone:
            lines.append(f"compare.{key} no longer lists {', '.join(map(str, gone))}: the runs made for "
                         f"{'it' if len(gone) == 1 else 'them'} stay under {root / 'runs'} but leave the report "
                         "(list them again to bring them back)")
    return lines


# ------------------------------------------------------- an arm's errors
class ArmError(RuntimeError):
    """An endpoint stopped answering one of the comparison's runs mid-way (after its retries), or its
    engine or endpoint refused the decoding constraint: one line naming the run's directory. Every
    finished step and run stays, and a rerun goes on from them `when` (what the rerun line adds)."""

    def __init__(self, message: str, when: str) -> None:
        super().__init__(message)
        self.when = when


@contextmanager
def naming_arm(directory: Path) -> Iterator[None]:
    """A comparison runs many arms on one engine and endpoint: an error from them names the arm it
    stopped (its run directory, as the comparison's other lines do)."""
    try:
        yield
    except EndpointError as exc:
        raise ArmError(f"{directory}: {exc}", "once the endpoint answers") from None
    except ConstraintError as exc:  # `coevolve run` prints it as one line too (commands/run.py, _resumable)
        raise ArmError(f"{directory}: {exc}", "once its engine or endpoint takes the decoding constraint") from None
    except ReplayError as exc:  # the arm's ES weights cannot be rebuilt: its history.jsonl, or this engine
        raise UsageError(f"{directory}: cannot score this arm: {exc}") from None


@contextmanager
def naming_endpoint(config: CompareConfig | AgentCompareConfig, arm: str) -> Iterator[None]:
    """An arm's endpoint refused at its opening probe (unreachable, the key refused, the model not
    served) is named where the TOML set what was refused (`arm_endpoint_line`): the probe knows its
    settings, not which arm of the comparison they came from."""
    try:
        yield
    except EndpointConfigError as exc:
        raise EndpointConfigError(arm_endpoint_line(config, arm, str(exc))) from None


def arm_endpoint_line(config: CompareConfig | AgentCompareConfig, arm: str, line: str) -> str:
    """A probe's refusal (`endpoint.KEY: ...`) of a named arm's own [endpoint], as plan.arm_error names a
    named arm's other keys: `compare.arms.NAME.endpoint.KEY: ...` where the arm sets KEY, else the line
    with the arm's name at its end. An arm without endpoint settings of its own probes the comparison's
    [endpoint], whose line is named as it was written already."""
    own = arm_settings(config, arm).get("endpoint") or {}
    key = line.partition(":")[0]
    if not own or not key.startswith("endpoint."):
        return line
    if key.removeprefix("endpoint.").split(".")[0] in own:
        return f"compare.arms.{arm}.{line}"
    return f"{line} (named arm {arm})"


def check_history(directory: Path) -> None:
    """An agent run's history.jsonl holds generations 0, 1, 2, ... in order, checked from the file
    alone, before any engine loads or anything is written (replay checks it again when the arm is
    scored, after the engine has loaded); a damaged one is one line naming the run."""
    path = directory / "history.jsonl"
    if path.is_file():
        with naming_arm(directory):
            check_generations(path, es_history.read_numbered(path))


# ---------------------------------------------------------------- running
class _Resources:
    """The engine, endpoint and training sandbox, started on first need
    (a comparison whose runs are all finished never loads the model)."""

    def __init__(self, config: CompareConfig | AgentCompareConfig, engine: Any = None) -> None:
        self.config = config
        self._engine = engine
        self._own_engine = engine is None
        self._sandbox: Any = None
        self._endpoints: dict[str, tuple[Any, dict | None]] = {}  # by settings: named arms may each have their own

    def engine(self) -> Any:
        if self._engine is None:
            es = self.config.es
            self._engine = pool.build_engine(self.config.model.path or None, self.config.distributed,
                                             dtype=self.config.model.dtype, max_model_len=self.config.model.max_len,
                                             **engine_options(es.noise, es.rank, self._es_slots()))
        return self._engine

    def _es_slots(self) -> int:
        """LoRA slots a low-rank engine needs: the most members any planned ES run asks for."""
        if isinstance(self.config, AgentCompareConfig):  # a named arm may ask for more members
            return max([self.config.agent.population]
                       + [agent_run_config(self.config, spec, Path(".")).agent.population
                          for spec in agent_runs(self.config, seeds=self.config.compare.seeds[:1])])

        runs = [run_config(self.config, spec, Path(".")) for spec in planned_runs(self.config)]
        return max([es_population(c) for c in runs if c.uses_es], default=2)

    def sandbox(self) -> Any:
        if self._sandbox is None:
            s = self.config.sandbox
            self._sandbox = Sandbox.from_section(s)
        return self._sandbox

    def endpoint(self, section: EndpointSection) -> Any:
        """The client of an [endpoint] (a named arm may have its own), probed once when first opened
        (reachable, key taken, model served); None for no endpoint."""
        return self._opened(section)[0]

    def described(self, section: EndpointSection) -> dict | None:
        """What a run records of its endpoint (endpoint.json), from that probe."""
        return self._opened(section)[1]

    def _opened(self, section: EndpointSection) -> tuple[Any, dict | None]:
        key = json.dumps(section.model_dump(mode="json"), sort_keys=True)
        if key not in self._endpoints:
            client = open_endpoint(section)
            self._endpoints[key] = (client, None if client is None else client.describe(client.probe()))
        return self._endpoints[key]

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
        if self._own_engine and self._engine is not None:
            self._engine.close()


def execute_run(config: RunConfig, store: RunStore, resources: _Resources, *, label: str = "",
                progress: bool = True) -> SearchSummary:
    """One run through the search loop; the shared engine leaves it with the
    checkpoint's weights, whatever ES did to them. `label`: what its progress bar
    is called (the comparison's arm: a named arm's name, not its method's);
    `progress` False: no bar."""
    endpoint = resources.endpoint(config.endpoint)
    record_endpoint(store.dir, resources.described(config.endpoint))
    # a context-only run against an endpoint never starts the engine
    engine = resources.engine() if needs_engine(config.uses_es, config.endpoint) else endpoint
    bar = progress_bar(config, label=label or f"{config.run.method} {config.run.task} seed {config.run.seed}") \
        if progress else None
    loop = SearchLoop(config, store, engine, resources.sandbox(), heuristic_task(config.run.task),
                      endpoint=endpoint, on_progress=bar.update_from if bar else None, on_note=say,
                      on_phase=bar.phase if bar else None)
    try:
        return loop.run()
    finally:
        if bar:
            bar.close()
        if config.uses_es:
            engine.reset()


Progress = Callable[[str], None]


def run_comparison(config: CompareConfig, root: str | Path, *, engine: Any = None,
                   log: Progress = print, progress: bool = True) -> Path:
    """Run every planned run (skipping finished ones) and score each best
    heuristic on the test sets; `coevolve.report.render_comparison` renders
    the result. Returns the comparison directory. Every check that can refuse
    runs before anything is written (a refused comparison leaves no directory
    and no file behind): arms that are not structurally matched, unless
    allowed; what each arm needs of each task (`plan.check_arms`); a planned
    run's folder holding a run under other settings; the install, the model
    and every endpoint. Then the directory is made (`begin`).
    `engine`: an already started engine to use (it is reset after ES runs and
    not closed); None starts the configured model when a run needs it.
    `progress` False: no progress bars.
    An agent comparison goes to run_agent_comparison."""
    if isinstance(config, AgentCompareConfig):
        return run_agent_comparison(config, root, engine=engine, log=log, progress=progress)
    for difference in check_structure(config):
        log(f"warning (allowed by compare.allow_unmatched): {difference}")
    root = Path(root)
    # each run's config built once, used throughout
    planned = {spec: run_config(config, spec, spec.directory(root)) for spec in planned_runs(config)}
    plans = arm_plans(planned)
    # what --plan prints too; an arm that spends more than the others (its initial population charged
    # outside T) is said here, before anything runs, not only in the report
    for warning in arm_warnings(plans) + spend_warnings(plans, arm_spend(config, plans)) + skill_warnings(planned):
        log(f"warning: {warning}")
    check_arms(config, planned)  # what a method needs of its task (MAP-Elites', Pareto's) and the tie-breaks, per arm
    # a rerun whose settings changed: refused before any run goes on (each config.toml read once)
    existing = {spec: existing_config(run_cfg, spec.directory(root)) for spec, run_cfg in planned.items()}
    if engine is None:  # refuse, before anything is written, a run the install or the model cannot run
        for run_cfg in planned.values():
            require_engine(run_cfg.run.method, run_cfg.uses_es, run_cfg.endpoint)
            if needs_engine(run_cfg.uses_es, run_cfg.endpoint):
                require_model(run_cfg.model)
                require_devices(run_cfg.distributed)
    resources = _Resources(config, engine)
    # every endpoint probed before anything is written (a named arm may have its own); a finished run asks
    # nothing of its own, so a finished comparison reruns (its report rendered again) while a server is down
    for spec, run_cfg in planned.items():
        if run_state(spec.directory(root)) != "finished":
            with naming_endpoint(config, spec.method):
                resources.endpoint(run_cfg.endpoint)
    release = begin(config, root)
    try:
        _run_arms(planned, root, existing, resources, progress, log)
        score_comparison(config, root, log=log)
    finally:
        release()
    return root


def _run_arms(planned: dict, root: Path, existing: dict, resources: "_Resources", progress: bool,
              log: Callable[[str], None]) -> None:
    """Each planned arm run of a heuristic comparison, finished ones skipped, the killed one resumed."""
    try:
        for number, (spec, run_cfg) in enumerate(planned.items(), start=1):
            directory = spec.directory(root)
            state = run_state(directory)
            # a file task by its name, as its folder runs/<name>/ is, not by its path
            task = task_label(spec.task)
            what = f"[{number}/{len(planned)}] {task} {spec.method} budget {spec.budget} seed {spec.seed}"
            store, run_cfg = open_or_create(run_cfg, directory, existing[spec])
            if state == "finished":
                store.close()
                log(f"{what}: finished earlier, skipped")
                continue
            began = time.perf_counter()
            # the arm's lock let go however it ends (an interrupt's traceback keeps the store alive in a
            # process that goes on: a notebook's, a test's)
            with store, naming_arm(directory):
                log(f"{what}: {'resuming' if state == 'partial' else 'running'}")
                summary = execute_run(run_cfg, store, resources, progress=progress,
                                      label=f"{spec.method} {task} seed {spec.seed}")
            best = summary.best.objective if summary.best else None
            log(f"{what}: done in {time.perf_counter() - began:.0f} s, best train objective "
                f"{'-' if best is None else f'{best:.6g}'}, valid {summary.valid}/{summary.evaluations}")
    finally:
        resources.close()


# ------------------------------------------------------------- test scores
class LimitedTask:
    """A task whose instance sets are cut to their first `limit` instances.

    For quick comparisons on big test sets. It wraps the task's seeded sets
    (tasks.base.SeededSets), so instances, evaluation and the reference all see
    the same cut sets; its name differs from the task's, so cached reference
    values and the sandbox workers' instance caches never mix the two. It
    travels to sandbox workers as (task name, limit)."""

    def __init__(self, base_name: str, limit: int) -> None:
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
    return isinstance(getattr(heuristic_task(task_name), "_sets", None), SeededSets)


def file_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def score_files(jobs: list[tuple[str, str, str, int]], limit: int, sandbox: Any) -> list[TestScore]:
    """Test scores of (code, task name, split, size) jobs, in order: the objective
    (or the typed failure) from the sandbox, the set's reference and the gap."""
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
            references[(name, split, size)] = _reference(task, split, size)
        reference = references[(name, split, size)]
        objective = result.objective if result.ok else None
        scores.append(TestScore(
            split=split, size=size, limit=limit if isinstance(task, LimitedTask) else 0,
            objective=objective,
            failure=None if result.ok else (result.failure.value if result.failure else "invalid"),
            message="" if result.ok else clean(result.message, 500),
            instances=result.instances, seconds=round(result.seconds, 3),
            reference=None if reference is None else reference.value,
            reference_kind=None if reference is None else reference.kind,
            gap=None if objective is None or reference is None or reference.value == 0
            else gap(objective, reference.value, task.direction),
        ))
    return scores


def _reference(task: Any, split: str, size: int) -> Reference | None:
    """The task's reference, its own code run in this process (as `coevolve eval` runs it): one that exits
    the process is one line; one that raises or returns no Reference is none, with a warning naming its
    line (checked_reference): the runs and their test scores stand without it (no gap)."""
    try:
        reference, problem = checked_reference(task, split, size)
    except TaskExited as exc:
        raise UsageError(exited(exc, f"reference({split!r}, {size})")) from None
    if problem:
        print(f"warning: {problem}; the test scores on {split} {size} have no reference or gap",
              file=sys.stderr, flush=True)
    return reference


def score_comparison(config: CompareConfig, root: str | Path, *, log: Progress = print) -> None:
    """Write test.json in every finished run whose scores are missing or stale,
    and in baselines/<task>/ for the task's template: the starting point every
    run had, which the report compares each run's best with."""
    root = Path(root)
    settings = {"split": config.test.split, "sizes": config.test.sizes, "limit": config.test.limit,
                # only when set: test.json files written before [test] seeds existed stay current
                **({"seeds": config.test.seeds} if config.test.seeds > 1 else {})}
    entries: list[tuple[Path, str, str | None, str]] = []  # directory, task, code, what the code is
    for spec in planned_runs(config):
        directory = spec.directory(root)
        if run_state(directory) == "finished":
            best = directory / "best.py"
            entries.append((directory, spec.task, best.read_text(encoding="utf-8") if best.exists() else None,
                            "best.py"))
    for task in config.compare.tasks:
        start = starting_program(_task_or_error(task, "compare.tasks"), config.start.program)
        entries.append((baseline_directory(root, task), task, start, "template"))
    pending: list[tuple[Path, str, list[tuple[str, int]], str, str]] = []
    for directory, task, code, what in entries:
        sets = scored_sets(config, _task_or_error(task, "compare.tasks"))
        wanted = TestScores(file=what if code is not None else None,
                            sha256=None if code is None else file_digest(code), settings=settings,
                            sets=[list(s) for s in sets])
        previous = _previous_scores(directory / TEST_SCORES)
        if previous and all(getattr(previous, k) == getattr(wanted, k) for k in ("file", "sha256", "settings", "sets")):
            continue
        if code is None:  # no valid heuristic in training: nothing to score
            write_record(directory / TEST_SCORES, wanted)
            continue
        pending.append((directory, task, sets, code, what))
    if not pending:
        return
    jobs = [(code, task, split, size) for _, task, sets, code, _ in pending for split, size in sets]
    runs = sum(1 for *_, what in pending if what == "best.py")
    sets = len({(task, split, size) for _, task, task_sets, _, _ in pending for split, size in task_sets})
    log(f"scoring {runs} best heuristics and {len(pending) - runs} task templates on {sets} test "
        f"set{'s' * (sets != 1)} ({len(jobs)} scorings"
        + (f", the first {config.test.limit} instances each)" if config.test.limit else ")"))
    t = config.test
    with Sandbox.from_section(t) as sandbox:
        scores = score_files(jobs, t.limit, sandbox)
    position = 0
    for directory, _, sets, code, what in pending:
        mine, position = scores[position:position + len(sets)], position + len(sets)
        write_record(directory / TEST_SCORES, TestScores(
            file=what, sha256=file_digest(code), settings=settings, sets=[list(s) for s in sets], scores=mine))
        if what == "template":
            atomic_write_text(directory / "template.py", code)


def _previous_scores(path: Path) -> TestScores | None:
    try:
        return read_record(path, TestScores)
    except UsageError:
        return None  # a damaged scores file is recomputed, never trusted


def _read_json(path: Path) -> dict | None:
    try:
        return read_json(path)
    except CorruptFileError:
        return None  # a damaged scores file is recomputed, never trusted


# ------------------------------------------------------- agent comparisons
ARM_OF = {"base": "base", "esopt": "esopt", "trace2skill": "skill", "esopt+trace2skill": "both"}
HELDOUT_VERSION = 1


def run_agent_comparison(config: AgentCompareConfig, root: str | Path, *, engine: Any = None,
                         log: Progress = print, progress: bool = True) -> Path:
    """Every arm of an agent comparison, seeds outermost: per task the base arm
    (the checkpoint) is scored, then each training run is run (or resumed) on the
    shared engine and its arm scored, on the same held-out set with the same
    sampling seeds (coevolve.agents.evaluate). Finished runs and arms whose
    heldout.json matches the settings and the run's outputs are skipped, so a
    killed comparison continues where it stopped; `coevolve.report` renders it.
    What can refuse (the install, the model, each task's held-out set, a run's
    folder under other settings, the endpoint an arm distils on) is checked
    before anything is written."""
    root = Path(root)
    c = config.compare
    if engine is None:  # the agents always play on the local engine
        methods = [arm_method(config, m) for m in c.methods]
        require_engine(methods[0], any("esopt" in m for m in methods), config.endpoint, students=True)
        require_model(config.model)
        require_devices(config.distributed)
    read: set[tuple[str, ...]] = set()
    # each training run's config, and the one a run already in its folder runs under (None: none there
    # yet), built and read once: a rerun whose settings changed, or a seed skill that does not read, is
    # refused before anything is written
    planned: dict[RunSpec, tuple[AgentRunConfig, Any]] = {}
    for spec in agent_runs(config):
        run_cfg = agent_run_config(config, spec, spec.directory(root))
        existing = existing_config(run_cfg, spec.directory(root))
        planned[spec] = run_cfg, existing
        if existing is not None:
            run_seed_skills(spec.directory(root), run_cfg.skills.paths)  # what its log pinned, if it did
            check_history(spec.directory(root))
        elif tuple(run_cfg.skills.paths) not in read:  # a run still to start reads its folders (each set once)
            read.add(tuple(run_cfg.skills.paths))
            run_cfg.seed_skills()
    if "base" in c.methods:
        AgentRunConfig(skills=config.skills).seed_skills()  # the base arm's, read when it is scored
    resources = _Resources(config, engine)  # starts nothing until a run asks
    tool = SandboxTool()
    arms = len(c.seeds) * len(c.tasks) * (len(c.budgets) * sum(m != "base" for m in c.methods)
                                          + ("base" in c.methods))
    number, release = 0, (lambda: None)
    try:
        # each task's held-out set, checked apart from training, before anything is written
        tasks = {task_name: _heldout_task(config, task_name, tool) for task_name in c.tasks}
        probe_teachers(config, root, planned, resources)
        release = begin(config, root)
        for seed in c.seeds:
            for task_name in c.tasks:
                for budget in c.budgets:
                    for method in c.methods:
                        if method == "base" and budget != c.budgets[0]:
                            continue  # the checkpoint is the same arm at every budget
                        number += 1
                        spec = RunSpec(task_name, method, budget, seed)
                        what = (f"[{number}/{arms}] {task_label(task_name)} {method}"
                                + ("" if method == "base" else f" budget {budget}") + f" seed {seed}")
                        _agent_arm(config, root, spec, planned.get(spec), tasks[task_name], resources, what,
                                   log, progress)
    finally:
        tool.close()
        resources.close()
        release()
    return root


def probe_teachers(config: AgentCompareConfig, root: Path, planned: dict[RunSpec, tuple[AgentRunConfig, Any]],
                   resources: _Resources) -> None:
    """The [endpoint] of every run that will distil skills on it (a skill method, not finished yet), probed
    as a heuristic comparison's are and named by the arm that set it (`naming_endpoint`). Left to the
    first distillation, a dead one showed only after the engine had played the arms before it, and an
    unset key variable named no arm. Arms that never distil (base, esopt) ask nothing of it, nor do
    finished runs."""
    for spec, (run_cfg, _) in planned.items():
        if run_cfg.uses_skills and run_state(spec.directory(root)) != "finished":
            with naming_endpoint(config, spec.method):
                resources.endpoint(run_cfg.endpoint)


def _heldout_task(config: AgentCompareConfig, name: str, tool: Any) -> tuple[Any, list]:
    """The task with its comparison options and its held-out set (eval split,
    seed 0: the same problems for every arm and seed), checked apart from training."""
    options = {"run": {"task": name, "budget": AgentRunConfig().run.budget}, "task": dict(config.task.get(name, {}))}
    task = build_config(AgentRunConfig, options).build_task(tool=tool)
    heldout = drawn_cases(task, "eval", config.eval.problems, 0, "eval.problems")
    try:
        check_heldout(task, heldout, drawn_cases(task, "train", min(len(heldout), 64), 0, "eval.problems"))
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None
    return task, heldout


def _agent_arm(config: AgentCompareConfig, root: Path, spec: RunSpec, planned: tuple[AgentRunConfig, Any] | None,
               task_set: tuple[Any, list], resources: _Resources, what: str, log: Progress,
               progress: bool = True) -> None:
    """Train one arm's run (unless "base" or finished) and score it (unless scored). `planned`: the run's
    config and the config of the run already in its folder, as the comparison's checks built and read
    them (None for "base", which has no run)."""
    if planned is None:
        directory, run_dir = base_directory(root, spec.task, spec.seed), None
    else:
        directory = run_dir = spec.directory(root)
        state = run_state(directory)
        run_cfg, existing = planned
        store, run_cfg = open_or_create(run_cfg, directory, existing)
        with store:  # the arm's lock let go once trained, as a heuristic arm's (_run_arms)
            if state == "finished":
                log(f"{what}: trained earlier, skipped")
            else:
                log(f"{what}: {'resuming' if state == 'partial' else 'training'}")
                began = time.perf_counter()
                try:
                    with naming_arm(directory):
                        summary = execute_agent(run_cfg, store, resources.engine(), resuming=state == "partial",
                                                label=f"{spec.method} {task_label(spec.task)} seed {spec.seed}",
                                                progress=progress)
                finally:
                    if run_cfg.uses_es:
                        resources.engine().reset()
                log(f"{what}: trained in {time.perf_counter() - began:.0f} s, {summary.rounds} rounds, "
                    f"held-out mean reward {summary.eval_first.mean_reward:.3f} -> "
                    f"{summary.eval_last.mean_reward:.3f}")
    history, skills = run_inputs(run_dir) if run_dir is not None else (None, [])
    # a trained arm's seed skills as its run pinned them (the texts it played with), the base arm's read now
    seeded = (run_seed_skills(run_dir, run_cfg.skills.paths) if run_dir is not None
              else AgentRunConfig(skills=config.skills).seed_skills())
    skills = [*seeded, *skills]
    # every arm's held-out prompts cut as the comparison's [agent] history_turns cuts its training ones (a
    # 9x9 episode's whole history outgrows the engine's context); named only when set, so scores recorded
    # before it was passed on stay valid
    turns = config.agent.history_turns
    settings = {**as_dict(config.eval), "task": config.task.get(spec.task, {}),
                **({} if turns is None else {"history_turns": turns})}
    source = {"history": None if history is None else file_digest(history.read_text(encoding="utf-8")),
              "skills": [file_digest(s.text()) for s in skills]}
    previous = _read_json(directory / HELDOUT_SCORES)
    if previous and previous.get("settings") == settings and previous.get("source") == source:
        log(f"{what}: scored earlier, skipped")
        return
    task, heldout = task_set
    engine = resources.engine()
    constrained = config.eval.constrained and bool(getattr(task, "action_pattern", None))
    if constrained and hasattr(engine, "check_constraints"):
        with naming_arm(directory):
            engine.check_constraints([task.action_pattern])
    try:
        with naming_arm(directory):  # a constraint refused mid-play too
            if history is not None:  # in the try: a replay refused part-way (its checksum) has moved weights
                replay(history, engine)
            result = evaluate_arm(engine, task, heldout, ARM_OF[arm_method(config, spec.method)], config.eval.k,
                                  eval_sampling(config.eval.max_tokens, task), spec.seed, skills, constrained,
                                  turns)
    finally:
        if history is not None:
            engine.reset()
    atomic_write_json(directory / HELDOUT_SCORES, {
        "version": HELDOUT_VERSION, "task": spec.task, "method": spec.method,
        "budget": None if spec.method == "base" else spec.budget, "seed": spec.seed,
        "settings": settings, "source": source,
        "attempts": attempts_of(result.trajectories, result.problems, result.k), **result.to_dict()})
    log(f"{what}: Mean@{config.eval.k} {result.mean_at_k}, Pass@{config.eval.k} {result.pass_at_k}")
