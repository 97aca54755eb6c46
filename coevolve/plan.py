"""The plan of a comparison, as data: its config, the runs it consists of,
where each run lives and how far it got, the test sets scored, and whether
each +ESOpt arm spends its budget exactly as its base method does.

Both `coevolve.compare` (which runs and scores) and `coevolve.report` (which
renders) import this module; neither imports the other, and the `compare`
command composes the two.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.base.config import build_config, read_toml, require
from coevolve.base.errors import UsageError
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search import methods as registry
from coevolve.search.runconfig import RunConfig, RunSection, SandboxSection, SearchSections, check_method

COMPARE_CONFIG = "compare.toml"
TEST_SCORES = "test.json"

# Table 5's six test columns: TSP20, TSP50 (1000 instances each, the reference's
# seed-1234 stream), KP50 capacity 12.5 and KP100 capacity 25 (1000 each, seed
# 3333), ASP(15, 10) and ASP(21, 15). Other tasks default to every size of the split.
PAPER_TEST_SIZES = {"tsp_construct": [20, 50], "kp_construct": [50, 100], "asp": [15, 21]}


@dataclass
class CompareSection:
    methods: list[str] = field(default_factory=lambda: list(registry.DEFAULT_COMPARE))
    tasks: list[str] = field(default_factory=lambda: ["tsp_construct"])
    budgets: list[int] = field(default_factory=lambda: [1000, 2000])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    out: str = ""  # empty: runs/compare-<time>
    # Compare a +ESOpt arm with its base method although their plans differ (see
    # coevolve.plan.structural_differences); the report then says so.
    allow_unmatched: bool = False

    def check(self, name: str) -> None:
        for key in ("methods", "tasks", "budgets", "seeds"):
            values = getattr(self, key)
            require(len(values) >= 1, f"{name}.{key}", "must list at least one value", values)
            require(len(set(values)) == len(values), f"{name}.{key}", "must not repeat a value", values)
        for method in self.methods:
            check_method(method, f"{name}.methods")
        for budget in self.budgets:
            require(budget >= 1, f"{name}.budgets", "must all be >= 1", self.budgets)
        for seed in self.seeds:
            require(seed >= 0, f"{name}.seeds", "must all be >= 0", self.seeds)


@dataclass
class HoldoutSection(SandboxSection):
    """[test]: the held-out sets each run's best heuristic is scored on. Its
    sandbox limits are the [sandbox] section's fields, with defaults for full
    test sets (1000 instances, as `coevolve eval`); the per-instance limit
    derives from the task, as everywhere."""

    timeout_s: float = 1800.0  # whole set; a hang fails at the per-instance limit long before
    memory_mb: int = 4096
    split: str = "test"
    sizes: list[int] = field(default_factory=list)  # empty: PAPER_TEST_SIZES (Table 5's columns), else every size
    limit: int = 0  # score the first `limit` instances of each set; 0: all of them (the paper's sets)

    def check(self, name: str) -> None:
        super().check(name)
        require(bool(self.split), f"{name}.split", "must not be empty")
        require(self.limit >= 0, f"{name}.limit", "must be >= 0 (0: every instance)", self.limit)


@dataclass
class CompareConfig(SearchSections):
    """[compare] and [test], plus the run sections every run shares."""

    compare: CompareSection = field(default_factory=CompareSection)
    test: HoldoutSection = field(default_factory=HoldoutSection)

    @classmethod
    def declared_sections(cls, raw: dict) -> dict:
        """The sections the compared methods declare themselves (coevolve.base.config's hook)."""
        compare = raw.get("compare") if isinstance(raw.get("compare"), dict) else {}
        methods = compare.get("methods", registry.DEFAULT_COMPARE)
        return registry.declared_sections(methods if isinstance(methods, list) else [])

    def check(self) -> None:
        super().check()
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


def test_set_lines(config: CompareConfig) -> list[str]:
    """One line per task: the test sets its best heuristics are scored on, with
    their instance counts (or ASP's (n, w)) and the capacity where the task has one."""
    from tasks.registry import heuristic_task

    lines = []
    for name in config.compare.tasks:
        task = heuristic_task(name)
        sets = []
        for split, size in scored_sets(config, task):
            instances = task.instances(split, size)
            if hasattr(instances, "n") and hasattr(instances, "w"):
                sets.append(f"{split} ({instances.n}, {instances.w})")
                continue
            count = min(len(instances), config.test.limit or len(instances))
            capacity = getattr(task, "capacities", {}).get(size)
            sets.append(f"{split}{size} ({count} instances{f', capacity {capacity:g}' if capacity else ''})")
        lines.append(f"{name}: " + ", ".join(sets))
    return lines


def load_compare_config(path: str | Path, out: str | None = None) -> CompareConfig:
    raw = read_toml(path)
    compare = raw.get("compare")
    if isinstance(compare, dict) and isinstance(compare.get("tasks"), list):
        from tasks.loader import absolute_spec

        # file tasks count from the TOML's folder, and the comparison names them absolutely
        compare["tasks"] = [absolute_spec(t, Path(path).parent) if isinstance(t, str) else t for t in compare["tasks"]]
    if isinstance(compare, dict) and isinstance(compare.get("methods"), list):  # file methods likewise
        compare["methods"] = [registry.absolute_method(m, Path(path).parent) if isinstance(m, str) else m
                              for m in compare["methods"]]
    if out is not None:
        compare = raw.setdefault("compare", {})
        if not isinstance(compare, dict):
            raise UsageError("config error: compare must be a table")
        compare["out"] = out
    return build_config(CompareConfig, raw)


def comparison_run(raw: dict) -> dict:
    """A comparison config (e.g. a preset of examples/paper/) as the raw config of
    one of its runs, for `coevolve run`: the whole comparison is validated first,
    [compare] and [test] are dropped, and [run] is the first method, task, budget
    and seed it lists (flags choose another)."""
    import copy

    c = build_config(CompareConfig, copy.deepcopy(raw)).compare
    run = {"method": c.methods[0], "task": c.tasks[0], "budget": c.budgets[0], "seed": c.seeds[0]}
    # sections other compared methods declare are not this arm's (its own is kept)
    others = set(registry.declared_sections(c.methods)) - set(registry.declared_sections([c.methods[0]]))
    return {**{k: v for k, v in raw.items() if k not in ("compare", "test", *others)}, "run": run}


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class RunSpec:
    task: str
    method: str
    budget: int
    seed: int

    def directory(self, root: Path) -> Path:
        from tasks.loader import task_label  # a file task's spec is a path: its folder is named by the task's name

        return root / "runs" / task_label(self.task) / f"{registry.path_name(self.method)}-b{self.budget}-s{self.seed}"


def baseline_directory(root: Path, task: str) -> Path:
    """Where the task template's test scores live: the starting point of every run."""
    from tasks.loader import task_label

    return Path(root) / "baselines" / task_label(task)


def planned_runs(config: CompareConfig) -> list[RunSpec]:
    """Seeds outermost: a comparison stopped early already holds every method on the first seeds."""
    c = config.compare
    return [RunSpec(task, method, budget, seed)
            for seed in c.seeds for task in c.tasks for budget in c.budgets for method in c.methods]


def run_config(config: CompareConfig, spec: RunSpec, directory: Path) -> RunConfig:
    run = RunSection(method=spec.method, task=spec.task, budget=spec.budget, seed=spec.seed, out=str(directory))
    run.check("run")
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(SearchSections)}
    config_ = RunConfig(run=run, **shared)
    held = getattr(config, "method_sections", {})  # only the sections this run's method declares
    config_.method_sections = {k: held[k] for k in registry.declared_sections([spec.method]) if k in held}
    type(registry.make_method(config_)).check(config_)
    return config_


def run_state(directory: Path) -> str:
    """"new", "partial" (started, not ended) or "finished"."""
    store = RunStore(directory)
    if not store.config_path.exists():
        return "new"
    ended = any(e.get("type") == "end" for e in read_jsonl(store.events_path))
    return "finished" if ended and store.path("summary.json").exists() else "partial"


# ------------------------------------------------------- structural matching
def arm_plan(config: CompareConfig, task: str, method: str, budget: int) -> dict:
    """What one arm of the comparison will run (the same for every seed)."""
    from coevolve.search.methods import run_plan

    return run_plan(run_config(config, RunSpec(task, method, budget, 0), Path("plan")))


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
        raise UsageError("the +ESOpt arms are not structurally matched to their base methods:\n  "
                         + "\n  ".join(differences)
                         + "\nmake the plans equal, or pass --allow-unmatched (compare.allow_unmatched = true) "
                           "to compare them knowingly; the report will say so")
    return differences
