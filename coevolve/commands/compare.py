"""`coevolve compare CONFIG.toml [--out DIR] [--plan] [--allow-unmatched] [--no-progress]`: run a
budget-matched comparison (methods × tasks × budgets × seeds), score each run's
best heuristic on the test sets (or, with `[compare] kind = "agent"`, each agent
arm on the held-out problems) and write the report. Rerunning it continues
where it stopped. A comparison refused by a check writes nothing. `--plan`
prints what would run after the checks the comparison makes (its tasks, as
check-task's cheap part; each arm against each task) and checks that each
+ESOpt arm spends its evaluations as its base method does, without running or
writing anything."""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from coevolve.agents.es_agent import run_seed_skills
from coevolve.agents.runconfig import AgentRunConfig
from coevolve.base.config import keys_under
from coevolve.base.errors import plural
from coevolve.commands.run import CHECK_SECONDS, add_check_seconds, check_agent_task, check_model, check_task
from coevolve.compare import ArmError, check_root, default_root, run_comparison, runs_held
from coevolve.engine.local import needs_engine
from coevolve.plan import (AgentCompareConfig, RunSpec, agent_run_config, agent_runs, arm_lines, arm_plans, arm_runs,
                           arm_settings, arm_spend, check_arms, compared_pairs, engine_lines, load_compare_config,
                           planned_runs, run_state, skill_warnings, spend_warnings, structural_differences,
                           test_set_lines, unmatched)
from coevolve.report import render_comparison
from coevolve.report.rendering import unpaired_line
from coevolve.search import methods as registry
from coevolve.search.methods import format_plan, remember_methods
from tasks.loader import remember_tasks


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="budget-matched method comparison with test scores, tables and plots",
                              description=__doc__)
    p.add_argument("config", help="comparison TOML (see examples/paper/, examples/compare_*.toml, docs/compare.md)")
    p.add_argument("--out", help="comparison directory (default: compare.out, else runs/compare-<time>)")
    p.add_argument("--plan", action="store_true",
                   help="print each arm's plan and the structural check, after the checks the comparison makes (its "
                        "tasks; each arm against each task); run and write nothing")
    p.add_argument("--allow-unmatched", action="store_true",
                   help="compare +ESOpt arms with base methods whose plans differ (the report says so)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_check_seconds(p)
    p.set_defaults(handler=handle)


def compare_and_report(config: Any, root: str | Path, *, engine: Any = None,
                       log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Run and score the comparison, then render its report."""
    root = run_comparison(config, root, engine=engine, log=log, progress=progress)
    render_comparison(root)
    return root


def check_tasks(config: Any, seconds: float = CHECK_SECONDS) -> None:
    """What a comparison checks of its tasks before the LLM loads and before anything is written, and
    its `--plan` alike: each heuristic task through the cheap part of check-task; a user's agent
    environment through check-task's agent checks, with each task's [task.<name>] options, and every
    agent run's seed skills ([skills] paths, a named arm's own too: `check_seed_skills`)."""
    if not isinstance(config, AgentCompareConfig):
        for spec in config.compare.tasks:
            check_task(spec, seconds)
        return
    for spec in {s.task: s for s in agent_runs(config, seeds=config.compare.seeds[:1])}.values():
        check_agent_task(agent_run_config(config, spec, Path("plan")), seconds)
    check_seed_skills(config)


def check_seed_skills(config: AgentCompareConfig) -> None:
    """Each agent run's [skills] folders read as the comparison reads them before anything is written
    (coevolve.compare.run_agent_comparison: `seed_skills`, or for a run started already in
    compare.out, the texts its log pinned, `run_seed_skills`), the base arm's too: a folder that is not
    a valid skill refuses the comparison and its --plan alike, named where the TOML wrote it (a named
    arm's skills.paths under compare.arms.NAME)."""
    root = Path(config.compare.out) if config.compare.out else None
    read: set[tuple[Any, ...]] = set()
    for spec in agent_runs(config):
        directory = spec.directory(root) if root is not None else None
        run_cfg = agent_run_config(config, spec, directory or Path("plan"))
        own = "paths" in arm_settings(config, spec.method).get("skills", {})  # else the comparison's [skills]
        with keys_under(f"compare.arms.{spec.method}") if own else nullcontext():
            if directory is not None and run_state(directory) != "new":
                run_seed_skills(directory, run_cfg.skills.paths)  # what its log pinned, if it did
            elif (tuple(run_cfg.skills.paths), own) not in read:  # each set of folders read once
                read.add((tuple(run_cfg.skills.paths), own))
                run_cfg.seed_skills()
    if "base" in config.compare.methods:
        AgentRunConfig(skills=config.skills).seed_skills()  # the base arm's, read when it is scored


def held_line(root: Path | None, held: Mapping[RunSpec, str], planned: int) -> str | None:
    """What `--plan` says of the `planned` runs an existing --out (`root`) holds already (`held`, as
    `runs_held` found them, the run's own check); None: it holds none."""
    if not held:
        return None
    finished = sum(state == "finished" for state in held.values())
    partial = len(held) - finished
    return (f"{root} holds {finished} of them finished (skipped)"
            + (f" and {partial} started (resumed)" if partial else "") + f"; {planned - len(held)} to run")


def print_plan(config: Any, runs: Mapping[RunSpec, Any], root: Path | None = None) -> None:
    """What each arm would run, after the checks the comparison makes of each arm against each task
    (`check_arms`) on `runs`, each arm's run config at each task and budget (`plan_runs`: all built
    before a line is printed, so a budget the comparison refuses, such as one too small for a generation
    under eoh.m_multiplier = 0, is refused with its one line and no plan), and of the runs `root` (the
    comparison directory; None: none checked) holds already (`runs_held`: one under other settings
    refuses, as the run does); the warnings the comparison logs before it runs are in them (format_plan,
    spend_warnings); nothing is written."""
    check_arms(config, runs)
    held = runs_held(config, root) if root is not None else {}
    plans = arm_plans(runs)
    c = config.compare
    planned = len(planned_runs(config))
    print(f"{plural(planned, 'run')}: {plural(len(c.methods), 'method')} x {plural(len(c.tasks), 'task')} x "
          f"{plural(len(c.budgets), 'budget')} x {plural(len(c.seeds), 'seed')} ({', '.join(map(str, c.seeds))})")
    line = held_line(root, held, planned)
    if line:
        print(line)
    print("test sets:")
    for line in test_set_lines(config):
        print(f"  {line}")
    shared = [f"free re-asks: {config.accounting.parse_retries} parse, {config.accounting.clone_retries} clone",
              f"start: {config.start.program}"]
    if any(run.uses_es for run in runs.values()):  # σ's schedule means nothing to a comparison with no ES arm
        es = config.es
        shared.insert(0, f"sigma: cosine {es.sigma:g} -> {es.sigma_end:g}, one step per {es.sigma_steps}")
    print("; ".join(shared))
    # the one engine the arms share (_Resources), needed when one of them runs ES or has no endpoint
    for line in engine_lines(config.distributed, any(needs_engine(r.uses_es, r.endpoint) for r in runs.values())):
        print(line)
    lines = arm_lines(config)
    if lines:
        print("named arms:")
        for line in lines:
            print(f"  {line}")
    # which pairs the report will give a Δ row and Welch's verdict, and which methods it will not set
    # against each other (compare.baseline adds pairs): known before hours are spent
    pairs = compared_pairs(config)
    print("verdicts for: " + ("; ".join(f"{registry.label(v)} vs {registry.label(b)}" for b, v in pairs)
                              if pairs else "no pair of methods"))
    alone = unpaired_line(config)
    if alone:
        print(f"  {alone}")
    for (_, method, _), plan in plans.items():
        print()
        if method in c.arms:
            print(f"named arm {method}:")
        print(format_plan(plan))
    print()
    # as the comparison logs them: arms that spend different evaluations, each arm's starting skill
    for warning in spend_warnings(plans, arm_spend(config, plans)) + skill_warnings(runs):
        print(f"warning: {warning}")
    differences = structural_differences(config)
    if differences:
        print("structural check: NOT matched" + (" (allowed)" if c.allow_unmatched else ""))
        for difference in differences:
            print(f"  {difference}")
        if not c.allow_unmatched:  # the comparison would refuse it: so does its plan, after showing why
            sys.stdout.flush()
            raise unmatched(differences)
    elif registry.pairs(c.methods):
        print("structural check: every +ESOpt arm spends the same evaluations per generation and per operator "
              "as its base method")
    else:
        print("structural check: no method here with its +esopt variant (an M and M+esopt pair), nothing to match "
              "(each arm's plan is above)")


def print_agent_plan(config: Any, root: Path) -> None:
    """An agent comparison's plan, after the check of the runs `root` holds already (`runs_held`), as
    its run checks them."""
    held = runs_held(config, root)
    c, e = config.compare, config.eval
    planned = len(agent_runs(config))
    print(f"{plural(planned, 'training run')}: {plural(sum(m != 'base' for m in c.methods), 'method')} x "
          f"{plural(len(c.tasks), 'task')} x {plural(len(c.budgets), 'budget')} x {plural(len(c.seeds), 'seed')}; "
          f"episodes per run: {', '.join(map(str, c.budgets))}")
    line = held_line(root, held, planned)
    if line:
        print(line)
    print(f"every arm ({', '.join(c.methods)}) scored on {e.problems} held-out problems x k = {e.k} attempts "
          f"per task and seed ({'constrained' if e.constrained else 'free'} decoding, {e.max_tokens} tokens a turn)")
    for line in arm_lines(config):
        print(f"named arm {line}")
    for line in engine_lines(config.distributed):  # the agents play on it, whatever the arm
        print(line)


def plan_runs(config: Any) -> dict[RunSpec, Any]:
    """The run configs `--plan` checks, each built once: a heuristic comparison's arms on each task at
    each budget (`arm_runs`), an agent comparison's training runs of its first seed."""
    if isinstance(config, AgentCompareConfig):
        return {spec: agent_run_config(config, spec, Path("plan"))
                for spec in agent_runs(config, seeds=config.compare.seeds[:1])}
    return arm_runs(config)


def check_models(runs: Iterable[Any]) -> None:
    """The [model] path each run would load, checked as `coevolve run --plan` checks it (check_model):
    the comparison refuses a missing checkpoint when it starts its engine, and its plan says so first."""
    for run in runs:
        check_model(run, plan=True)


def handle(args: argparse.Namespace) -> int:
    config = load_compare_config(args.config, args.out)
    agents = isinstance(config, AgentCompareConfig)
    if args.allow_unmatched:
        config.compare.allow_unmatched = True
    # the folder the comparison would be made in, checked first by the run and its --plan alike
    out = config.compare.out or str(default_root(agents))
    check_root(Path(out))
    if args.plan:
        # the comparison's own first checks (below): a file task or method edited since it started is refused
        remember_tasks(Path(out), owner="comparison")
        check_tasks(config, args.check_seconds)
        remember_methods(Path(out), owner="comparison")
        runs = plan_runs(config)
        check_models(runs.values())
        print_agent_plan(config, Path(out)) if agents else print_plan(config, runs, Path(out))
        return 0
    config.compare.out = out
    # nothing is written until every check has passed: a rerun's file tasks and methods refused if changed
    # since the comparison started (these read its records), then the tasks checked
    remember_tasks(Path(out), owner="comparison")
    check_tasks(config, args.check_seconds)
    remember_methods(Path(out), owner="comparison")
    rerun = f"every finished run is in {out}: continue with `coevolve compare {args.config} --out {out}`"
    try:
        root = compare_and_report(config, out, progress=not args.no_progress)
    except KeyboardInterrupt:  # the rerun must name the folder: without --out it would start a new one
        print(f"\ninterrupted\n{rerun}", file=sys.stderr)
        return 130
    except ArmError as exc:  # an endpoint stopped answering, a constraint refused: the arm it stopped, how to go on
        print(f"coevolve compare: error: {exc}\n{rerun} {exc.when}", file=sys.stderr)
        return 1
    print(f"report: {root / 'report.md'}")
    return 0
