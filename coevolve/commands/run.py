"""`coevolve run CONFIG.toml [flags]` and `coevolve run --resume DIR`.

A config whose run.task is an agent task (tasks.registry.AGENT_TASKS: sudoku,
sudoku9, react_math) is an agent run (coevolve.agents.runconfig.AgentRunConfig,
run by coevolve.agents.es_agent.run_agent); any other task is a heuristic
search (coevolve.search.runconfig.RunConfig). The flags, the run directory,
the progress bar and --resume are the same for both."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.base.errors import UsageError
from coevolve.base.config import as_dict, build_config, dump_toml, read_toml
from coevolve.runstore import RunStore
from coevolve.search.runconfig import RunConfig

if TYPE_CHECKING:
    from coevolve.agents.runconfig import AgentRunConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a heuristic search (sample, eoh, +esopt) or an agent run "
                                          "(esopt, trace2skill, esopt+trace2skill) over one budget",
                              description=__doc__)
    p.add_argument("config", nargs="?", help="TOML config (see examples/)")
    p.add_argument("--method", help="heuristic tasks: sample | eoh | islands | map_elites | path/to/method.py[:Class] "
                                    "(a method file, docs/search.md), each also +esopt and +trace2skill "
                                    "(e.g. eoh+esopt+trace2skill); "
                                    "agent tasks: esopt | trace2skill | esopt+trace2skill")
    p.add_argument("--task", help="task: a name (see `coevolve tasks`), path/to/problem.py[:Class] or "
                                  "package.module:Class (docs/own_problem.md)")
    p.add_argument("--budget", type=int, help="heuristic tasks: evaluations, all candidates included; "
                                              "agent tasks: training episodes")
    p.add_argument("--seed", type=int)
    p.add_argument("--model", help="HF checkpoint directory (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--out", help="run directory (default: runs/<task>-<method>-seed<seed>-<time>)")
    p.add_argument("--noise", choices=["full", "lowrank"],
                   help="ES noise (es.noise). full: every parameter perturbed, members one after another: the "
                        "paper's setting, choose it to reproduce the paper. lowrank: each member a rank-r "
                        "perturbation of every linear weight, the whole population in one vLLM batch "
                        "(LoRA slots): several times faster per generation; embeddings and norms stay frozen")
    p.add_argument("--rank", type=int, help="ES low-rank rank (es.rank, default 1; vLLM pads 2..7 to 8, "
                                            "so 1 is the cheap one on CPU)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run in DIR (a killed or finished run, heuristic or agent)")
    p.add_argument("--task-changed", action="store_true",
                   help="--resume: go on although the run's task file changed since it started "
                        "(recorded as a task_changed event)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plan", action="store_true",
                   help="heuristic runs: print the plan (steps, operators, evaluations, ES updates) and exit")
    p.set_defaults(handler=handle)


def overrides_from(args: argparse.Namespace) -> dict[str, dict]:
    run = {k: getattr(args, k) for k in ("method", "task", "budget", "seed", "out") if getattr(args, k) is not None}
    out: dict[str, dict] = {"run": run} if run else {}
    if args.model is not None:
        out["model"] = {"path": args.model}
    es = {k: getattr(args, k) for k in ("noise", "rank") if getattr(args, k, None) is not None}
    if es:
        out["es"] = es
    return out


def config_class(raw: dict, overrides: dict[str, dict]) -> type:
    """AgentRunConfig when the (overridden) run.task is an agent task, else RunConfig."""
    from tasks.registry import is_agent_task

    run = raw.get("run")
    task = overrides.get("run", {}).get("task") or (run.get("task") if isinstance(run, dict) else None)
    if task is not None and is_agent_task(task):
        from coevolve.agents.runconfig import AgentRunConfig

        return AgentRunConfig
    return RunConfig


def resolve_config(args: argparse.Namespace) -> tuple[RunConfig | AgentRunConfig, RunStore, bool]:
    """The validated config (heuristic or agent) and its run directory; True when resuming."""
    if args.resume:
        if args.config or any(overrides_from(args).values()):
            raise UsageError("--resume takes only the run directory; its config.toml is the config")
        store = RunStore.open(args.resume)
        remember_task(store, args.task_changed)
        raw = read_toml(store.config_path)
        config = build_config(config_class(raw, {}), raw)
        if isinstance(config, RunConfig):
            from coevolve.search.loop import check_same_method

            check_same_method(store, config)
        check_generators(config)
        return config, store, True
    if not args.config:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    if args.task_changed:
        raise UsageError("--task-changed goes with --resume")
    overrides = overrides_from(args)
    raw = read_toml(args.config)
    canonical_task(raw, overrides, Path(args.config).parent)
    config = load_run_config(args.config, overrides)
    if isinstance(config, RunConfig):
        check_task(config.run.task)
        check_method_task(config)
    check_generators(config)
    store = create_store(config)
    from tasks.loader import record_tasks

    record_tasks(store.dir, [config.run.task])
    return config, store, False


def canonical_task(raw: dict, overrides: dict[str, dict], config_dir: Path) -> None:
    """Make a file task and a file method absolute in `overrides` (so the run
    directory's config names them from anywhere): a --task / --method path
    counts from the working directory, a TOML one from the TOML's folder."""
    from coevolve.search.methods import absolute_method
    from tasks.loader import absolute_spec

    run = raw.get("run") if isinstance(raw.get("run"), dict) else {}
    for key, absolute in (("task", absolute_spec), ("method", absolute_method)):
        flag = overrides.get("run", {}).get(key)
        spec, base = (flag, Path(".")) if flag else (run.get(key), config_dir)
        if isinstance(spec, str) and spec:
            resolved = absolute(spec, base)
            if resolved != spec:
                overrides.setdefault("run", {})[key] = resolved


def check_method_task(config: RunConfig) -> None:
    """What the run's method needs of the task (e.g. MAP-Elites' descriptors), before any directory exists."""
    from coevolve.search.methods import make_method
    from tasks.registry import heuristic_task

    make_method(config).check_task(heuristic_task(config.run.task))


def check_task(spec: str) -> None:
    """The cheap part of `coevolve check-task`, before any directory or
    engine exists: the task's shape; for a user's task (file, module,
    plugin) also its determinism and the template's decide/score in this
    process (no sandbox)."""
    from coevolve.commands.check_task import fail, problems
    from tasks.check import shape_problems
    from tasks.registry import UnknownTask, heuristic_task

    try:
        task = heuristic_task(spec)
    except UnknownTask as exc:
        raise UsageError(f"config error: run.task: {exc}") from None
    user_spec = getattr(task, "__coevolve_spec__", None)
    found = (problems(task, lambda: heuristic_task(user_spec), sandbox=False) if user_spec
             else shape_problems(task))
    if found:
        fail([f"{spec}: {line}" for line in found], "run")


def remember_task(store: RunStore, accept_changed: bool) -> None:
    """Re-find the run's file task (tasks.loader.remember_tasks); a changed
    file accepted with --task-changed is logged in the run's events."""
    from tasks.loader import remember_tasks

    changed = remember_tasks(store.dir, "accept" if accept_changed else "refuse", flag="--task-changed")
    if changed and store.events_path.exists() and store.events():
        with store.event_writer() as log:
            for event in changed:
                log.append(event)


def load_run_config(path: str, overrides: dict[str, dict]) -> RunConfig | AgentRunConfig:
    """The run config in `path` with the flags' overrides. A comparison config
    (one with [compare], such as examples/paper/*.toml) runs one of its arms:
    the first method, task, budget and seed it lists unless flags pick another."""
    raw = read_toml(path)
    if "compare" in raw and "run" not in raw:
        from coevolve.plan import comparison_run

        raw = comparison_run(raw)
        arm = {**raw["run"], **overrides.get("run", {})}
        print(f"{path} is a comparison; this is its arm {arm['method']} on {arm['task']}, budget "
              f"{arm['budget']}, seed {arm['seed']} (--method, --task, --budget, --seed pick another)",
              file=sys.stderr)
    for section, values in overrides.items():
        table = raw.setdefault(section, {})
        if not isinstance(table, dict):
            raise UsageError(f"config error: {section} must be a table")
        table.update(values)
    return build_config(config_class(raw, {}), raw)


def check_generators(config: RunConfig | AgentRunConfig) -> None:
    """Before the run directory exists: a run whose engine is not installed is
    refused, and the [endpoint] is probed (reachable, key taken, model served)."""
    from coevolve.engine.local import require_engine
    from coevolve.engine.openai_client import open_endpoint

    require_engine(config.run.method, config.uses_es, config.endpoint, students=not isinstance(config, RunConfig))
    endpoint = open_endpoint(config.endpoint)
    if endpoint is not None:
        endpoint.probe()


def create_store(config: RunConfig | AgentRunConfig) -> RunStore:
    """A new run directory holding the config (run.out, or a fresh name under runs/)."""
    if not config.run.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        from coevolve.search.methods import path_name  # a file method's path is no directory name
        from tasks.loader import task_label

        method = path_name(config.run.method)

        label = task_label(config.run.task)
        config.run.out = str(Path("runs") / f"{label}-{method}-seed{config.run.seed}-{stamp}")
    return RunStore.create(config.run.out, dump_toml(as_dict(config)))


def handle(args: argparse.Namespace) -> int:
    if args.plan:
        return handle_plan(args)
    config, store, resuming = resolve_config(args)
    verb = "resuming" if resuming else "run directory"
    print(f"{verb}: {store.dir}  (continue a killed run with `coevolve run --resume {store.dir}`)",
          file=sys.stderr, flush=True)
    if isinstance(config, RunConfig):
        from tasks.registry import UnknownTask, heuristic_task

        try:
            task = heuristic_task(config.run.task)
        except UnknownTask as exc:
            raise UsageError(f"config error: run.task: {exc}") from None
        summary = _resumable(lambda: execute(config, store, task, progress=not args.no_progress, resuming=resuming))
        if summary is None:
            return _interrupted(store)
        print_table(summary, store)
    else:
        summary = _resumable(lambda: execute_agent(config, store, progress=not args.no_progress, resuming=resuming))
        if summary is None:
            return _interrupted(store)
        print_agent_table(summary, store)
    return 0


def _resumable(run) -> dict | None:
    """The run's summary, or None when its endpoint stopped answering (or took
    a constraint back) mid-run: the one line is printed; the run directory
    holds every finished step."""
    from coevolve.engine.base import ConstraintError
    from coevolve.engine.openai_client import EndpointError

    try:
        return run()
    except (EndpointError, ConstraintError) as exc:
        print(f"coevolve run: error: {exc}", file=sys.stderr)
        return None


def _interrupted(store: RunStore) -> int:
    print(f"every finished step is in {store.dir}: continue with `coevolve run --resume {store.dir}` "
          "once the endpoint answers", file=sys.stderr)
    return 1


def handle_plan(args: argparse.Namespace) -> int:
    """Print the plan of a heuristic run without creating its directory."""
    from coevolve.search.methods import format_plan, run_plan

    if args.resume:
        path, overrides = RunStore.open(args.resume).config_path, {}
    elif args.config:
        path, overrides = args.config, overrides_from(args)
    else:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    config = load_run_config(str(path), overrides)
    if not isinstance(config, RunConfig):
        raise UsageError("--plan is for heuristic runs; an agent run plays agent.population x agent.batch "
                         "episodes per round until run.budget is spent")
    print(format_plan(run_plan(config)))
    return 0


def execute(config: RunConfig, store: RunStore, task, *, progress: bool = True, resuming: bool = False) -> dict:
    """Build the endpoint, sandbox and (when ES or no endpoint needs one) the
    engine, then run the loop."""
    from coevolve.base.durable import atomic_write_json
    from coevolve.engine.local import needs_engine
    from coevolve.engine.openai_client import open_endpoint
    from coevolve.engine.pool import build_engine
    from coevolve.sandbox import Sandbox
    from coevolve.search.loop import SearchLoop
    from coevolve.search.progress import progress_bar
    from coevolve.es import engine_options
    from coevolve.search.methods import es_population

    endpoint = open_endpoint(config.endpoint)
    if endpoint is not None:
        atomic_write_json(store.path("endpoint.json"), endpoint.describe(endpoint.probe()))
    engine = None
    if needs_engine(config.uses_es, config.endpoint):  # else the endpoint answers every request
        es_options = engine_options(config.es.noise, config.es.rank, es_population(config)) if config.uses_es else {}
        engine = build_engine(config.model.path or None, config.distributed, **es_options)
    bar = progress_bar(config, resuming) if progress else None
    try:
        with Sandbox.from_section(config.sandbox) as sandbox:
            loop = SearchLoop(config, store, engine or endpoint, sandbox, task, endpoint=endpoint,
                              on_progress=bar.update_from if bar else None)
            return loop.run()
    finally:
        if bar:
            bar.close()
        if engine is not None:
            engine.close()


def execute_agent(config: AgentRunConfig, store: RunStore, engine: Any = None, *, progress: bool = True,
                  resuming: bool = False) -> dict:
    """Run (or resume) an agent config in `store`. A given `engine` is used and
    left open (its weights keep the run's updates: reset it afterwards);
    otherwise one is built and closed."""
    from coevolve.agents.es_agent import check_run_dir, run_agent
    from coevolve.agents.tools import SandboxTool
    from coevolve.engine.openai_client import open_endpoint
    from coevolve.search.progress import progress_bar

    check_run_dir(store, config)
    tool = SandboxTool()
    task = config.build_task(tool=tool)
    endpoint = open_endpoint(config.endpoint)
    own_engine = engine is None
    if own_engine:
        from coevolve.engine.pool import build_engine

        from coevolve.es import engine_options

        es_options = (engine_options(config.es.noise, config.es.rank, config.agent.population)
                      if config.uses_es else {})
        engine = build_engine(config.model.path or None, config.distributed, **es_options)
    bar = progress_bar(config, resuming, unit="episode") if progress else None
    try:
        return run_agent(config, store, engine, task, endpoint=endpoint,
                         on_progress=bar.update_agent if bar else None)
    finally:
        if bar:
            bar.close()
        tool.close()
        if own_engine:
            engine.close()


def print_agent_table(summary: dict, store: RunStore) -> None:
    from coevolve.report import agent_table

    print(agent_table(summary, store.dir))


def print_table(summary: dict, store: RunStore) -> None:
    from coevolve.report import run_table

    print(run_table(summary, store.dir))
