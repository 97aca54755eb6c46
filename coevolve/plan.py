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
from typing import Any, ClassVar

from coevolve.agents.evaluate import MAX_K
from coevolve.agents.runconfig import METHODS as AGENT_RUN_METHODS
from coevolve.agents.runconfig import AgentRunConfig, AgentRunSection, AgentSection, SkillsSection
from coevolve.base.config import build_config, one_of, read_toml, require
from coevolve.base.errors import UsageError
from coevolve.base.sampling import Sampling
from coevolve.base.sections import DistributedSection, EndpointSection, ModelSection
from coevolve.es.config import ESConfig
from coevolve.runstore import RunStore, read_jsonl
from coevolve.search.runconfig import METHODS, RunConfig, RunSection, SandboxSection, SearchSections

COMPARE_CONFIG = "compare.toml"
TEST_SCORES = "test.json"

# Table 5's six test columns: TSP20, TSP50 (1000 instances each, the reference's
# seed-1234 stream), KP50 capacity 12.5 and KP100 capacity 25 (1000 each, seed
# 3333), ASP(15, 10) and ASP(21, 15). Other tasks default to every size of the split.
PAPER_TEST_SIZES = {"tsp_construct": [20, 50], "kp_construct": [50, 100], "asp": [15, 21]}


@dataclass
class CompareSection:
    kind: str = "heuristic"  # "agent": agent methods on agent tasks (AgentCompareConfig below)
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    tasks: list[str] = field(default_factory=lambda: ["tsp_construct"])
    budgets: list[int] = field(default_factory=lambda: [1000, 2000])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    out: str = ""  # empty: runs/compare-<time>
    # Compare a +ESOpt arm with its base method although their plans differ (see
    # coevolve.plan.structural_differences); the report then says so.
    allow_unmatched: bool = False

    def check(self, name: str) -> None:
        one_of(self.kind, KINDS, f"{name}.kind")
        for key in ("methods", "tasks", "budgets", "seeds"):
            values = getattr(self, key)
            require(len(values) >= 1, f"{name}.{key}", "must list at least one value", values)
            require(len(set(values)) == len(values), f"{name}.{key}", "must not repeat a value", values)
        for method in self.methods:
            one_of(method, AGENT_METHODS if self.kind == "agent" else METHODS, f"{name}.methods")
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

    def check(self) -> None:
        super().check()
        require(self.compare.kind == "heuristic", "compare.kind", 'is "agent": an agent comparison '
                "(load it with load_compare_config)", self.compare.kind)
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
    if out is not None:
        compare = raw.setdefault("compare", {})
        if not isinstance(compare, dict):
            raise UsageError("config error: compare must be a table")
        compare["out"] = out
    return build_config(config_class(raw), raw)


def comparison_run(raw: dict) -> dict:
    """A comparison config (e.g. a preset of examples/paper/) as the raw config of
    one of its runs, for `coevolve run`: the whole comparison is validated first,
    [compare] and [test] are dropped, and [run] is the first method, task, budget
    and seed it lists (flags choose another)."""
    import copy

    config = build_config(config_class(raw), copy.deepcopy(raw))
    c = config.compare
    if isinstance(config, AgentCompareConfig):  # the first method that trains ("base" has no run)
        spec = agent_runs(config)[0]
        return {**{k: v for k, v in raw.items() if k not in ("compare", "eval", "task")},
                "task": config.task.get(spec.task, {}), "run": dataclasses.asdict(spec)}
    run = {"method": c.methods[0], "task": c.tasks[0], "budget": c.budgets[0], "seed": c.seeds[0]}
    return {**{k: v for k, v in raw.items() if k not in ("compare", "test")}, "run": run}


# ----------------------------------------------------------------- the plan
@dataclass(frozen=True)
class RunSpec:
    task: str
    method: str
    budget: int
    seed: int

    def directory(self, root: Path) -> Path:
        from tasks.loader import task_label  # a file task's spec is a path: its folder is named by the task's name

        return root / "runs" / task_label(self.task) / f"{self.method.replace('+', '_')}-b{self.budget}-s{self.seed}"


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
    return RunConfig(run=run, **shared)


def run_state(directory: Path) -> str:
    """"new", "partial" (started, not ended) or "finished"."""
    store = RunStore(directory)
    if not store.config_path.exists():
        return "new"
    ended = any(e.get("type") == "end" for e in read_jsonl(store.events_path))
    return "finished" if ended and store.path("summary.json").exists() else "partial"


# ------------------------------------------------------- structural matching
PAIRS = [("sample", "sample+esopt"), ("eoh", "eoh+esopt")]


def arm_plan(config: CompareConfig, task: str, method: str, budget: int) -> dict:
    """What one arm of the comparison will run (the same for every seed)."""
    from coevolve.search.methods import run_plan

    return run_plan(run_config(config, RunSpec(task, method, budget, 0), Path("plan")))


def _why(config: CompareConfig, method: str) -> str:
    es = config.es
    if method.endswith("+esopt") and es.population:
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
            for base, variant in PAIRS:
                if base not in methods or variant not in methods:
                    continue
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


@dataclass
class HeldoutEvalSection:
    problems: int = 100  # the fixed held-out split (eval split, seed 0), the same for every arm and seed
    k: int = 4  # attempts per problem (Mean@k, Pass@k)
    constrained: bool = True  # decode held-out turns under the task's action format
    max_tokens: int = 12  # per turn

    def check(self, name: str) -> None:
        for key in ("problems", "k", "max_tokens"):
            require(getattr(self, key) >= 1, f"{name}.{key}", "must be >= 1", getattr(self, key))
        require(self.k <= MAX_K, f"{name}.k", f"must be <= {MAX_K}", self.k)


def _agent_default(name: str) -> Any:
    """The default of an AgentRunConfig section: a comparison's runs start from the same defaults as `coevolve run`."""
    return next(f.default_factory for f in dataclasses.fields(AgentRunConfig) if f.name == name)


@dataclass
class AgentCompareConfig:
    """[compare] kind = "agent", [eval], [task.<name>] and the agent run sections."""

    RENAMED: ClassVar[dict[str, str]] = AgentRunConfig.RENAMED

    compare: CompareSection = field(default_factory=lambda: CompareSection(
        kind="agent", methods=list(AGENT_METHODS), tasks=["sudoku"], budgets=[128], seeds=[0]))
    eval: HeldoutEvalSection = field(default_factory=HeldoutEvalSection)
    task: dict[str, dict[str, Any]] = field(default_factory=dict)  # task name -> options of its factory
    agent: AgentSection = field(default_factory=_agent_default("agent"))
    sampling: Sampling = field(default_factory=_agent_default("sampling"))
    es: ESConfig = field(default_factory=_agent_default("es"))
    skills: SkillsSection = field(default_factory=_agent_default("skills"))
    endpoint: EndpointSection = field(default_factory=_agent_default("endpoint"))
    model: ModelSection = field(default_factory=_agent_default("model"))
    distributed: DistributedSection = field(default_factory=_agent_default("distributed"))

    def check(self) -> None:
        from tasks.registry import is_agent_task

        require(self.compare.kind == "agent", "compare.kind", 'must be "agent" for agent sections', self.compare.kind)
        for index, name in enumerate(self.compare.tasks):
            require(is_agent_task(name), f"compare.tasks[{index}]", "is not an agent task", name)
        for name, options in self.task.items():
            require(name in self.compare.tasks, f"task.{name}", "names a task that is not in compare.tasks", name)
            require(isinstance(options, dict), f"task.{name}", "must be a table of the task's options", options)
        for spec in agent_runs(self, seeds=self.compare.seeds[:1]):
            agent_run_config(self, spec, Path("plan"))  # every run's rules (budget pays a round, task options build)


ComparisonConfig = CompareConfig | AgentCompareConfig


def config_class(raw: dict) -> type:
    """The comparison config a parsed TOML declares by [compare] kind."""
    compare = raw.get("compare")
    return AgentCompareConfig if isinstance(compare, dict) and compare.get("kind") == "agent" else CompareConfig


def agent_runs(config: AgentCompareConfig, seeds: list[int] | None = None) -> list[RunSpec]:
    """The training runs, seeds outermost as planned_runs; "base" needs none."""
    return [s for s in planned_runs(config) if s.method != "base" and (seeds is None or s.seed in seeds)]


def agent_run_config(config: AgentCompareConfig, spec: RunSpec, directory: Path) -> AgentRunConfig:
    """One training run's config: its [run] and its task's options, the shared sections as they are."""
    run = AgentRunSection(method=spec.method, task=spec.task, budget=spec.budget, seed=spec.seed, out=str(directory))
    run.check("run")
    run_config = AgentRunConfig(run=run, task=dict(config.task.get(spec.task, {})),
                                **{name: getattr(config, name) for name in AGENT_SHARED})
    run_config.check()
    return run_config


def base_directory(root: Path, task: str, seed: int) -> Path:
    """Where the base arm's held-out scores for one seed live (the checkpoint: no run)."""
    return baseline_directory(root, task) / f"base-s{seed}"
