"""Per-step times of a paper preset, measured on this machine, and the cost of
the full comparison extrapolated from them.

Runs each method of the preset briefly (a few steps, real engine, real
sandbox), reads each run's timing.json, and prints seconds per evaluation for
every method, seconds per ES update, the seconds to score one heuristic on the
preset's test sets, and the estimated wall time of the whole preset
(every method x budget x seed, plus test scoring): evaluations of each
planned arm x that method's measured seconds per evaluation.

    python benchmarks/paper_step_times.py examples/paper/tsp.toml [--steps 1] [--max-tokens N] [--model DIR]

The estimate is linear: EoH prompts grow with the parents' code, so later
steps may cost more than the first ones measured here. docs/compare.md lists
figures measured with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def short_budget(plan: dict, steps: int) -> int:
    """A T covering `steps` batches (Sample) or generations (EoH), so that every
    kind of step of the method, perturbed ones included, is measured."""
    generations = {s["generation"] for s in plan["steps"] if s["generation"] >= 1}
    chosen = sorted(generations)[:steps]
    spent = sum(s["count"] for s in plan["steps"] if s["generation"] in chosen)
    init = sum(s["count"] for s in plan["steps"] if s["generation"] == 0)
    return spent + (0 if plan["outside_budget"] else init)


def main() -> int:
    from coevolve.commands.run import execute
    from coevolve.compare import score_files
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.plan import (RunSpec, _task_or_error, arm_plan, load_compare_config, planned_runs, run_config,
                               scored_sets)
    from coevolve.runstore import RunStore
    from coevolve.sandbox import Sandbox
    from tasks.registry import get_task

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset")
    parser.add_argument("--steps", type=int, default=1,
                        help="batches (Sample) or generations (EoH) measured per method (default 1)")
    parser.add_argument("--max-tokens", type=int, help="override sampling.max_tokens (shorter: a quicker look)")
    parser.add_argument("--model", help="HF checkpoint directory (default: the preset's [model])")
    parser.add_argument("--task", help="one of the preset's tasks (default: its first)")
    parser.add_argument("--methods", nargs="+", help="measure only these methods (the estimate then covers them only)")
    args = parser.parse_args()

    config = load_compare_config(args.preset)
    if args.max_tokens:
        config.sampling = replace(config.sampling, max_tokens=args.max_tokens)
    if args.model:
        config.model.path = args.model
    task = args.task or config.compare.tasks[0]
    budget = min(config.compare.budgets)
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods or config.compare.methods:
            plan = arm_plan(config, task, method, budget)
            spec = RunSpec(task, method, short_budget(plan, args.steps), 0)
            directory = Path(tmp) / method.replace("+", "_")
            run_cfg = run_config(config, spec, directory)
            if plan["m_multiplier"] is not None:  # keep the full budget's step sizes in the short run
                run_cfg.eoh = run_cfg.eoh.model_copy(update={"m_multiplier": plan["m_multiplier"], "generations": 0})
            store = RunStore.create(directory, dump_toml(as_dict(run_cfg)))
            summary = execute(run_cfg, store, get_task(task), progress=False)
            timing = json.loads((directory / "timing.json").read_text())
            updates = summary.es.updates if summary.es else 0
            measured[method] = {"evaluations": summary.evaluations, "total_s": timing["total_s"],
                                "per_evaluation_s": timing["total_s"] / summary.evaluations,
                                "es_update_s": timing.get("es_update_s", 0.0) / updates if updates else None,
                                "valid": summary.valid}
            print(f"{method:14s} {summary.evaluations:4d} evaluations in {timing['total_s']:7.1f} s: "
                  f"{measured[method]['per_evaluation_s']:6.2f} s per evaluation"
                  + (f", {measured[method]['es_update_s']:.2f} s per ES update" if updates else ""), flush=True)
        sets = scored_sets(config, _task_or_error(task, "task"))
        with Sandbox(workers=config.test.workers or None, timeout_s=config.test.timeout_s,
                     memory_mb=config.test.memory_mb) as sandbox:
            began = time.perf_counter()
            score_files([(get_task(task).template, task, split, size) for split, size in sets], config.test.limit,
                        sandbox)
            scoring_s = time.perf_counter() - began
    print(f"scoring one heuristic (the template) on {', '.join(f'{s}{n}' for s, n in sets)}: {scoring_s:.1f} s "
          "(references cached after the first time)")
    total = 0.0
    runs = [s for s in planned_runs(config) if s.task == task and s.method in measured]
    for spec in runs:
        plan = arm_plan(config, spec.task, spec.method, spec.budget)
        total += plan["evaluations"] * measured[spec.method]["per_evaluation_s"] + scoring_s
    print(f"estimate for {task} in {args.preset}: {len(runs)} runs, {total / 3600:.1f} h on this machine "
          "(" + ", ".join(f"{m} {v['per_evaluation_s']:.2f} s/eval" for m, v in measured.items()) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
