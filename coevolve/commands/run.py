"""`coevolve run CONFIG.toml [flags]` and `coevolve run --resume DIR`.

A config whose run.task is an agent task (tasks.registry.AGENT_TASKS: sudoku,
sudoku9, react_math) is an agent run (coevolve.agents.runconfig.AgentRunFile,
run by coevolve.agents.es_agent.run_agent); any other task is a heuristic
search (coevolve.search.runconfig.RunConfig). The flags apply to both."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevolve.cli import UsageError
from coevolve.config import as_dict, build_config, dump_toml, load_config, read_toml
from coevolve.runstore import RunStore
from coevolve.search.runconfig import RunConfig

if TYPE_CHECKING:
    from coevolve.agents.runconfig import AgentRunFile


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a heuristic search (sample, eoh, +esopt) or an agent run "
                                          "(esopt, trace2skill, esopt+trace2skill) over one budget",
                              description=__doc__)
    p.add_argument("config", nargs="?", help="TOML config (see examples/)")
    p.add_argument("--method", help="heuristic tasks: sample | eoh | sample+esopt | eoh+esopt; "
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
                   help="continue the heuristic run in DIR (a killed or finished run); not for agent runs yet")
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
    """AgentRunFile when the (overridden) run.task is an agent task, else RunConfig."""
    from tasks.registry import is_agent_task

    run = raw.get("run")
    task = overrides.get("run", {}).get("task") or (run.get("task") if isinstance(run, dict) else None)
    if task is not None and is_agent_task(task):
        from coevolve.agents.runconfig import AgentRunFile

        return AgentRunFile
    return RunConfig


def resolve_config(args: argparse.Namespace) -> tuple[RunConfig, RunStore, bool]:
    """The validated heuristic config and its run directory; True when resuming."""
    if args.resume:
        if args.config or any(overrides_from(args).values()):
            raise UsageError("--resume takes only the run directory; its config.toml is the config")
        store = RunStore.open(args.resume)
        raw = read_toml(store.config_path)
        if config_class(raw, {}) is not RunConfig:
            raise UsageError(f"--resume is not supported for agent runs yet ({store.dir} is an agent run); "
                             "start a new run with another --out")
        return build_config(RunConfig, raw), store, True
    if not args.config:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    config = load_config(RunConfig, args.config, overrides_from(args))
    return config, create_store(config), False


def create_store(config: RunConfig | AgentRunFile) -> RunStore:
    """A new run directory holding the config (run.out, or a fresh name under runs/)."""
    if not config.run.out:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        method = config.run.method.replace("+", "_")
        config.run.out = str(Path("runs") / f"{config.run.task}-{method}-seed{config.run.seed}-{stamp}")
    return RunStore.create(config.run.out, dump_toml(as_dict(config)))


def handle(args: argparse.Namespace) -> int:
    if args.config and not args.resume:
        overrides = overrides_from(args)
        if config_class(read_toml(args.config), overrides) is not RunConfig:
            return handle_agent(args, overrides)
    if args.plan:
        return handle_plan(args)
    config, store, resuming = resolve_config(args)
    from tasks.registry import get_task

    try:
        task = get_task(config.run.task)
    except KeyError as exc:
        raise UsageError(f"config error: run.task: {exc.args[0]}") from None
    verb = "resuming" if resuming else "run directory"
    print(f"{verb}: {store.dir}  (continue a killed run with `coevolve run --resume {store.dir}`)",
          file=sys.stderr, flush=True)
    summary = execute(config, store, task, progress=not args.no_progress, resuming=resuming)
    print_table(summary, store)
    return 0


def handle_plan(args: argparse.Namespace) -> int:
    """Print the plan of a heuristic run without creating its directory."""
    from coevolve.search.methods import format_plan, run_plan

    if args.resume:
        config = build_config(RunConfig, read_toml(RunStore.open(args.resume).config_path))
    elif args.config:
        config = load_config(RunConfig, args.config, overrides_from(args))
    else:
        raise UsageError("give a CONFIG.toml (see examples/) or --resume DIR")
    print(format_plan(run_plan(config)))
    return 0


def execute(config: RunConfig, store: RunStore, task, *, progress: bool = True, resuming: bool = False) -> dict:
    """Build the engine, sandbox and proposer, then run the loop."""
    from coevolve.distributed import build_engine
    from coevolve.sandbox import Sandbox
    from coevolve.search.loop import SearchLoop
    from coevolve.search.progress import progress_bar

    remote = None
    if config.proposer.base_url:
        from coevolve.engine.openai_client import OpenAIGenerator

        remote = OpenAIGenerator(config.proposer.base_url, config.proposer.model,
                                 api_key_env=config.proposer.api_key_env, concurrency=config.proposer.concurrency)
    from coevolve.es import engine_options

    es_options = engine_options(config.es.noise, config.es.rank, config.es.population) if config.uses_es else {}
    engine = build_engine(config.model.path or None, config.distributed, **es_options)
    bar = progress_bar(config, resuming) if progress else None
    try:
        with Sandbox(workers=config.sandbox.workers or None, timeout_s=config.sandbox.timeout_s,
                     memory_mb=config.sandbox.memory_mb) as sandbox:
            loop = SearchLoop(config, store, engine, sandbox, task, remote=remote,
                              on_progress=bar.update_from if bar else None)
            return loop.run()
    finally:
        if bar:
            bar.close()
        engine.close()


def handle_agent(args: argparse.Namespace, overrides: dict[str, dict]) -> int:
    from coevolve.agents.runconfig import AgentRunFile

    config = load_config(AgentRunFile, args.config, overrides)
    task = config.build_task()  # before the run directory exists: a bad problems file leaves nothing behind
    store = create_store(config)
    print(f"run directory: {store.dir}  (agent run: {config.run.method} on {config.run.task}, "
          f"{config.run.budget} training episodes)", file=sys.stderr, flush=True)
    summary = execute_agent(config, store, task)
    print_agent_table(summary, store)
    return 0


def execute_agent(config: AgentRunFile, store: RunStore, task: Any = None, engine: Any = None) -> dict:
    """Run an agent config (coevolve.agents.runconfig.AgentRunFile) in `store`.
    A given `engine` is used and left open (its weights keep the run's
    updates: reset it afterwards); otherwise one is built and closed."""
    from coevolve.agents.es_agent import run_agent

    task = task if task is not None else config.build_task()
    teacher = None
    if config.teacher.base_url:
        from coevolve.engine.openai_client import OpenAIGenerator

        teacher = OpenAIGenerator(config.teacher.base_url, config.teacher.model,
                                  api_key_env=config.teacher.api_key_env, concurrency=config.teacher.concurrency)
    own_engine = engine is None
    if own_engine:
        from coevolve.distributed import build_engine

        from coevolve.es import engine_options

        es_options = (engine_options(config.es.noise, config.es.rank, config.agent.population)
                      if config.uses_es else {})
        engine = build_engine(config.model.path or None, config.distributed, **es_options)
    try:
        return run_agent(engine, task, config.agent_config(), store.dir, es_config=config.es_config(),
                         skills=config.seed_skills(), teacher=teacher)
    finally:
        close = getattr(task, "close", None)  # react_math's sandbox
        if close is not None:
            close()
        if own_engine:
            engine.close()


def print_agent_table(summary: dict, store: RunStore) -> None:
    first, last = summary["eval_first"], summary["eval_last"]
    ledger = summary["ledger"]

    def scores(e: dict) -> str:
        progress = f", progress {e['progress']:.3f}" if "progress" in e else ""
        return f"reward {e['mean_reward']:.3f}{progress} (round {e['round']})"

    rows = [
        ("method", summary["method"]),
        ("task", summary["task"]),
        ("rounds", str(summary["rounds"])),
        ("episodes", f"{ledger['used']} / {ledger['budget']}"),
        ("held-out before", scores(first)),
        ("held-out after", scores(last)),
        ("best held-out reward", f"{summary['best_eval_reward']:.3f}"),
        ("distilled skill", summary["skill"] or "-"),
    ]
    if "checksum" in summary:
        rows.append(("weights checksum", str(summary["checksum"])))
    rows.append(("run directory", str(store.dir)))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def print_table(summary: dict, store: RunStore) -> None:
    from coevolve.report import run_table

    print(run_table(summary, store.dir))
