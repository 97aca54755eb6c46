"""Agent comparisons: methods x tasks x seeds over one episode budget, scored
by the held-out protocol (coevolve.agents.evaluate) and rendered as Mean@k /
Pass@k tables with 95% intervals and a plot.

```toml
[compare]
kind = "agent"
methods = ["base", "esopt", "trace2skill", "esopt+trace2skill"]
tasks = ["sudoku"]
seeds = [0, 1]
budget = 128            # training episodes per run
[eval]
problems = 100          # the fixed held-out split (eval split, seed 0), the same for every seed and method
k = 4
constrained = true      # decode held-out turns under the task's action format
max_tokens = 12
[task.sudoku]           # options of each task
masked = 1
[agent] / [es] / [model] / ...   copied into every training run's config (see `coevolve run`)
```

Each (task, method, seed) with a training method is one `coevolve run`
directory under the comparison root (rerunning skips finished runs); `base`
needs no run. The method's arm is scored on the held-out set: base = the
checkpoint, esopt = its ES-tuned weights, trace2skill = its distilled skill,
esopt+trace2skill = both. Per method the table pools the per-problem scores
of all seeds (the interval covers problems and seeds) and lists each seed's
Mean@k next to it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from coevolve.base.durable import atomic_write_json, atomic_write_text
from coevolve.search.plot import save_figure

from coevolve.stats import Interval, mean_interval

METHODS = ("base", "esopt", "trace2skill", "esopt+trace2skill")
ARM_OF = {"base": "base", "esopt": "esopt", "trace2skill": "skill", "esopt+trace2skill": "both"}
COMPARE_SECTIONS = ("compare", "eval")


@dataclass
class AgentCompare:
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    tasks: list[str] = field(default_factory=lambda: ["sudoku"])
    seeds: list[int] = field(default_factory=lambda: [0])
    budget: int = 128
    problems: int = 100
    k: int = 4
    constrained: bool = True
    max_tokens: int = 12
    task_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_sections: dict[str, Any] = field(default_factory=dict)  # [agent], [es], ... for every run

    def check(self) -> None:
        from tasks.registry import is_agent_task

        for name, values in (("methods", self.methods), ("tasks", self.tasks), ("seeds", self.seeds)):
            if not values or len(set(values)) != len(values):
                raise ValueError(f"compare.{name} must list at least one value, none twice (got {values})")
        for method in self.methods:
            if method not in METHODS:
                raise ValueError(f"compare.methods: {method!r} is not one of {', '.join(METHODS)}")
        for task in self.tasks:
            if not is_agent_task(task):
                raise ValueError(f"compare.tasks: {task!r} is not an agent task")
        for extra in self.task_options:
            if extra not in self.tasks:
                raise ValueError(f"[task.{extra}]: {extra!r} is not in compare.tasks")
        for key in ("budget", "problems", "k", "max_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"{'compare' if key == 'budget' else 'eval'}.{key} must be >= 1 "
                                 f"(got {getattr(self, key)})")


def is_agent_compare(raw: dict) -> bool:
    return raw.get("compare", {}).get("kind") == "agent"


def from_toml(raw: dict) -> AgentCompare:
    """The comparison from a parsed TOML; unknown keys are errors naming them."""
    compare = dict(raw.get("compare", {}))
    compare.pop("kind", None)
    evaluation = dict(raw.get("eval", {}))
    known_compare = {"methods", "tasks", "seeds", "budget"}
    known_eval = {"problems", "k", "constrained", "max_tokens"}
    for section, values, known in (("compare", compare, known_compare), ("eval", evaluation, known_eval)):
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{section}.{unknown[0]} is not a known key (known: {', '.join(sorted(known))})")
    task_options = raw.get("task", {})
    if not all(isinstance(v, dict) for v in task_options.values()):
        raise ValueError("[task] must hold one table per task, e.g. [task.sudoku] masked = 1")
    run_sections = {k: v for k, v in raw.items() if k not in (*COMPARE_SECTIONS, "task", "run")}
    config = AgentCompare(**compare, **evaluation, task_options=dict(task_options), run_sections=run_sections)
    config.check()
    return config


def run_config(config: AgentCompare, task: str, method: str, seed: int) -> dict:
    """One training run's `coevolve run` config as a TOML-ready dict."""
    return {"run": {"method": method, "task": task, "budget": config.budget, "seed": seed},
            "task": dict(config.task_options.get(task, {})), **config.run_sections}


def run_dir(root: Path, task: str, method: str, seed: int) -> Path:
    return root / task / method.replace("+", "_") / f"seed{seed}"


def train(config: AgentCompare, root: Path, log: Callable[[str], None] = print) -> dict[tuple, Path]:
    """Every training run, one `coevolve run` process each (a finished run,
    one with summary.json, is kept and skipped)."""
    from coevolve.base.config import dump_toml

    dirs = {}
    for task in config.tasks:
        for method in config.methods:
            if method == "base":
                continue
            for seed in config.seeds:
                directory = run_dir(root, task, method, seed)
                dirs[(task, method, seed)] = directory
                if (directory / "summary.json").exists():
                    log(f"  {task} {method} seed {seed}: done before")
                    continue
                directory.parent.mkdir(parents=True, exist_ok=True)
                file = directory.parent / f"seed{seed}.toml"
                atomic_write_text(file, dump_toml(run_config(config, task, method, seed)))
                began = time.monotonic()
                command = [sys.executable, "-m", "coevolve", "run", str(file), "--out", str(directory)]
                if (directory / "events.jsonl").exists():
                    command = [sys.executable, "-m", "coevolve", "run", "--resume", str(directory)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(f"{task} {method} seed {seed} failed (exit {done.returncode}):\n"
                                       f"{done.stderr[-3000:]}")
                log(f"  {task} {method} seed {seed}: trained in {time.monotonic() - began:.0f} s")
    return dirs


def score(config: AgentCompare, root: Path, dirs: dict[tuple, Path], engine: Any,
          log: Callable[[str], None] = print) -> list[dict]:
    """Held-out Mean@k / Pass@k of every (task, method, seed) on one engine."""
    from coevolve.agents.evaluate import build_task, check_heldout, eval_sampling, evaluate_arm, run_inputs
    from coevolve.es.optimizer import replay

    records = []
    for task_name in config.tasks:
        task = build_task(task_name, config.task_options.get(task_name, {}))
        heldout = task.cases("eval", config.problems, seed=0)
        check_heldout(task, heldout, task.cases("train", min(len(heldout), 64), seed=0))
        constrained = config.constrained and bool(getattr(task, "action_pattern", None))
        if constrained and hasattr(engine, "check_constraints"):
            engine.check_constraints([task.action_pattern])
        for method in config.methods:
            for seed in config.seeds:
                history, skills = run_inputs(dirs[(task_name, method, seed)]) if method != "base" else (None, [])
                if history is not None:
                    replay(history, engine)
                try:
                    result = evaluate_arm(engine, task, heldout, ARM_OF[method], config.k,
                                          eval_sampling(config.max_tokens, task), seed, skills, constrained)
                finally:
                    if history is not None:
                        engine.reset()
                records.append({"task": task_name, "method": method, "seed": seed,
                                "per_problem_mean": [sum(a) / len(a) for a in _attempts(result)],
                                "per_problem_pass": [float(any(r >= 1 for r in a)) for a in _attempts(result)],
                                **result.to_dict()})
                log(f"  {task_name} {method} seed {seed}: Mean@{config.k} {result.mean_at_k}")
    atomic_write_json(root / "scores.json", records)
    return records


def _attempts(result: Any) -> list[list[float]]:
    from coevolve.agents.evaluate import attempts_of

    return attempts_of(result.trajectories, result.problems, result.k)


def aggregate(config: AgentCompare, records: list[dict]) -> list[dict]:
    """One row per (task, method): pooled Mean@k / Pass@k over seeds x problems."""
    rows = []
    for task in config.tasks:
        for method in config.methods:
            mine = [r for r in records if r["task"] == task and r["method"] == method]
            if not mine:
                continue
            pooled_mean = mean_interval([v for r in mine for v in r["per_problem_mean"]])
            pooled_pass = mean_interval([v for r in mine for v in r["per_problem_pass"]])
            formed = [r["well_formed"] for r in mine if r["well_formed"] is not None]
            rows.append({"task": task, "method": method, "mean": pooled_mean.to_dict(), "pass": pooled_pass.to_dict(),
                         "per_seed": {r["seed"]: r[f"mean@{config.k}"]["mean"] for r in mine},
                         "well_formed": sum(formed) / len(formed) if formed else None})
    return rows


def markdown(config: AgentCompare, rows: list[dict]) -> str:
    k = config.k
    lines = [f"# Agent comparison: held-out Mean@{k} / Pass@{k}", "",
             f"{config.problems} held-out problems per task, k = {k} attempts (temperature 1, top-p 1, top-k 40), "
             f"{'constrained' if config.constrained else 'free'} decoding; training budget {config.budget} "
             f"episodes per run; seeds {', '.join(map(str, config.seeds))}. Intervals: 95%, over problems "
             "(pooled over seeds).", ""]
    for task in config.tasks:
        options = config.task_options.get(task, {})
        lines += [f"## {task}" + (f" ({', '.join(f'{k_}={v}' for k_, v in options.items())})" if options else ""), "",
                  f"| method | Mean@{k} [95% CI] | Pass@{k} [95% CI] | Mean@{k} per seed | well-formed |",
                  "|---|---|---|---|---|"]
        for row in (r for r in rows if r["task"] == task):
            per_seed = ", ".join(f"{v:.3f}" for v in row["per_seed"].values())
            formed = "-" if row["well_formed"] is None else f"{row['well_formed']:.2f}"
            lines.append(f"| {row['method']} | {_iv(row['mean'])} | {_iv(row['pass'])} | {per_seed} | {formed} |")
        lines.append("")
    return "\n".join(lines)


def _iv(d: dict) -> str:
    return str(Interval(d["n"], d["mean"], d["low"], d["high"]))


def plot(config: AgentCompare, rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(config.tasks), figsize=(4.5 * len(config.tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], config.tasks):
        mine = [r for r in rows if r["task"] == task]
        xs = range(len(mine))
        for offset, key, label in ((-0.18, "mean", f"Mean@{config.k}"), (0.18, "pass", f"Pass@{config.k}")):
            means = [r[key]["mean"] for r in mine]
            errors = [[m - r[key]["low"] for m, r in zip(means, mine)], [r[key]["high"] - m for m, r in zip(means, mine)]]
            ax.bar([x + offset for x in xs], means, width=0.34, yerr=errors, capsize=3, label=label)
        ax.set_xticks(list(xs), [r["method"] for r in mine], rotation=20, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_title(task)
        ax.legend(fontsize=8)
    return save_figure(fig, path)  # atomically, and the figure freed


def run_agent_comparison(config: AgentCompare, root: str | Path, engine: Any = None,
                         log: Callable[[str], None] = print) -> Path:
    """Train, score, render: report.md, results.json and agents.png under `root`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    log(f"agent comparison in {root}: {len(config.methods)} methods x {len(config.tasks)} tasks x "
        f"{len(config.seeds)} seeds")
    dirs = train(config, root, log)
    own = engine is None
    if own:
        from coevolve.engine.vllm_engine import Engine

        from coevolve.es.optimizer import engine_options

        es = config.run_sections.get("es", {})
        # one engine for every arm: a low-rank comparison replays its histories in low-rank mode
        engine = Engine(config.run_sections.get("model", {}).get("path") or None,
                        **engine_options(es.get("noise", "full"), es.get("rank", 1),
                                         config.run_sections.get("agent", {}).get("population", 8)))
    try:
        records = score(config, root, dirs, engine, log)
    finally:
        if own:
            engine.close()
    rows = aggregate(config, records)
    atomic_write_json(root / "results.json", rows)
    atomic_write_text(root / "report.md", markdown(config, rows))
    plot(config, rows, root / "agents.png")
    return root
