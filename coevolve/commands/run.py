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
from coevolve.base.config import as_dict, build_config, dump_toml, load_config, read_toml
from coevolve.runstore import RunStore
from coevolve.search.runconfig import RunConfig

if TYPE_CHECKING:
    from coevolve.agents.runconfig import AgentRunConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a heuristic search (sample, eoh, +esopt) or an agent run "
                                          "(esopt, trace2skill, esopt+trace2skill) over one budget",
                              description=__doc__)
    p.add_argument("config", nargs="?", help="TOML config (see examples/)")
    p.add_argument("--method", help="heuristic tasks: sample | eoh | sample+esopt | eoh+esopt, each also "
                                    "+trace2skill (e.g. eoh+esopt+trace2skill); "
                                    "agent tasks: esopt | trace2skill | esopt+trace2skill")
    p.add_argument("--task", help="task name (see `coevolve tasks`)")
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
        raw = read_toml(store.config_path)
        return build_config(config_class(raw, {}), raw), store, True
    if not args.config:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    overrides = overrides_from(args)
    config = load_config(config_class(read_toml(args.config), overrides), args.config, overrides)
    return config, create_store(config), False


def create_store(config: RunConfig | AgentRunConfig) -> RunStore:
    """A new run directory holding the config (run.out, or a fresh name under runs/)."""
    if not config.run.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        method = config.run.method.replace("+", "_")
        config.run.out = str(Path("runs") / f"{config.run.task}-{method}-seed{config.run.seed}-{stamp}")
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
        summary = execute(config, store, task, progress=not args.no_progress, resuming=resuming)
        print_table(summary, store)
    else:
        summary = execute_agent(config, store, progress=not args.no_progress, resuming=resuming)
        print_agent_table(summary, store)
    return 0


def handle_plan(args: argparse.Namespace) -> int:
    """Print the plan of a heuristic run without creating its directory."""
    from coevolve.search.methods import format_plan, run_plan

    if args.resume:
        path, overrides = RunStore.open(args.resume).config_path, {}
    elif args.config:
        path, overrides = args.config, overrides_from(args)
    else:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    if config_class(read_toml(path), overrides) is not RunConfig:
        raise UsageError("--plan is for heuristic runs; an agent run plays agent.population x agent.batch "
                         "episodes per round until run.budget is spent")
    print(format_plan(run_plan(load_config(RunConfig, path, overrides))))
    return 0


def execute(config: RunConfig, store: RunStore, task, *, progress: bool = True, resuming: bool = False) -> dict:
    """Build the engine, sandbox and endpoint, then run the loop."""
    from coevolve.engine.openai_client import open_endpoint
    from coevolve.engine.pool import build_engine
    from coevolve.sandbox import Sandbox
    from coevolve.search.loop import SearchLoop
    from coevolve.search.progress import progress_bar
    from coevolve.es import engine_options
    from coevolve.search.methods import es_population

    endpoint = open_endpoint(config.endpoint)
    es_options = engine_options(config.es.noise, config.es.rank, es_population(config)) if config.uses_es else {}
    engine = build_engine(config.model.path or None, config.distributed, **es_options)
    bar = progress_bar(config, resuming) if progress else None
    try:
        with Sandbox.from_section(config.sandbox) as sandbox:
            loop = SearchLoop(config, store, engine, sandbox, task, endpoint=endpoint,
                              on_progress=bar.update_from if bar else None)
            return loop.run()
    finally:
        if bar:
            bar.close()
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
