"""`coevolve run CONFIG.toml [flags]` and `coevolve run --resume DIR`.

A config whose run.task is an agent task (sudoku, sudoku9, react_math, or
your env.py) is an agent run: ES and Trace2Skill over training episodes
(docs/agents.md). Any other task is a heuristic search: evolved programs
scored in the sandbox, over evaluations (docs/search.md). The flags, the run
directory, the progress bar and --resume are the same for both; flags
override the config's keys. Every run writes a directory (config.toml, an
event log, history.jsonl of ES updates, the best artefacts) that --resume
continues after a kill."""

# Agent runs: coevolve.agents.runconfig.AgentRunConfig, run by coevolve.agents.es_agent;
# heuristic searches: coevolve.search.runconfig.RunConfig, run by coevolve.search.loop.

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from coevolve.agents.es_agent import (EVENT_VERSION as AGENT_EVENTS, KIND as AGENT_KIND, execute as execute_agent,
                                      plan_lines as agent_plan_lines)
from coevolve.agents.runconfig import METHODS as AGENT_METHODS, AgentRunConfig
from coevolve.agents.tools import SandboxTool
from coevolve.base.config import (as_dict, build_config, config_error, dump_toml, error_key, merge_overrides,
                                  read_toml, require_settings, sections_with, unknown_key)
from coevolve.base.durable import FULL, refused_write
from coevolve.base.errors import ConfigError, UsageError
from coevolve.base.mirror import Mirroring, check_log
from coevolve.base.sections import RunSection, task_named
from coevolve.commands.check_task import check_seconds, fail, problems
from coevolve.dashboard.reader import kind_of
from coevolve.engine.base import ENGINE, ConstraintError, ContextLengthError
from coevolve.engine.local import needs_engine, require_devices, require_engine, require_model
from coevolve.engine.models import EMBEDDED_NAMES, list_models
from coevolve.engine.openai_client import EndpointError, open_endpoint, record_endpoint
from coevolve.engine import pool  # as a module: tests stand a fake engine in for pool.build_engine
from coevolve.es import engine_dtype, engine_options
from coevolve.es.start import HEURISTIC, check_same_config, config_difference, edited_line, logged_config
from coevolve.plan import (COMPARE_CONFIG, ComparisonConfig, RunSpec, comparison_arm, comparison_key, engine_lines,
                           files_counted, require_one_kind, task_files_counted)
from coevolve.report import agent_table, run_table
from coevolve.base.records import AgentSummary, RunSummary, SearchSummary, read_summary
from coevolve.runstore import RunStore, atomic_write_text, ended, logged_budget
from coevolve.sandbox import Sandbox
from coevolve.search.loop import (EVENT_VERSION as SEARCH_EVENTS, SearchLoop, check_same_method, rebuild_derived,
                                  restore_best)
from coevolve.search.methods import (BUILTIN, DISTILL, absolute_method, declared_sections,
                                     es_population, extension_problem, check_with_task, format_plan,
                                     known as known_methods, method_class, names_a_method, parse_name, path_name,
                                     record_methods, remember_methods, run_plan, extension_plan)
from coevolve.search.progress import progress_bar, say
from coevolve.search.runconfig import RunConfig
from coevolve.search.skill import task_warning
from coevolve.search.start_programs import read_programs
from tasks.agent_check import agent_problems
from tasks.check import shape_problems
from tasks.loader import absolute_spec, copy_notes, record_tasks, remember_tasks, task_label
from tasks.registry import AGENT_TASKS, UnknownTask, heuristic_task, is_agent_task, unknown_name

# each check of a user's task or environment before a run, at most (--check-seconds): a `decide`, an
# `instances` or an episode that takes longer is a hang, named with its line instead of a silent wait
CHECK_SECONDS = 300.0
LONGER = "`--check-seconds S` gives each check longer, 0 none"


def add_check_seconds(parser: argparse.ArgumentParser) -> None:
    """run's and compare's flag for the checks of a user's task before anything is written."""
    parser.add_argument("--check-seconds", type=float, default=CHECK_SECONDS, metavar="S",
                        help=f"wall seconds each check of a file, module or plugin task may take before the run "
                             f"(default {CHECK_SECONDS:g}; 0: no limit, for a task slow on purpose)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a heuristic search (sample, eoh, +esopt) or an agent run "
                                          "(esopt, trace2skill, esopt+trace2skill) over one budget",
                              description=__doc__)
    p.add_argument("config", nargs="?", help="TOML config (see examples/)")
    p.add_argument("--method", help=f"heuristic tasks: {' | '.join(BUILTIN)} | path/to/method.py[:Class] "
                                    "(a method file, docs/search.md), each also +esopt and +trace2skill "
                                    "(e.g. eoh+esopt+trace2skill); "
                                    "agent tasks: esopt | trace2skill | esopt+trace2skill")
    p.add_argument("--task", help="task: a name (see `coevolve tasks`), path/to/problem.py[:Class] or "
                                  "package.module:Class (docs/own_problem.md)")
    p.add_argument("--budget", type=int, help="heuristic tasks: evaluations, all candidates included; "
                                              "agent tasks: training episodes")
    p.add_argument("--seed", type=int, help="run.seed (default 0): sampling and ES noise seeds derive from it, "
                                            "and an agent run's training and evaluation cases")
    p.add_argument("--model", help="HF checkpoint directory (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--out", help="run directory (default: runs/<task>-<method>-seed<seed>-<time>)")
    p.add_argument("--noise", choices=["full", "lowrank"],
                   help="ES noise (es.noise). full: every parameter perturbed, members one after another: the "
                        "paper's setting, choose it to reproduce the paper. lowrank: each member a rank-r "
                        "perturbation of every linear weight, the whole population in one vLLM batch "
                        "(LoRA slots): several times faster per generation; embeddings and norms stay frozen")
    p.add_argument("--rank", type=int, help="ES low-rank rank (es.rank, default 1; vLLM pads 2..7 to 8, "
                                            "so 1 is the cheap one on CPU)")
    p.add_argument("--skill", metavar="DIR", help="heuristic tasks: a skill folder every prompt shows from the "
                                                   "first request (skill.start; e.g. what `coevolve distill` wrote)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run in DIR (a killed or finished run, heuristic or agent); with "
                        "--budget N, give a heuristic search more evaluations (docs/search.md, \"More budget\")")
    p.add_argument("--task-changed", action="store_true",
                   help="--resume: go on although the run's task file changed since it started "
                        "(recorded as a task_changed event)")
    add_check_seconds(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plan", action="store_true",
                   help="print the plan (a search's steps, operators, evaluations, ES updates; an agent run's rounds; "
                        "the engine layout) after the config, task and model checks, and exit; it asks no [endpoint] "
                        "server (a ray:// distributed.address is tried with one TCP connect)")
    p.set_defaults(handler=handle)


def overrides_from(args: argparse.Namespace) -> dict[str, dict]:
    run = {k: getattr(args, k) for k in ("method", "task", "budget", "seed", "out") if getattr(args, k) is not None}
    out: dict[str, dict] = {"run": run} if run else {}
    if args.model is not None:
        out["model"] = {"path": args.model}
    es = {k: getattr(args, k) for k in ("noise", "rank") if getattr(args, k, None) is not None}
    if es:
        out["es"] = es
    if getattr(args, "skill", None) is not None:
        out["skill"] = {"start": args.skill}
    return out


def config_class(raw: dict, shown: str | None = None) -> type[RunConfig] | type[AgentRunConfig]:
    """AgentRunConfig when the run's task (run.task or [task] name) is an agent task, else RunConfig.
    A run.task that is not a name is refused here, before a kind is chosen by it: the heuristic kind's
    checks would otherwise name the agent task's [task] options instead. So is a config written for the
    other kind (kind_mismatch), whose own checks would name a section or method of that kind as a typo.
    `shown`: the task as the user wrote it (a file spec is absolute in `raw`)."""
    if isinstance(raw.get("task"), list):  # else read as no [task]: its options named as another kind's fields
        raise config_error("task", "must be one table ([task] name = ..., and the task's options), not an array "
                           "of tables ([[task]])")
    run = raw.get("run")
    task = run.get("task") if isinstance(run, dict) else None
    if isinstance(run, dict):  # a misspelt key of [run] first: `taskk` would leave the kind to the default task
        known = sorted(RunSection.model_fields)
        for key in run:
            if key not in known:
                raise unknown_key(f"run.{key}", known, sorted({*sections_with(RunConfig, key, but="run"),
                                                               *sections_with(AgentRunConfig, key, but="run")}))
    if isinstance(run, dict) and "task" in run and not (isinstance(task, str) and task):
        raise config_error("run.task", "must not be empty" if task == "" else "must be a string", task)
    if task is None:  # the default task is a heuristic one: an agent config would be told its sections are typos
        agent_only = set(AgentRunConfig.model_fields) - set(RunConfig.model_fields) - {"task"}
        sections = [f"[{name}]" for name in raw if name in agent_only]
        if sections:
            tasks = " | ".join(f'"{name}"' for name in sorted(AGENT_TASKS))
            raise ConfigError(f"config error: run.task is missing: this config has {', '.join(sections)} (an agent "
                              f"run), which needs an agent task; give run.task = {tasks} | path/to/env.py")
    try:
        chosen = AgentRunConfig if isinstance(task, str) and is_agent_task(task) else RunConfig
    except ConfigError:
        raise
    except UsageError as exc:  # a module or plugin task that does not load: named by its key, as a file is
        raise config_error("run.task:", str(exc)) from None
    if isinstance(task, str):
        problem = kind_mismatch(raw, chosen)
        if problem is not None:
            raise ConfigError(f"config error: run.task {shown or task} {problem}")
    return chosen


def kind_mismatch(raw: dict, chosen: type[RunConfig] | type[AgentRunConfig]) -> str | None:
    """What to say when `raw` is written for the other kind of run than its task's (`chosen`): its
    run.method is one of the other kind's, or (no method of the task's kind given) it has sections only
    the other kind reads. None when nothing points to the other kind."""
    run = raw.get("run") if isinstance(raw.get("run"), dict) else {}
    method = run.get("method")
    agent_method = method in AGENT_METHODS
    heuristic_method = isinstance(method, str) and not agent_method and names_a_method(method)
    builtin_sections = {section for name in BUILTIN for section in declared_sections([name])}
    heuristic_only = (set(RunConfig.model_fields) | builtin_sections) - set(AgentRunConfig.model_fields)
    agent_only = set(AgentRunConfig.model_fields) - set(RunConfig.model_fields) - {"task"}  # [task] name: both
    agent = chosen is AgentRunConfig
    own_method, other_method = (agent_method, heuristic_method) if agent else (heuristic_method, agent_method)
    sections = [name for name in raw if name in (heuristic_only if agent else agent_only)]
    if own_method or not (other_method or sections):
        return None  # a method of the task's kind: any other section is that kind's error to name
    evidence = ", ".join(([f"method {method}"] if other_method else []) + [f"[{name}]" for name in sections])
    if agent:
        return (f"is an agent task: its methods are {', '.join(AGENT_METHODS)}; this config is for a heuristic "
                f"search ({evidence})")
    bases = ", ".join(dict.fromkeys(parse_name(name).base for name in known_methods()))
    return (f"is a heuristic task: its methods are {bases} (each also +esopt, +trace2skill) or "
            f"path/to/method.py; this config is for an agent run ({evidence})")


@contextmanager
def task_key(key: str) -> Iterator[None]:
    """Config errors about run.task named `key`, where the user wrote the task: `[task] name` is held as
    run.task (base/sections.py task_named), but its errors are the user's task.name."""
    head = "config error: run.task"
    try:
        yield
    except ConfigError as exc:
        message = str(exc)
        if key == "run.task" or not message.startswith(head) or message[len(head):][:1] not in (" ", ":"):
            raise
        raise ConfigError(f"config error: {key}{message[len(head):]}") from None


def resolve_config(args: argparse.Namespace) -> tuple[RunConfig | AgentRunConfig, RunStore, bool]:
    """The validated and built config (heuristic or agent), its run directory
    (holding what the [endpoint] said when probed) and True when resuming."""
    config, store, events = resolve_run(args)
    return config, store, events is not None


def resolve_run(args: argparse.Namespace) -> tuple[RunConfig | AgentRunConfig, RunStore, list[dict] | None]:
    """resolve_config's, with a resumed run's log for `handle` (None: a new run): read once for the checks
    here and handle's, again only after `--budget N` logged an extension to it."""
    if args.resume:
        overrides = overrides_from(args)
        budget = overrides.get("run", {}).pop("budget", None)
        if args.config or any(overrides.values()):
            raise UsageError("--resume takes only the run directory (and --budget N, to give a heuristic search "
                             "more evaluations); its config.toml is the config")
        store = open_resumed(args.resume, write=True)  # a second writer is refused here
        with closed_unless_returned(store):
            remember_task(store, args.task_changed)
            remember_methods(store.dir)  # a method file: the original if unchanged, else the run's copy
            print_copy_notes()
            raw, config = resumed_config(store)  # raw as written: what extend rewrites with the larger budget
            events = store.events()  # after remember_task, which may log a task_changed event
            if isinstance(config, RunConfig):
                check_same_method(store, config, events)
            check_resumable(store, config, events, budget)
            # a run that has ended is only shown (handle), unless --budget N gives it more
            going_on = not has_ended(store, events) or (budget is not None and budget != logged_budget(events))
            # probed before an extension is written, as every other refusal comes before anything changes
            endpoint = check_generators(config if budget is None else extended(store, config, budget)) \
                if going_on else None
            if budget is not None:
                config = extend(store, raw, config, budget, events)
                events = store.events()  # with the "extend" event it may have logged: the run goes on again
            if going_on:
                record_endpoint(store.dir, endpoint)
        return config, store, events
    if not args.config:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    if args.task_changed:
        raise UsageError("--task-changed goes with --resume")
    notes: list[str] = []
    config = load_run_config(args.config, overrides_from(args), seconds=args.check_seconds, notes=notes)
    endpoint = check_generators(config)
    print_notes(notes)
    store = create_store(config)
    with closed_unless_returned(store):
        record_tasks(store.dir, [config.run.task])
        record_methods(store.dir, [config.run.method])
        record_endpoint(store.dir, endpoint)
    return config, store, None


@contextmanager
def closed_unless_returned(store: RunStore) -> Iterator[None]:
    """`store` closed when its block raises (a refusal, Ctrl-C): resolve_run hands it to its caller, who
    closes it, only once every check has passed; a refused resume must not keep the run locked in a
    process that goes on (a notebook, a test) until the store is collected."""
    try:
        yield
    except BaseException:
        store.close()
        raise


def open_resumed(directory: str, write: bool = False) -> RunStore:
    """RunStore.open_run for `--resume DIR`: a comparison's folder (dashboard kind_of), or its runs/ or
    runs/TASK, is refused naming the command that goes on with a comparison (and an arm's folder, for the
    runs/ ones), before the run's refusal of a folder without config.toml."""
    path = Path(directory)
    if kind_of(path) == "comparison":
        config = path / COMPARE_CONFIG if (path / COMPARE_CONFIG).is_file() else "CONFIG"
        raise UsageError(f"{path} is a comparison, not a run: rerun `coevolve compare {config} --out {path}` to go "
                         f"on with it")
    inside = path.resolve()
    root = next((above for above in inside.parents[:2] if kind_of(above) == "comparison"), None)
    if root is not None and inside.relative_to(root).parts[0] == "runs" and kind_of(path) is None:
        # ROOT/runs or ROOT/runs/TASK: the arms' runs lie at ROOT/runs/TASK/ARM (coevolve.plan)
        arm = min((p for p in path.glob("*" if inside.parent == root / "runs" else "*/*") if kind_of(p)),
                  default=root / "runs" / "TASK" / "ARM")
        config = root / COMPARE_CONFIG if (root / COMPARE_CONFIG).is_file() else "CONFIG"
        raise UsageError(f"{path} holds arms of the comparison in {root}, not a run: resume one arm (`coevolve run "
                         f"--resume {arm}`) or rerun `coevolve compare {config} --out {root}` to go on with them all")
    return RunStore.open_run(directory, write=write)


def resumed_config(store: RunStore) -> tuple[dict, RunConfig | AgentRunConfig]:
    """The config.toml of the run in `store` as read and as built. Its task is named as it was resolved at
    the start (an absolute file spec): not looked for again, as a new run's is, since remember_tasks has
    made it resolve to the original or, when that is gone, the run's copy."""
    raw = read_toml(store.config_path)
    try:
        named = task_named(raw)
        return raw, build_config(config_class(named), named)
    except ConfigError as exc:  # the file is the run's, not one the user named on this command line
        raise UsageError(f"{store.config_path}: {exc}") from None


def print_notes(notes: list[str]) -> None:
    """Notes on a config that has passed every check: printed before it, they would make a refusal two
    lines."""
    for line in notes:
        print(f"note: {line}", file=sys.stderr, flush=True)


def print_copy_notes() -> None:
    """Say which task and method files were read from the run's copy (tasks.loader.copy_notes)."""
    for note in copy_notes():
        print(f"note: {note}", file=sys.stderr, flush=True)


def resumed_configs(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict],
                    budget: int | None = None) -> tuple[dict | None, dict]:
    """The config the run in `store` (its log: `events`) goes on under (its start event's, es/start.py
    logged_config; None before the run's first step) and its config.toml's (`config`): `--budget N`
    (`budget`) sets both."""
    current = as_dict(config)
    if budget is not None and events:  # as extend will log it
        events = [*events, {"type": "extend", "budget": budget}]
        current = {**current, "run": {**current["run"], "budget": budget}}
    kind, version = (HEURISTIC, SEARCH_EVENTS) if isinstance(config, RunConfig) else (AGENT_KIND, AGENT_EVENTS)
    return logged_config(store, events, kind=kind, version=version, renamed=type(config).RENAMED), current


def check_unedited(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict],
                   budget: int | None = None) -> None:
    """A resume refused, before anything is written or any engine loads, when its config.toml was edited
    since the run started (its log: `events`): one line naming the first setting that differs and the way
    out. The loop and the agent run check again, for a comparison's resumes."""
    logged, current = resumed_configs(store, config, events, budget)
    if logged is not None:
        check_same_config(store, logged, current)


def check_resumable(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict],
                    budget: int | None = None) -> None:
    """`--resume` (and its --plan) refused for an edited config.toml (check_unedited), or, for a run that
    has ended and is only shown, for an extension left half done (check_extension_done)."""
    if budget is not None or not has_ended(store, events):
        check_unedited(store, config, events, budget)
    else:
        check_extension_done(store, config, events)


def check_extension_done(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict]) -> None:
    """A finished heuristic run whose config.toml asks more evaluations than its log ran under is what
    `--resume DIR --budget N` leaves when killed between writing the config and logging its event
    (extend): refused naming the command that finishes the extension, rather than shown as finished
    with an edit nobody made."""
    logged, current = resumed_configs(store, config, events)
    difference = None if logged is None or not isinstance(config, RunConfig) else config_difference(logged, current)
    if difference is None or difference[0] != "run.budget":
        return
    was, now = difference[1:]
    if isinstance(was, int) and isinstance(now, int) and now > was:
        raise UsageError(f"{store.dir} ran to run.budget = {was}, and its config.toml says {now}: an extension to "
                         f"{now} evaluations was interrupted: `coevolve run --resume {store.dir} --budget {now}` "
                         f"finishes it (or put back run.budget = {was})")


def edited_note(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict]) -> str | None:
    """What `--resume` of a run that has ended (its log: `events`) says of a config.toml edited since:
    nothing will read it."""
    logged, current = resumed_configs(store, config, events)
    difference = None if logged is None else config_difference(logged, current)
    return None if difference is None else f"note: {edited_line(store, difference)}; its edits are not read"


def extended(store: RunStore, config: RunConfig | AgentRunConfig, budget: int) -> RunConfig:
    """The config the run in `store` goes on with under `--resume --budget N` (`--plan` too): refused (one
    line) for agent runs, a smaller budget, a comparison's run, and a method whose plan depends on the
    budget."""
    if not isinstance(config, RunConfig):
        # an agent run's rounds are planned whole from its budget (a trace2skill run distils once, after
        # all of them); with ES its σ schedule is too
        planned = "rounds and its ES schedule are" if config.uses_es else "rounds are"
        raise UsageError(f"--budget with --resume gives a heuristic search more evaluations; an agent run's "
                         f"{planned} planned from its budget: start a new run")
    if budget < config.run.budget:
        raise UsageError(f"--budget {budget} is below the run's budget of {config.run.budget}: --resume --budget "
                         "only raises it")
    root = store.dir.resolve().parents[2] if len(store.dir.resolve().parents) > 2 else None
    if root is not None and (root / COMPARE_CONFIG).is_file() and store.dir.resolve().parent.parent.name == "runs":
        raise UsageError(f"{store.dir} is a run of the comparison in {root}, whose budgets are its arms': add "
                         f"{budget} to [compare] budgets there and rerun `coevolve compare`")
    raw = as_dict(config)  # validated as its config.toml saying N would be: rules that read the budget see N
    larger = build_config(RunConfig, {**raw, "run": {**raw["run"], "budget": budget}})
    problem = extension_problem(config, larger)
    if problem is not None:
        raise UsageError(f"cannot give {store.dir} a budget of {budget}: {problem}")
    return larger


def extend(store: RunStore, raw: dict, config: RunConfig | AgentRunConfig, budget: int,
           events: list[dict] | None = None) -> RunConfig:
    """`--resume DIR --budget N`: the run in DIR (its config.toml as read, `raw`, and as built, `config`;
    its log as read, `events`, else read here), finished or not, goes on to N evaluations (`extended`'s
    checks). Its config.toml says N from now on (`raw` with the new budget: the file keeps its own shape)
    and its log an "extend" event; the steps it took stay as they were. A second call with the same N
    changes nothing more."""
    larger = extended(store, config, budget)
    events = store.events() if events is None else events
    before = logged_budget(events)
    if budget != config.run.budget:
        atomic_write_text(store.config_path, dump_toml({**raw, "run": {**raw.get("run", {}), "budget": budget}}))
    if before is not None and budget != before:  # the config first: a kill in between is mended by asking again
        with store.event_writer() as log:
            log.append({"type": "extend", "budget": budget, "from": before})
        print(f"{store.dir}: budget {before} -> {budget} evaluations; the steps it took stay as they were",
              file=sys.stderr)
    return larger


def load_run_config(path: str | Path, overrides: dict[str, dict], new: bool = True,
                    seconds: float | None = None, notes: list[str] | None = None) -> RunConfig | AgentRunConfig:
    """The run config in `path` with the flags' overrides laid over it. A file task or method is made absolute (so the run directory's config names it
    from anywhere): a --task / --method path counts from the working directory, a TOML one
    from the TOML's folder, as do `[skill] start`, `[start] programs`, `[model] path` and an agent
    run's `[skills] paths`. A comparison config (one with [compare], such as
    examples/paper/*.toml) runs one of its arms: the first method, task, budget
    and seed it lists unless flags pick another. A new run's (`new`) task must be one a registry,
    a file, a module or a plugin names; a resumed run's was when it started. With `seconds`, the built
    config is checked too (check_built): a comparison's arm names its errors as the comparison wrote them.
    A new run's notes on sections it gives but never reads (unread_sections) go to `notes`, for the caller
    to print once its own checks have passed too (a refusal stays one line); without `notes`, to stderr
    once this function's checks have."""
    path = Path(path)
    written = read_toml(path)
    if not any(overrides.values()):  # flags alone (`--task T --method M`) may fill an empty file
        require_settings(written, path, "examples/tsp_eoh_esopt.toml (its [run] method, task and budget)")
    require_one_kind(written, path)
    # the task as the user wrote it: `[task] name` (held as run.task from here on), unless --task overrides it
    named = (isinstance(written, dict) and isinstance(written.get("task"), dict) and "name" in written["task"]
             and not overrides.get("run", {}).get("task"))
    with task_key("task.name" if named else "run.task"):
        found: list[str] = []
        config = _load_run_config(path, task_named(written), overrides, new, seconds, found)
    if notes is None:
        print_notes(found)
    else:
        notes.extend(found)
    return config


@contextmanager
def arm_keys(arm: tuple[ComparisonConfig, RunSpec] | None, overrides: dict[str, dict]) -> Iterator[None]:
    """Config errors of a comparison's arm (`coevolve run COMPARISON`, `arm`: the comparison and the run)
    named where the comparison wrote the key (plan.comparison_key), as `coevolve compare` names them; the
    run's own key where a flag (`overrides`) gave it."""
    try:
        yield
    except ConfigError as exc:
        named = error_key(str(exc))
        section, _, field = named[0].partition(".") if named else ("", "", "")
        if arm is None or re.split(r"[.\[]", field)[0] in overrides.get(section, {}):
            raise
        raise comparison_key(*arm, exc, frozenset(f"run.{key}" for key in overrides.get("run", {}))) from None


def _load_run_config(path: Path, raw: dict, overrides: dict[str, dict], new: bool,
                     seconds: float | None, notes: list[str]) -> RunConfig | AgentRunConfig:
    run = raw.get("run") if isinstance(raw.get("run"), dict) else {}
    written_task = overrides.get("run", {}).get("task") or run.get("task")  # errors name it as the user wrote it
    for key, absolute in (("task", absolute_spec), ("method", absolute_method)):
        flag = overrides.get("run", {}).get(key)
        value = flag or run.get(key)
        if isinstance(value, str) and value:
            try:
                overrides.setdefault("run", {})[key] = absolute(value, "." if flag else path.parent)
            except UsageError as exc:  # a file that is not there: named with the flag or key that gave it
                message = str(exc).removeprefix("config error: ")
                raise (UsageError(f"--{key} {value}: {message}") if flag else
                       ConfigError(f"config error: run.{key}: {message}")) from None
    # an agent run's [skills] paths as the TOML wrote them (check_skills_moved), then counted from its folder
    written = raw.get("skills", {}).get("paths") if isinstance(raw.get("skills"), dict) else None
    raw = files_counted(raw, path.parent)
    if "compare" not in raw and "task" in raw:  # an agent task's file options (a comparison's: coevolve/plan.py)
        task = overrides.get("run", {}).get("task") or run.get("task")
        raw = {**raw, "task": task_files_counted(raw["task"], task, path.parent)}
    overrides = files_counted(overrides, ".")  # --model and --skill count from the working directory
    compared_run = None
    if "compare" in raw and "run" not in raw:
        flag = overrides.get("run", {}).get("method")
        compared = raw["compare"].get("methods") if isinstance(raw["compare"], dict) else None
        agents = isinstance(raw["compare"], dict) and raw["compare"].get("kind") == "agent"
        # the arm comparison_run picks: the first listed (an agent comparison's first that trains: not "base")
        trained = [m for m in compared if not (agents and m == "base")] if isinstance(compared, list) else []
        name = flag or (trained[0] if trained else None)
        raw, comparison, spec = comparison_arm(raw, flag, path.parent)
        if flag:  # a named arm: the method it runs (its settings are in raw now)
            overrides["run"]["method"] = raw["run"]["method"]
        arm = {**raw["run"], **overrides.get("run", {})}
        named = f" (named arm {name})" if name and name != arm["method"] else ""
        print(f"{path} is a comparison; this is its arm {arm['method']}{named} on {arm['task']}, budget "
              f"{arm['budget']}, seed {arm['seed']} (--method, --task, --budget, --seed pick another)",
              file=sys.stderr)
        compared_run = (comparison, dataclasses.replace(spec, **{k: arm[k] for k in ("task", "budget", "seed")}))
    with arm_keys(compared_run, overrides):  # the arm's errors where the comparison wrote the key
        raw = merge_overrides(raw, overrides)
        task = raw["run"].get("task") if isinstance(raw.get("run"), dict) else None
        unknown = unknown_name(task) if new and isinstance(task, str) and task else None
        if unknown:  # before the kind is chosen by it: that kind's checks would name another field (run.method)
            raise ConfigError(f"config error: run.task: {unknown}")
        kind = config_class(raw, written_task if isinstance(written_task, str) else None)
        if "skill" in overrides and kind is AgentRunConfig:
            raise UsageError("--skill is for heuristic runs; an agent run names its skills in [skills] paths")
        config = build_config(kind, raw)
        if new and isinstance(config, AgentRunConfig) and isinstance(written, list):
            check_skills_moved(written, config.skills.paths, path.parent)
        if seconds is not None:
            check_built(config, seconds)
        if new and "compare" not in raw:  # (a comparison's file holds the sections of all its arms)
            notes.extend(unread_sections(raw, config))
    return config


def unread_sections(raw: dict, config: RunConfig | AgentRunConfig) -> list[str]:
    """The ES sections a config gives that its method never reads: a user who wrote [es] for a method
    without ES would otherwise believe the weights are trained."""
    if config.uses_es:
        return []
    given = [name for name in ("es", "reward") if name in raw and (name == "es" or isinstance(config, RunConfig))]
    if not given:
        return []
    if isinstance(config, AgentRunConfig):
        runs_es = "ES runs under esopt or esopt+trace2skill"
    elif method_class(parse_name(config.run.method).base).perturbable:
        runs_es = f"ES runs under {dataclasses.replace(parse_name(config.run.method), esopt=True).full}"
    else:
        runs_es = "the method takes no +esopt"
    return [f"{' and '.join(f'[{name}]' for name in given)} {'is' if len(given) == 1 else 'are'} not read: "
            f"run.method = {config.run.method!r} trains no weights ({runs_es})"]


def check_skills_moved(written: list, paths: list[str], base: Path) -> None:
    """A relative [skills] path (as `written` in the TOML) that names no folder from the TOML's folder
    `base`, where it counts (`paths`: as counted), but does from the working directory, where configs
    counted it before: one line saying how to write it now."""
    for index, (path, counted) in enumerate(zip(written, paths)):
        if (isinstance(path, str) and path and not Path(path).expanduser().is_absolute()
                and not Path(counted).exists() and Path(path).is_dir()):
            now = os.path.relpath(Path(path).resolve(), base.resolve())
            raise ConfigError(f"config error: skills.paths[{index}] counts from the config's folder ({base}), where "
                              f"{path!r} is not found; from the working directory it is: write {now!r}")


def check_built(config: RunConfig | AgentRunConfig, seconds: float = CHECK_SECONDS) -> None:
    """What validation leaves to building, before any directory or engine
    exists: a heuristic task's shape (check_task) and what the run's method
    needs of it; an agent task built with
    its [task] options and the [skills] read."""
    if isinstance(config, RunConfig):
        check_task(config.run.task, seconds)
        task = heuristic_task(config.run.task)
        check_with_task(config, task)  # e.g. MAP-Elites' descriptors, the tie-breaks' names
        if config.skill.start:  # --skill and [skill] start alike
            warning = task_warning(config.skill.start, task.name)
            if warning is not None:
                print(f"warning: {warning}", file=sys.stderr, flush=True)
        read_programs(config.start.programs, task.function_name, task.template)
    else:
        check_agent_task(config, seconds)
        config.seed_skills()


def check_agent_task(config: AgentRunConfig, seconds: float = CHECK_SECONDS) -> None:
    """The agent task built with its [task] options; a user's (file, module, plugin) also through
    check-task's agent checks (tasks/agent_check.py: cases, episodes per split), which take
    milliseconds, so a broken environment is one line before any directory or engine exists. Each
    check gets `seconds` (--check-seconds): a `step` that never returns on some move is named with its
    line instead of hanging the run before it starts."""
    check_seconds("--check-seconds", seconds)  # compare's flag too: it checks its tasks through here
    tool = SandboxTool()  # a task that runs Python gets the real tool, started on first use only
    try:
        task = config.build_task(tool)
        if config.run.task in AGENT_TASKS:
            return  # a built-in: its tests check it
        found = agent_problems(task, lambda: config.build_task(tool), stage_seconds=seconds, longer=LONGER)
    finally:
        tool.close()
    if found:
        fail([f"{config.run.task}: {line}" for line in found], "run")


def check_task(spec: str, seconds: float = CHECK_SECONDS) -> None:
    """The cheap part of `coevolve check-task`, before any directory or
    engine exists: the task's shape; for a user's task (file, module,
    plugin) also its determinism and the template's decide/score in this
    process (no sandbox), each check under `seconds` (--check-seconds; 0: none)."""
    check_seconds("--check-seconds", seconds)  # compare's flag too: it checks its tasks through here
    try:
        task = heuristic_task(spec)
    except UnknownTask as exc:
        raise UsageError(f"config error: run.task: {exc}") from None
    user_spec = getattr(task, "__coevolve_spec__", None)
    found = (problems(task, lambda: heuristic_task(user_spec), sandbox=False, stage_seconds=seconds, longer=LONGER)
             if user_spec else shape_problems(task))
    if found:
        fail([f"{spec}: {line}" for line in found], "run")


def remember_task(store: RunStore, accept_changed: bool) -> None:
    """Re-find the run's file task (tasks.loader.remember_tasks); a changed
    file accepted with --task-changed is logged in the run's events."""
    changed = remember_tasks(store.dir, "accept" if accept_changed else "refuse", flag="--task-changed")
    if changed and store.events_path.exists() and store.events():
        with store.event_writer() as log:
            for event in changed:
                log.append(event)


def check_generators(config: RunConfig | AgentRunConfig) -> dict | None:
    """Before the run directory exists: a run whose engine is not installed, or
    whose [model] path names no checkpoint, is refused, and the [endpoint] is probed, once (reachable, key taken, model
    served; an agent run's only when it distils on it); what the run records of it (endpoint.json), or None
    without one."""
    students = not isinstance(config, RunConfig)
    require_engine(config.run.method, config.uses_es, config.endpoint, students=students)
    check_model(config)
    check_log(config.log)  # [log] mlflow / tensorboard: their extra is installed, their store opens
    if students and not config.uses_skills:  # an agent run's endpoint is its teacher: only distilling asks it
        return None
    endpoint = open_endpoint(config.endpoint)
    return None if endpoint is None else endpoint.describe(endpoint.probe())


def check_model(config: RunConfig | AgentRunConfig, plan: bool = False) -> None:
    """A run whose engine would load a [model] path (--model) that names no checkpoint, or a max_len past
    its context, is refused (require_model), as the run and its --plan (`plan`) refuse it. --plan prepares
    nothing: the embedded model is checked only when it is prepared already."""
    if isinstance(config, RunConfig) and not needs_engine(config.uses_es, config.endpoint):
        return  # the endpoint answers every request: no checkpoint is loaded
    require_devices(config.distributed)
    if plan and config.model.path in EMBEDDED_NAMES and not list_models()[0].prepared:
        return
    require_model(config.model)


def create_store(config: RunConfig | AgentRunConfig) -> RunStore:
    """A new run directory holding the config (run.out, or a fresh name under runs/)."""
    if not config.run.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        method = path_name(config.run.method)
        label = task_label(config.run.task)
        config.run.out = str(Path("runs") / f"{label}-{method}-seed{config.run.seed}-{stamp}")
    return RunStore.create(config.run.out, dump_toml(as_dict(config)))


def has_ended(store: RunStore, events: list[dict] | None = None) -> bool:
    """Whether the run's log (`events`, else read when its summary is written) ends with its end and its
    summary is written: nothing is left to run."""
    return store.path("summary.json").exists() and ended(store.events() if events is None else events)


def restored_best(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict]) -> str | None:
    """`--resume` of a finished heuristic run whose best.py is gone writes it again (loop.restore_best: the
    derived files are the log's and the summary's, and a resume is what rebuilds them); the line saying
    so, or why it could not, for finished_table. None: nothing was missing."""
    summary = read_summary(store.path("summary.json"))
    if not isinstance(summary, SearchSummary) or not isinstance(config, RunConfig):
        return None
    try:
        source = restore_best(store, summary, events, lambda: heuristic_task(config.run.task).template)
    except OSError as exc:  # e.g. a read-only copy of the run: shown, not written
        return f"not restored: cannot write {store.path('best.py')}: {exc.strerror or exc}"
    if source is None or source.startswith("not restored"):
        return source
    return f"{store.path('best.py')} was missing: written again from {source}"


def rebuilt_derived(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict]) -> str | None:
    """`--resume` of a finished heuristic run writes again the files it derived from its log and lost
    (loop.rebuild_derived); its line for finished_table, None when nothing was lost."""
    if not isinstance(config, RunConfig):
        return None
    return rebuild_derived(store, config, events, lambda: heuristic_task(config.run.task))


def finished_table(store: RunStore, config: RunConfig | AgentRunConfig, events: list[dict],
                   budget: int | None = None, restored: str | None = None) -> str:
    """What `--resume` of a run that has ended (its log: `events`) prints: its table, read from its
    directory, with no engine loaded and no [endpoint] asked; a note when its config.toml was edited since,
    and `restored`, what restored_best said. `budget`: the `--budget N` given, which is the run's budget
    already (a larger one extends the run)."""
    summary = read_summary(store.path("summary.json"))
    table = agent_table(summary, store.dir) if isinstance(summary, AgentSummary) else run_table(summary, store.dir)
    if isinstance(summary, AgentSummary):
        more = ""
    elif budget is not None:
        more = f"; --budget {budget} is already the run's budget; give a larger N"
    else:
        more = "; `--budget N` gives it more evaluations"
    note = edited_note(store, config, events)
    return "\n".join([f"{store.dir} has finished: nothing to resume{more}", *([note] if note else []),
                      *([restored] if restored else []), table])


def handle(args: argparse.Namespace) -> int:
    check_seconds("--check-seconds", args.check_seconds)
    if args.plan:
        return handle_plan(args)
    try:
        config, store, events = resolve_run(args)
        if events is not None and not has_ended(store, events):
            # the log opened for appending, as the run opens it: a directory that cannot be written (a
            # read-only mount) is refused here, not once the engine has loaded
            with closed_unless_returned(store):
                store.event_writer().close()
    except KeyboardInterrupt:  # a resume stopped in its checks (the endpoint's probe) says how to go on, as later
        if not args.resume:
            raise
        print("\ninterrupted", file=sys.stderr)
        # an extension is written after the probe: the same command, --budget N included, goes on
        return _interrupted(RunStore(args.resume), "", 130, budget=args.budget)
    except OSError as exc:
        why = _refused(exc)
        if why is None:
            raise
        # nothing has run: refused (2) as a run directory that cannot be made is; a killed run that is
        # resumed has every finished step still in its directory
        return _interrupted(RunStore(args.resume), why, 2) if args.resume else 2
    with store:  # the run's writer lock let go as this command ends, however it ends
        return _go_on(args, config, store, events)


def _go_on(args: argparse.Namespace, config: RunConfig | AgentRunConfig, store: RunStore,
           events: list[dict] | None) -> int:
    """handle, once resolve_run has passed: a finished run shown, any other run (`events`: its log, None
    for a new one) run to its end; its exit status."""
    resuming = events is not None
    if resuming and has_ended(store, events):
        rebuilt = rebuilt_derived(store, config, events)  # first: candidates.jsonl may hold best.py's code
        restored = "\n".join(n for n in (rebuilt, restored_best(store, config, events)) if n) or None
        print(finished_table(store, config, events, args.budget, restored))
        return 0
    # a resume is not told how to resume: a refusal it meets later would be met again by the same command
    announced = f"resuming: {store.dir}" if resuming else \
        f"run directory: {store.dir}  (continue a killed run with `coevolve run --resume {store.dir}`)"
    print(announced, file=sys.stderr, flush=True)
    if isinstance(config, RunConfig) and not resuming:
        for warning in run_plan(config)["warnings"]:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
    try:
        return _execute(config, store, resuming, progress=not args.no_progress)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return _interrupted(store, "", 130)
    except ContextLengthError as exc:
        return _outgrown(store, exc)


def _execute(config: RunConfig | AgentRunConfig, store: RunStore, resuming: bool, progress: bool) -> int:
    if isinstance(config, RunConfig):
        try:
            task = heuristic_task(config.run.task)
        except UnknownTask as exc:
            raise UsageError(f"config error: run.task: {exc}") from None
        summary = _resumable(lambda: execute(config, store, task, progress=progress, resuming=resuming, on_note=say))
        if isinstance(summary, str):
            return _interrupted(store, summary)
        print(run_table(summary, store.dir))
    else:
        summary = _resumable(lambda: execute_agent(config, store, progress=progress, resuming=resuming,
                                                   on_note=say))
        if isinstance(summary, str):
            return _interrupted(store, summary)
        print(agent_table(summary, store.dir))
    return 0


ANSWERS = "once the endpoint answers"  # when a run its endpoint stopped goes on (_interrupted's why)
TIMED_OUT = ("once the endpoint answers (if it is up but slow, raise endpoint.timeout_s in the run's config.toml "
             "first: a resume takes it)")


def _resumable(run: Callable[[], RunSummary]) -> RunSummary | str:
    """The run's summary or, when something outside the run stopped it mid-run, when a resume goes on
    (`_interrupted`'s `why`), the one line printed: its endpoint stopped answering (or took a constraint
    back), or the file system refused a write (full, read-only: `_refused`). The run directory holds
    every finished step. Ctrl-C passes (the caller says how to go on); any other error is a bug's."""
    try:
        return run()
    except (EndpointError, ConstraintError) as exc:
        print(f"coevolve run: error: {exc}", file=sys.stderr)
        # a server that answers, only slowly: waiting changes nothing, a longer timeout does
        return TIMED_OUT if getattr(exc, "timed_out", False) else ANSWERS
    except OSError as exc:
        why = _refused(exc)
        if why is None:
            raise
        return why


def _refused(exc: OSError) -> str | None:
    """For a write the file system refused (durable.refused_write): its one line printed, and when a
    resume can go on; None, nothing printed, for any other OSError. A record cut short by a full disk is
    taken back or left as a torn tail, which a resume skips: the directory stays resumable."""
    line = refused_write(exc)
    if line is None:
        return None
    print(f"coevolve run: error: {line}", file=sys.stderr)
    if exc.errno in FULL:
        return "once there is room"
    return "once it can be written, or resume a copy of it in a writable place"


def _outgrown(store: RunStore, exc: ContextLengthError) -> int:
    """A prompt that outgrew the model's context stopped the run mid-way: the one line saying what to cut,
    then what becomes of the run directory, by who refused the prompt (`origin`, not the message's words).
    Exit 1, as other stops after the directory was written: 2 is for a command refused before anything was
    written."""
    print(f"coevolve run: error: {exc}", file=sys.stderr)
    if exc.origin != ENGINE:  # a server refused it: one serving a longer context lets a resume go on
        return _interrupted(store, "once its server takes longer prompts (--max-model-len); the other changes "
                                   "make a new run, since a resume keeps the config the run started with")
    print(f"every finished step is in {store.dir}; a resume keeps the config the run started with and would stop "
          "here again: make the change in a new run", file=sys.stderr)
    return 1


def _interrupted(store: RunStore, why: str = ANSWERS, code: int = 1, budget: int | None = None) -> int:
    again = f"coevolve run --resume {store.dir}" + ("" if budget is None else f" --budget {budget}")
    print(f"every finished step is in {store.dir}: continue with `{again}` {why}".rstrip(), file=sys.stderr)
    return code


def handle_plan(args: argparse.Namespace) -> int:
    """Print the plan of a run (heuristic or agent) without creating its directory."""
    if args.task_changed and not args.resume:
        raise UsageError("--task-changed goes with --resume")
    notes: list[str] = []  # a new run's, printed once the config has passed the run's checks
    if args.resume:
        store = open_resumed(args.resume)
        # what --resume will run: each file's original, or the run's copy (a changed task refused, as the
        # run refuses it); nothing is logged: --plan writes nothing
        remember_tasks(store.dir, "accept" if args.task_changed else "refuse", flag="--task-changed")
        remember_methods(store.dir)
        print_copy_notes()
        config = resumed_config(store)[1]
    elif args.config:  # checked as the run checks it (check_built)
        config = load_run_config(args.config, overrides_from(args), seconds=args.check_seconds, notes=notes)
    else:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    events = store.events() if args.resume else []  # --plan writes nothing: one read stays the log
    if args.resume:  # the run's refusals (resolve_run)
        check_resumable(store, config, events, args.budget)
    check_log(config.log)  # as the run does (check_generators), before it would print a plan
    if args.resume and args.budget is not None:  # the plan the run would go on with, nothing written
        before = config.run.budget
        config = extended(store, config, args.budget)
        # the steps it logged as done, then the ones it will take: the loop's rule (methods.step_count)
        plan = extension_plan(config, events, before)
        print(format_plan(plan))
        for line in layout_lines(config) + context_lines(config, plan):
            print(f"  {line}")
        return 0
    if not isinstance(config, RunConfig):  # an agent run: its rounds, after the checks the run makes
        if not args.resume:
            check_model(config, plan=True)
        lines = agent_plan_lines(config)
        print_notes(notes)
        print("\n".join(lines + [f"  {line}" for line in layout_lines(config)]))
        return 0
    if not args.resume:  # what the run would refuse is refused (a resumed run passed these when it started)
        check_model(config, plan=True)  # not the endpoint's probe: --plan asks no server
    plan = run_plan(config)
    print_notes(notes)
    print(format_plan(plan))
    for line in layout_lines(config) + context_lines(config, plan):
        print(f"  {line}")
    return 0


def layout_lines(config: RunConfig | AgentRunConfig) -> list[str]:
    """What --plan says of the engines the run would load ([distributed], plan.engine_lines): none for a
    heuristic search its endpoint answers alone; an agent run's agents always play on the engine."""
    needed = not isinstance(config, RunConfig) or needs_engine(config.uses_es, config.endpoint)
    return engine_lines(config.distributed, needed)


def context_lines(config: RunConfig, plan: dict) -> list[str]:
    """What --plan adds to the plan: the skill the run starts from, the caps that may end it early, and
    how each program is scored when that costs more than one scoring."""
    lines = [f"every prompt shows the skill {config.skill.start} (skill.start)"] if config.skill.start else []
    if config.start.programs:
        lines.append(f"the archive starts with {len(config.start.programs)} program(s) from start.programs, scored "
                     "before the first step and not charged")
    caps = {k: getattr(config.caps, k) for k in ("target", "patience", "completion_tokens", "wall_s", "money")}
    if any(v is not None for v in caps.values()):
        lines.append("may stop early, before a step, at: " + ", ".join(f"{k} {v:g}" for k, v in caps.items()
                                                                         if v is not None))
    if config.caps.prices:
        lines.append(completion_spend(config, plan["steps"]))
    if config.sandbox.seeds > 1:
        lines.append(f"each program is scored {config.sandbox.seeds} times, its random generators seeded "
                     f"0..{config.sandbox.seeds - 1}, and judged by the mean ([sandbox] seeds: "
                     f"{config.sandbox.seeds}x the sandbox time, no more of T)")
    return lines


def completion_spend(config: RunConfig, steps: list[dict]) -> str:
    """The most the endpoint's replies can cost (caps.prices) over the plan's `steps`: every request it
    answers at its max_tokens, at the dearest model's price. Prompts are not known before the run."""
    asked = sum(s["count"] for s in steps if s["operator"] != DISTILL and not s["perturbed"])
    # the analysts ask the endpoint when told to, or when it is the run's only generator
    to_endpoint = config.skill.teacher == "endpoint" or not needs_engine(config.uses_es, config.endpoint)
    analysts = sum(s["count"] for s in steps if s["operator"] == DISTILL) if to_endpoint else 0
    price = max(completion for _, completion in config.caps.prices.values())
    most = (asked * config.sampling.max_tokens + analysts * config.skill.max_tokens) * price / 1e6
    return (f"endpoint replies cost at most ${most:.4f}: {asked} requests x sampling.max_tokens "
            f"{config.sampling.max_tokens}" + (f" + {analysts} analysts x skill.max_tokens {config.skill.max_tokens}"
                                               if analysts else "")
            + f" at ${price:g} per 1M completion tokens; prompts extra, re-asks and retries too")


def execute(config: RunConfig, store: RunStore, task, *, progress: bool = True,
            resuming: bool = False, on_note: Callable[[str], None] | None = None) -> SearchSummary:
    """Build the endpoint (probed by check_generators), sandbox and (when ES or
    no endpoint needs one) the engine, then run the loop."""
    endpoint = open_endpoint(config.endpoint)
    engine = None
    if needs_engine(config.uses_es, config.endpoint):  # else the endpoint answers every request
        es_options = engine_options(config.es.noise, config.es.rank, es_population(config)) if config.uses_es else {}
        engine = pool.build_engine(config.model.path or None, config.distributed,
                                   dtype=engine_dtype(config.model.dtype, store.history_path),
                                   max_model_len=config.model.max_len, **es_options)
    bar = progress_bar(config, resuming) if progress else None
    try:
        with Sandbox.from_section(config.sandbox) as sandbox, Mirroring(config.log, store.dir, task.direction) as mirror:
            loop = SearchLoop(config, store, engine or endpoint, sandbox, task, endpoint=endpoint,
                              on_progress=mirror.after(bar.update_from if bar else None), on_note=on_note,
                              on_phase=bar.phase if bar else None)
            return loop.run()
    finally:
        if bar:
            bar.close()
        if engine is not None:
            engine.close()
