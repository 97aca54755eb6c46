"""Search methods: registered objects that own their archive.

A method decides *what to ask for* and *what to keep*: a fixed plan of steps
(operator, how many candidates, base or perturbed models), the parents of
each request (drawn from its own archive: a population, islands, a grid) and
which offspring its archive admits. The loop owns the budget, the generator,
the sandbox and ES, and reads everything else from the method object:

- `plan()` / `steps()`: the steps in order (what `--plan` prints, what the
  structural matching of +ESOpt pairs compares);
- `pick()` / `parents()`: parents for one request;
- `admit()`: offspring into the archive, after each step;
- `seed()`: the scored template into the empty archive, before the first
  step ([context] seed_template; by default through `admit()`);
- `paper_rewards()`: the reward reference of the paper's ES reward;
- `label`, `unit`, `options` (a config section the method declares);
- the base method for +ESOpt pairing: the same name without "+esopt".

Because the plan does not depend on results, the number of ES generations a
budget allows is known before the run starts (the cosine σ schedule needs it).

This module is the registry: the built-ins (coevolve/search/builtin/), the
`coevolve.methods` entry-point group (`name = "pkg.module:Class"`), a file
(`path/to/method.py[:Class]`, loaded as tasks/loader.py loads a file task)
or a module (`package.module:Class`). A name may carry the modifiers
"+esopt" (the steps the method marks perturbable draw from ES-perturbed
models) and "+trace2skill" (a skill refresh every skill.every steps). Only
this module and the methods' own files know any method's name.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Literal, Mapping, Sequence

import numpy as np

from coevolve.base.config import build_config, config_error, read_toml
from coevolve.base.errors import UsageError, did_you_mean, plural
from coevolve.search import operators
from coevolve.search.population import Candidate, Population, check_ties, sort_key
from coevolve.search.reward import paper_eoh_rewards
from coevolve.search.skill_versions import SkillVersions
from tasks.loader import TaskSpecError, _import_attribute, _split_file, load_file, looks_like_spec, record_files

if TYPE_CHECKING:
    from pydantic import BaseModel

    from coevolve.search.runconfig import RunConfig

ENTRY_POINT_GROUP = "coevolve.methods"
ESOPT, SKILL = "esopt", "trace2skill"  # the modifiers, in the order a name carries them
DISTILL = operators.refresh_operator().name

BUILTIN: dict[str, str] = {
    "sample": "coevolve.search.builtin.sample:SampleMethod",
    "eoh": "coevolve.search.builtin.eoh:EohMethod",
    "islands": "coevolve.search.builtin.islands:IslandsMethod",
    "map_elites": "coevolve.search.builtin.map_elites:MapElitesMethod",
    "pareto": "coevolve.search.builtin.pareto:ParetoMethod",
}
# what a comparison runs when compare.methods is not given: the paper's arms, each with +trace2skill
DEFAULT_COMPARE = ("sample", "eoh", "sample+esopt", "eoh+esopt", "sample+trace2skill", "eoh+trace2skill",
                   "sample+esopt+trace2skill", "eoh+esopt+trace2skill")


@dataclass(frozen=True)
class StepSpec:
    operator: str  # an operators.OPERATORS name; the refresh operator: a Trace2Skill refresh (`count` analysts)
    count: int  # candidates requested (before the budget cuts the batch)
    perturbed: bool  # True: each ES member proposes `count / G` of them from its own perturbed model
    generation: int = 0  # the method's unit (EoH: 0 for the initial population, then 1, 2, ...; Sample: batch)


@dataclass(frozen=True)
class MethodName:
    """A method name split: its base spec and modifiers."""

    base: str  # a registry name, a plugin name, path.py[:Class] or module:Class
    esopt: bool = False
    skill: bool = False

    @property
    def full(self) -> str:
        return self.base + (f"+{ESOPT}" if self.esopt else "") + (f"+{SKILL}" if self.skill else "")


def parse_name(name: str) -> MethodName:
    """'eoh+esopt+trace2skill' -> MethodName('eoh', True, True); the modifiers in that order only."""
    base, esopt, skill = name, False, False
    if base.endswith(f"+{SKILL}"):
        base, skill = base[:-len(SKILL) - 1], True
    if base.endswith(f"+{ESOPT}"):
        base, esopt = base[:-len(ESOPT) - 1], True
    return MethodName(base, esopt, skill)


class Method:
    """The base of every method: one population as its archive (EoH's rules:
    prob-rank parents, survival of the best N, duplicates by objective), the
    paper's EoH reward, no config section of its own. Subclasses give
    `steps()` and override what their archive does differently."""

    label: ClassVar[str] = ""  # in reports; default: the class name
    unit: ClassVar[str] = "generation"  # what `--plan` calls a plan generation ("batch" for Sample)
    section: ClassVar[str] = ""  # the config section the method reads ("" none)
    # the model of `section` when the method declares it (a pydantic v2 model, extra="forbid"); None: `section`
    # is one of the shared sections (eoh, sample)
    options: ClassVar["type[BaseModel] | None"] = None
    perturbable: ClassVar[bool] = True  # "+esopt" allowed

    def __init__(self, config: "RunConfig", name: MethodName) -> None:
        self.config = config
        self.spec = name
        self.name = name.full
        self.perturbed = name.esopt
        self.direction = "min"
        self.setup()

    # -- configuration -------------------------------------------------------------------
    def setup(self) -> None:
        """Derive the plan's numbers from self.config (called on construction)."""

    @classmethod
    def check(cls, config: "RunConfig") -> None:
        """Rules across sections (e.g. against run.budget); raise config_error."""

    def check_task(self, task: Any) -> None:
        """What the method needs of the task, checked before the run directory exists; raise UsageError.
        (What every run needs of it, such as its tie-breaks, is checked outside: `check_with_task`.)"""

    def settings(self) -> Any:
        """This method's own section (`options`), validated; its defaults when the config has none."""
        return method_section(self.config, self.section, self.options)

    # -- plan -----------------------------------------------------------------------------
    def steps(self) -> Iterator[StepSpec]:
        # the one hook a method must give: said at --plan as one line naming the class and its file, as
        # any other mistake in a method file is (a bare NotImplementedError named only this module)
        raise UsageError(f"method {method_where(type(self))} defines no steps(): a method class must define "
                         "steps(), yielding StepSpec(operator, count, perturbed, generation) in order "
                         "(docs/search.md, Writing your own method)")

    def plan(self) -> Iterator[StepSpec]:
        """The steps in order; the loop stops at the budget (or where a finite plan ends). With
        +trace2skill a skill refresh follows every skill.every of the method's steps."""
        if not self.spec.skill:
            yield from self.steps()
            return
        every, analysts = self.config.skill.every, self.config.skill.analysts
        for index, spec in enumerate(self.steps(), start=1):
            yield spec
            if index % every == 0:
                yield StepSpec(DISTILL, analysts, False, spec.generation)

    def outside_budget(self) -> int:
        """Evaluations charged beyond run.budget (EoH's initial population, as the paper counts)."""
        return 0

    def plan_notes(self) -> dict:
        """Extra keys of the plan data (e.g. EoH's m_multiplier)."""
        return {}

    def plan_lines(self) -> list[str]:
        """Extra lines of the printed plan, after its head line."""
        return []

    def budget_scaled(self) -> dict[str, Any]:
        """This method's settings that follow run.budget here, each as the config gives it with its rule
        (e.g. "islands.reset_every = 0 (a quarter of run.budget)"), with what it comes to under this
        config's budget (6). `--resume DIR --budget N` is refused when one comes to something else under
        N (extension_problem): the run's logged steps are replayed under it, and what they logged would
        be rewritten. {} when none does (a setting given a number of its own does not follow it)."""
        return {}

    def plan_warnings(self, steps: list) -> list[str]:
        """What this method's own settings undo under the plan's `steps` (said before the run, with the
        budget's warnings: plan_warnings)."""
        return []

    # -- archive ---------------------------------------------------------------------------
    def population_size(self) -> int:
        return self.config.eoh.population

    def new_population(self) -> Population:
        eoh = self.config.eoh
        return Population(self.population_size(), self.direction, decimals=eoh.dedup_decimals,
                          with_replacement=eoh.parents_with_replacement, ties=tuple(eoh.tie_break))

    def start(self, task: Any) -> None:
        """An empty archive for `task` (the loop calls this once, before the first step; a method that
        overrides it calls this first: it sets `rank`, the one ordering of the archive's programs)."""
        self.task = task
        self.direction = task.direction
        self.rank = sort_key(self.direction, self.config.eoh.tie_break)  # best first, ties broken as configured
        self.population = self.new_population()

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        """Parents for one request from `population`: the operator's count (or, for an operator
        that takes the method's count, eoh.parents), prob-rank; [] for parentless operators."""
        wanted = operators.get(operator).parents
        if wanted is None:
            wanted = self.config.eoh.parents
        return population.select(wanted, rng) if wanted else []

    def pick(self, operator: str, rng: np.random.Generator, step: int, slot: int) -> list[Candidate]:
        """Parents for request `slot` of `step`, from the archive."""
        return self.parents(operator, self.population, rng)

    def admit(self, step: int, candidates: Sequence[Candidate], evaluations: int) -> None:
        """A step's candidates (in slot order) into the archive; `evaluations`: the ledger after the step."""
        for candidate in candidates:
            if candidate.duplicate_of is None:
                self.population.add(candidate)
        self.population.survive()

    def seed(self, candidate: Candidate) -> None:
        """The run's seed program (the task's template, scored, id 0) into the empty archive before
        the first step. Through `admit()` by default, so every method's archive takes it by its own
        rule (a MAP-Elites cell, a population slot); a method that keeps several archives may
        place it in each."""
        self.admit(-1, [candidate], 0)

    def ranked(self) -> list[Candidate]:
        """The archive's programs, best first (each once)."""
        return self.population.ranked()

    def members(self) -> list[Candidate]:
        """The archive's programs (the levels reward's population median, the paper reward's worst)."""
        return list(self.population.members)

    def best(self) -> Candidate | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def snapshot(self) -> dict:
        """What the run directory keeps of the archive after each step (population/gen_NNNN.json)."""
        return {"population": self.population.snapshot()}

    # -- ES reward ----------------------------------------------------------------------------
    def paper_rewards(self, objectives: list[float | None], parents: list[list[Candidate]], floor: float) -> list[float]:
        """The paper's reward: each child against its best parent, failures pinned near the archive's worst."""
        pick = min if self.direction == "min" else max
        best_parent = [None if not any(p.valid for p in ps) else pick(p.objective for p in ps if p.valid)
                       for ps in parents]
        return paper_eoh_rewards(objectives, best_parent, [m.objective for m in self.members()],
                                 self.direction, floor)

    # -- report ---------------------------------------------------------------------------------
    def figures(self, run_dir: Path) -> dict[str, Path]:
        """Figures of the archive for the run's report (`coevolve report RUN_DIR`), by name."""
        return {}


# -- the registry ---------------------------------------------------------------------------------
_registered: dict[str, type[Method]] = {}
_loaded: dict[str, type[Method]] = {}


def register(name: str, cls: type[Method]) -> None:
    """Add a method under `name` (tests, plugins loaded by hand)."""
    if name in BUILTIN or name in _registered:
        raise UsageError(f"method {name!r} is registered twice")
    _registered[name] = cls


def unregister(name: str) -> None:
    _registered.pop(name, None)
    _loaded.pop(name, None)


def _plugins() -> dict[str, Any]:
    return {e.name: e for e in entry_points(group=ENTRY_POINT_GROUP)}


def known() -> list[str]:
    """Every method name a config may give (built-ins and registered ones with their modifiers)."""
    names = []
    for base in [*BUILTIN, *_registered, *_plugins()]:
        try:
            cls = method_class(base)
        except UsageError:
            continue
        variants = [base] + ([f"{base}+{ESOPT}"] if cls.perturbable else [])
        names += variants + [f"{v}+{SKILL}" for v in variants]
    return [n for n in DEFAULT_COMPARE if n in names] + [n for n in names if n not in DEFAULT_COMPARE]


def is_method(name: str) -> bool:
    """Whether a plain name (no modifier, no path) names a built-in, registered or plugin method."""
    return name in BUILTIN or name in _registered or name in _plugins()


def _is_method_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, Method) and value is not Method


def method_class(base: str) -> type[Method]:
    """The class a base name or spec names; a UsageError (listing the known names) when none."""
    if base in _loaded:
        return _loaded[base]
    if base in _registered:
        cls = _registered[base]
    elif base in BUILTIN:
        module_path, _, attr = BUILTIN[base].partition(":")
        cls = _import_attribute(module_path, attr, f"method {base!r}")
    elif (plugin := _plugins().get(base)) is not None:
        module_path, _, attr = plugin.value.partition(":")
        try:
            cls = _import_attribute(module_path, attr, f"plugin method {base!r} (entry point {plugin.value})")
        except TaskSpecError as exc:
            raise UsageError(str(exc)) from None
    elif (file_spec := _split_file(base)) is not None:
        path = Path(file_spec[0]).expanduser()
        if not path.is_file():
            where = "" if path.is_absolute() else f" (looked in {Path.cwd()})"
            raise UsageError(f"method file not found: {file_spec[0]}{where}")
        try:
            module = load_file(path.resolve())
        except TaskSpecError as exc:
            raise UsageError(str(exc)) from None
        found = {n: v for n, v in vars(module).items() if _is_method_class(v) and v.__module__ == module.__name__}
        if file_spec[1] is not None:
            cls = found.get(file_spec[1])
            if cls is None:
                raise UsageError(f"{file_spec[0]}: no method class {file_spec[1]!r} "
                                 f"(method classes in the file: {', '.join(found) or 'none'})")
        elif len(found) == 1:
            cls = next(iter(found.values()))
        else:
            raise UsageError(f"{file_spec[0]}: " + (f"defines {len(found)} method classes ({', '.join(found)}): "
                                                     f"name one, e.g. {file_spec[0]}:{next(iter(found))}" if found else
                                                     "no method class (a subclass of coevolve.search.methods.Method)"))
    elif ":" in base:
        module_path, _, attr = base.partition(":")
        try:
            cls = _import_attribute(module_path, attr, f"method {base!r}")
        except TaskSpecError as exc:
            raise UsageError(str(exc)) from None
    else:
        raise UsageError(f"unknown method {base!r} (known: {', '.join(known())}; or path/to/method.py[:Class])")
    if not _is_method_class(cls):
        raise UsageError(f"method {base!r} is not a subclass of coevolve.search.methods.Method")
    _loaded[base] = cls
    return cls


def check_method_name(value: str, field: str, arms: Sequence[str] = ()) -> None:
    """The one check of a method name in a config (run.method, compare.methods): a config error naming
    the field and listing the known methods, and a comparison's named `arms`, which its list may name too."""
    if not isinstance(value, str) or not value:
        raise config_error(field, f"must be one of {', '.join(known())}", value)
    name = parse_name(value)
    try:
        cls = method_class(name.base)
    except UsageError as exc:
        if looks_like_spec(name.base) or name.base in _plugins():
            raise config_error(field, str(exc)) from None
        names, named = known(), f", or a named arm: {', '.join(arms)}" if arms else ""
        raise config_error(field, f"must be one of {', '.join(names)} (or path/to/method.py[:Class]{named})", value,
                           did_you_mean(value, [*names, *arms])) from None
    if name.esopt and not cls.perturbable:
        raise config_error(field, f"{name.base} takes no +{ESOPT}", value)


def names_a_method(value: Any, field: str = "run.method") -> bool:
    """Whether `value` passes check_method_name: for a check that must not speak before the name's own
    (a misspelt name is refused by its field, with its did-you-mean). A method file, module or plugin
    that names something but fails to load raises its own error here instead: the sections it declares
    cannot be known without it, and the config's check of its sections would otherwise report the
    method's own section ([tga]) as unknown and never show why the file did not load."""
    try:
        check_method_name(value, field)
    except UsageError:
        if isinstance(value, str) and value and (looks_like_spec(base := parse_name(value).base)
                                                 or base in _plugins()):
            raise
        return False
    return True


def check_operator_name(value: str, field: str) -> None:
    """The one check of an operator name in a config list (eoh.operators, es.operators): the operator
    registry's (coevolve/search/operators.py), listing the known ones."""
    operators.check_operator(value, field)


def absolute_method(value: str, base: str | Path = ".") -> str:
    """A file method made absolute (relative paths count from `base`); other names as they are."""
    name = parse_name(value)
    file_spec = _split_file(name.base)
    if file_spec is None or (Path(file_spec[0]).is_absolute() and name.base in _loaded):  # a run's copy found
        return value
    full = Path(base, file_spec[0]).expanduser().resolve()
    if not full.is_file():
        where = "" if Path(file_spec[0]).expanduser().is_absolute() else f" (looked in {Path(base).resolve()})"
        raise UsageError(f"method file not found: {file_spec[0]}{where}")
    spec = f"{full}:{file_spec[1]}" if file_spec[1] else str(full)
    return dataclasses.replace(name, base=spec).full


# A method file is part of what a run is: the run directory keeps a copy (method_files/) and its sha256
# (methods.json), as it keeps a file task (tasks/loader.py), so --resume, `coevolve report` and a
# comparison's report read it from the directory alone.
RECORD, COPIES = "methods.json", "method_files"


def record_methods(directory: str | Path, names: Sequence[str]) -> None:
    """Copy the method files among `names` into `directory` (method_files/, methods.json)."""
    record_files(directory, [parse_name(n).base for n in names if isinstance(n, str)], RECORD, COPIES)


def remember_methods(directory: str | Path, on_change: Literal["refuse", "copy"] = "refuse",
                     owner: str = "run") -> None:
    """Make the method files recorded in `directory` load under their recorded names in this process:
    the original when it is unchanged, the run's copy when it is gone (or, `on_change="copy"`, edited).
    An edited original is refused (`refuse`: --resume), one line naming both files: a run goes on with
    the method it started with, or not at all."""
    from tasks.loader import locate_files  # its TaskSpecError is a UsageError: one line, exit status 2

    targets, _ = locate_files(directory, RECORD, "method", on_change, owner=owner)
    for spec, target in targets.items():
        _loaded[spec] = method_class(target)


def path_name(name: str) -> str:
    """A method name fit for a directory name: a file or module method by its file stem or class
    ('toy' for /x/toy.py, 'Toy' for /x/toy.py:Toy), '+' as '_'."""
    spec = parse_name(name)
    file_spec = _split_file(spec.base)
    if file_spec is not None:
        base = file_spec[1] or Path(file_spec[0]).stem
    else:
        base = spec.base.rpartition(":")[2]
    return dataclasses.replace(spec, base=base).full.replace("+", "_")


def label(name: str) -> str:
    """A method's label in reports: 'EoH+ESOpt', 'Islands(EoH)', a user class's `label` or name."""
    spec = parse_name(name)
    try:
        cls = method_class(spec.base)
        text = cls.label or cls.__name__
    except UsageError:
        text = spec.base
    return text + ("+ESOpt" if spec.esopt else "") + ("+Trace2Skill" if spec.skill else "")


def base_of(name: str) -> str | None:
    """The method a +ESOpt method is paired with (its name without +esopt); None for the others."""
    spec = parse_name(name)
    return dataclasses.replace(spec, esopt=False).full if spec.esopt else None


def uses_es(name: str) -> bool:
    return parse_name(name).esopt


def uses_skill(name: str) -> bool:
    return parse_name(name).skill


def pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """(base, +ESOpt variant) for every variant in `names` whose base is there too: the pairs a comparison
    checks for equal plans (a +trace2skill method's refreshes are steps its base does not take)."""
    return [(base, name) for name in names if (base := base_of(name)) is not None and base in names]


def skill_pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    """(method, method+trace2skill) for every +trace2skill method in `names` whose method without the
    skill is there too (eoh+esopt+trace2skill: eoh+esopt)."""
    return [(base, name) for name in names if uses_skill(name)
            and (base := dataclasses.replace(parse_name(name), skill=False).full) in names]


# -- sections a method declares -------------------------------------------------------------------
def declared_sections(names: Sequence[str]) -> dict[str, "type[BaseModel]"]:
    """{section: model} of the sections the methods `names` declare themselves (unknown names skipped:
    the name's own check reports them)."""
    found: dict[str, Any] = {}
    for name in names:
        if not isinstance(name, str):
            continue
        try:
            cls = method_class(parse_name(name).base)
        except UsageError:
            continue
        if cls.options is not None and cls.section:
            if found.get(cls.section, cls.options) is not cls.options:
                raise UsageError(f"config error: two methods declare a section [{cls.section}]")
            found[cls.section] = cls.options
    return found


def method_section(config: Any, section: str, model: "type[BaseModel] | None") -> Any:
    """The validated section `section` of `config`: a declared one (its model's defaults when absent),
    or a shared section attribute."""
    if model is None:
        return getattr(config, section, None)
    held = getattr(config, "method_sections", {}).get(section)
    return held if held is not None else model()


# -- building and planning ---------------------------------------------------------------------------
def make_method(config: "RunConfig") -> Method:
    name = parse_name(config.run.method)
    return method_class(name.base)(config, name)


def check_with_task(config: "RunConfig", task: Any) -> None:
    """What a run's config needs of its built task, before the run directory exists (run, compare and
    their --plan): the method's needs (its `check_task`, e.g. MAP-Elites' descriptors) and the
    tie-breaks' names, which no method can skip. Raises UsageError."""
    make_method(config).check_task(task)
    check_ties(config.eoh.tie_break, task)


def outside_budget(config: "RunConfig") -> int:
    """Evaluations charged beyond run.budget (EoH's initial population when eoh.init_in_budget is false)."""
    return make_method(config).outside_budget()


def planned_refreshes(config: "RunConfig") -> tuple[int, int]:
    """(skill refreshes, proposal steps) the run's budget allows, counted up to the first refresh: (0, every
    proposal step) when none fits, else (1, the proposal steps before it). Whether one fits is what a
    config's validation asks; it walks no further than that, however large run.budget is."""
    method = make_method(config)
    budget = config.run.budget + method.outside_budget()
    proposals = 0
    for step in iter_planned_steps(method, budget, config.es.proposals_per_member):
        if step.operator == DISTILL:
            return 1, proposals
        proposals += 1
    return 0, proposals


def members_for(count: int, per_member: int) -> int:
    """ES members that take part in a perturbed step of `count` candidates."""
    return math.ceil(count / per_member)


@dataclass(frozen=True)
class PlannedStep:
    """One step as the budget will grant it."""

    index: int
    generation: int
    operator: str
    count: int  # candidates granted (the budget may cut the last step)
    perturbed: bool  # an ES update follows (at least two members proposed)
    directions: int  # ES members (perturbations) in that update; 0 when not perturbed


def taken_counts(events: list[dict]) -> dict[int, int]:
    """The candidates each logged step of a run took, by step: what step_count keeps."""
    return {e["step"]: len(e["requests"]) for e in events if e.get("type") == "step"}


def step_count(index: int, spec: StepSpec, taken: Mapping[int, int] | None = None) -> int:
    """The candidates step `index` asks for: what it took when it is logged (`taken`), else the plan's
    count. A step an old budget cut short stays short when the run is given more (`--resume DIR
    --budget N`), so the loop (going on) and an extension's --plan (saying what it will do) ask this."""
    return taken.get(index, spec.count) if taken else spec.count


def planned_steps(method: Method, budget: int, per_member: int,
                  taken: Mapping[int, int] | None = None) -> list[PlannedStep]:
    """The steps the loop will run under `budget` evaluations, in order (`taken`: a run's logged steps,
    step_count)."""
    return list(iter_planned_steps(method, budget, per_member, taken))


def method_where(cls: type) -> str:
    """A method class for its author's errors: 'TournamentGA (/x/my_method.py:19)', the file and line
    of its class statement ('TournamentGA' alone when Python cannot find its source)."""
    try:
        return f"{cls.__name__} ({inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]})"
    except (OSError, TypeError):
        return cls.__name__


def _yielded_at(plan: Iterator[StepSpec], method: Method) -> str:
    """Where the step just taken from `plan` (a Method.plan() generator) was yielded: the file and line of
    the yield inside steps() when it is a generator, else the line steps() is defined on."""
    inner: Any = plan
    while getattr(inner, "gi_yieldfrom", None) is not None:  # plan() -> steps() (`yield from`)
        inner = inner.gi_yieldfrom
    frame = getattr(inner, "gi_frame", None)
    if inner is not plan and frame is not None:
        return f"{frame.f_code.co_filename}:{frame.f_lineno}"
    code = getattr(type(method).steps, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else type(method).__name__


def check_step(spec: Any, index: int, method: Method, where: Callable[[], str]) -> None:
    """One step a method's plan yields, checked before anything uses it: a method file's mistake
    (a tuple for a StepSpec, a count of 0, a misspelt operator) is one line naming the class, the
    yield's file and line and the step, at --plan; unchecked it surfaced as a TypeError inside coevolve,
    or a plan of '-3 evaluations' whose run would stop at its first step having spent nothing."""
    def refuse(problem: str) -> UsageError:
        return UsageError(f"method {type(method).__name__}: its step {index}, yielded at {where()}, {problem}")

    if not isinstance(spec, StepSpec):
        raise refuse(f"is {spec!r}, not a StepSpec: yield StepSpec(operator, count, perturbed, generation)")
    if not isinstance(spec.count, int) or isinstance(spec.count, bool) or spec.count < 1:
        raise refuse(f"asks for count = {spec.count!r} candidates: a step's count must be a whole number >= 1 "
                     "(leave out a step that would ask for none)")
    if not isinstance(spec.operator, str) or spec.operator not in operators.OPERATORS:
        try:
            operators.get(spec.operator)  # a plugin operator, loaded on first use
        except (UsageError, TypeError):
            raise refuse(f"has operator {spec.operator!r}: known operators: "
                         f"{', '.join(operators.proposal_names())}") from None
    if not isinstance(spec.perturbed, bool):
        raise refuse(f"has perturbed = {spec.perturbed!r}: True (the step draws from ES-perturbed models) or False")
    if not isinstance(spec.generation, int) or isinstance(spec.generation, bool):
        raise refuse(f"has generation = {spec.generation!r}: a whole number (the method's unit in --plan)")


def iter_planned_steps(method: Method, budget: int, per_member: int,
                       taken: Mapping[int, int] | None = None) -> Iterator[PlannedStep]:
    """planned_steps one at a time, for a caller that may stop early. Time linear in the steps."""
    left = budget
    plan = method.plan()
    for index, spec in enumerate(plan):
        if left <= 0:
            break
        check_step(spec, index, method, lambda: _yielded_at(plan, method))
        granted = min(step_count(index, spec, taken), left)
        left -= granted
        members = members_for(granted, per_member) if spec.perturbed else 0
        perturbed = spec.perturbed and members >= 2
        yield PlannedStep(index, spec.generation, spec.operator, granted, perturbed, members if perturbed else 0)


def planned_es_generations(method: Method, budget: int, per_member: int) -> int:
    """ES updates the plan makes before the budget runs out. A budget-cut last step
    still updates when at least two members proposed something."""
    return sum(1 for step in planned_steps(method, budget, per_member) if step.perturbed)


def es_directions(method: Method, budget: int, per_member: int) -> int:
    """Perturbations ESOpt must hand out per update: the largest perturbed step's members."""
    return max((s.directions for s in planned_steps(method, budget, per_member)), default=0)


def es_population(config: "RunConfig") -> int:
    """ES members per update for this run: es.population, or (0) the largest
    perturbed step's members. A low-rank engine needs a LoRA slot for each."""
    if config.es.population:
        return config.es.population
    method = make_method(config)
    budget = config.run.budget + method.outside_budget()
    return max(es_directions(method, budget, config.es.proposals_per_member), 2)


def extension_problem(before: "RunConfig", after: "RunConfig") -> str | None:
    """Why a run planned under `before` cannot go on under `after`, the same config with a larger
    run.budget (`coevolve run --resume DIR --budget N`): the larger plan must begin with every step of
    the smaller one (its last step may have been cut short by the smaller budget), and what the
    method's budget-scaled settings come to (Method.budget_scaled, e.g. the islands' reset period) must
    not change, since the logged steps are replayed under them. None when both hold."""
    was, now = make_method(before).budget_scaled(), make_method(after).budget_scaled()
    changed = [setting for setting, value in now.items() if was.get(setting) != value]
    way_out = "start a new run with the larger budget (with the setting given a number of its own, a later " \
              "--budget can extend that run)"
    old, new = run_plan(before)["steps"], run_plan(after)["steps"]
    for a, b in zip(old, new):
        last = a["index"] == old[-1]["index"]
        if (a["operator"], a["generation"]) != (b["operator"], b["generation"]) or not (
                a["count"] == b["count"] or last and a["count"] < b["count"]):
            cause = f"; {' and '.join(changed)} follows the budget" if changed else ""
            return (f"its plan depends on the budget: step {a['index']} would be {b['operator']} x {b['count']} "
                    f"(generation {b['generation']}) where the run planned {a['operator']} x {a['count']} "
                    f"(generation {a['generation']}){cause}: "
                    + (way_out if changed else "start a new run with the larger budget"))
    if changed:  # the same steps, but the archive they fill would be rebuilt under another setting
        setting = changed[0]
        return (f"its plan depends on the budget: {setting} comes to {now[setting]} at run.budget = "
                f"{after.run.budget} where the run had {was.get(setting)}, and its logged steps would be replayed "
                f"under it: {way_out}")
    return None


def run_plan(config: "RunConfig", taken: Mapping[int, int] | None = None) -> dict:
    """The plan of a run as data: what `coevolve run --plan` prints and what
    `coevolve compare` checks arms against each other with. `taken`: the steps a run
    already logged, which it keeps as they were (step_count)."""
    method = make_method(config)
    extra = method.outside_budget()
    steps = planned_steps(method, config.run.budget + extra, config.es.proposals_per_member, taken)
    updates = [s for s in steps if s.perturbed]
    sides = judged_sides(config, steps)
    return {
        "method": config.run.method, "task": config.run.task, "budget": config.run.budget,
        "outside_budget": extra, "unit": method.unit,
        "m_multiplier": None, **method.plan_notes(),
        "steps": [dict(vars(s)) for s in steps],  # flat: asdict's deep copy is slow for large plans
        "evaluations": sum(s.count for s in steps),
        "generations": max((s.generation for s in steps), default=0),
        "es_updates": len(updates),
        "skill_refreshes": sum(s.operator == DISTILL for s in steps),
        "distill_requests": sum(s.count for s in steps if s.operator == DISTILL),
        "directions": sorted({s.directions for s in updates}),
        "notes": method.plan_lines() + ([f"equal objectives told apart by {', '.join(config.eoh.tie_break)} "
                                          "(eoh.tie_break), then the earlier program"]
                                         if config.eoh.tie_break else []),
        "skill_trials": [on_trial + patched for on_trial, patched in sides],
        "skill_trial_sides": sides,
        "warnings": plan_warnings(method, steps) + trial_warnings(sides),
    }


LOOKAHEAD = 100_000  # evaluations plan_warnings looks past the budget for a step that builds on a candidate


def plan_warnings(method: Method, steps: list) -> list[str]:
    """What the budget leaves out of what the method's name promises, said before the run rather
    than found in its results: no ES update, no skill refresh, or no step that shows a parent (a
    method that evolves only after its initial population then samples independently); then the
    method's own warnings. `method`: the one run_plan built, whose plan `steps` are (its plan is
    fixed by its config, so walking it again past the budget needs no second one)."""
    config = method.config
    name, budget, warnings = parse_name(config.run.method), config.run.budget, []
    per_member = config.es.proposals_per_member
    if name.esopt and not any(s.perturbed for s in steps):
        need = _least_es_budget(method, budget, per_member)
        warnings.append(f"no ES update fits in run.budget = {budget}: {config.run.method} moves no weights here"
                        + (f" (the first needs run.budget >= {need})" if need is not None else ""))
    if name.skill and not any(s.operator == DISTILL for s in steps):
        warnings.append(f"no skill refresh fits in run.budget = {budget}: {config.run.method} distils no skill here")

    def parented(step: PlannedStep) -> bool:
        return step.operator != DISTILL and not operators.get(step.operator).parentless

    if not any(parented(s) for s in steps):
        first = _first_step(method, budget, per_member, parented)
        if first is not None:
            warnings.append(f"every step in run.budget = {budget} writes from the template alone: no "
                            f"candidate builds on another (the first step that does would need run.budget "
                            f">= {first[0] + 1})")
    return warnings + method.plan_warnings(steps)


def _least_es_budget(method: Method, budget: int, per_member: int) -> int | None:
    """The least budget whose plan holds an ES update, above `budget` (whose plan holds none); None when
    none is found a little past it (_first_step). A generation cut short by the budget may still make one
    with fewer directions, so the bound the first whole generation gives is searched down (plans are cheap
    and grow with the budget)."""
    first = _first_step(method, budget, per_member, lambda step: step.perturbed)
    if first is None:
        return None

    def updates(b: int) -> bool:
        return any(s.perturbed for s in planned_steps(method, b, per_member))

    low, high = budget + 1, first[0] + first[1].count
    if not updates(high):
        return None
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if updates(middle) else (middle + 1, high)
    return high


def _first_step(method: Method, budget: int, per_member: int,
                wanted: Callable[[PlannedStep], bool]) -> tuple[int, PlannedStep] | None:
    """The first planned step past what `budget` plans that is `wanted`, with the evaluations before it;
    looked for a little past the budget (at most LOOKAHEAD evaluations past it: a method that never makes
    one, e.g. sample's parented step, is not walked for ten times a large budget). None: none there."""
    further = min(10 * budget, budget + LOOKAHEAD) + 1000
    spent = 0
    for step in iter_planned_steps(method, further, per_member):
        if wanted(step):
            return spent, step
        spent += step.count
    return None


def judged_sides(config: "RunConfig", steps: list) -> list[tuple[int, int]]:
    """skill.keep = "judged": per trial, in order, (requests showing the version on trial, requests
    showing the one it patched), as the run will split them: by SkillVersions itself, so the plan and
    the run follow one rule. A trial begins at a refresh, or at the first step for a skill.start skill.
    [] otherwise."""
    if config.skill.keep != "judged":
        return []
    versions, sides = SkillVersions(judged=True), []
    used = generations = 0  # evaluations charged and ES generations before each step, as the loop counts them
    if config.skill.start:
        versions.add(0, None, -1, generations)
        sides.append([0, 0])
    for step in steps:
        if step.operator == DISTILL:
            versions.settle(None)
            versions.add(len(sides) + 1, None, step.index, generations)
            sides.append([0, 0])
        elif versions.challenger is not None:
            shown = ([versions.for_generation(generations)] * step.count if step.perturbed
                     else [versions.for_request(used + slot) for slot in range(step.count)])
            on_trial = sum(v == versions.challenger for v in shown)
            sides[-1][0] += on_trial
            sides[-1][1] += step.count - on_trial
        used += step.count
        generations += step.perturbed
    return [(on_trial, patched) for on_trial, patched in sides]


def trial_warnings(sides: list[tuple[int, int]]) -> list[str]:
    """A judged trial one side of which the plan gives no request: its version is never shown, or it
    is compared with nothing."""
    warnings = []
    for i, (on_trial, patched) in enumerate(sides):
        which = ("the last skill version's trial (judged at the end)" if i == len(sides) - 1
                 else f"skill trial {i + 1} of {len(sides)}")
        if not on_trial + patched:
            warnings.append(f"{which} has no request: the version its refresh writes is never shown or judged "
                            "(its analysts' evaluations buy a file only)")
        elif not on_trial:
            warnings.append(f"{which} shows the version on trial to none of its {plural(patched, 'request')}: it "
                            "is never judged, and its analysts' evaluations buy nothing (a larger skill.every gives "
                            "longer trials)")
        elif not patched:
            warnings.append(f"{which} shows the version on trial to all {plural(on_trial, 'request')} and the one "
                            "it patched to none (an ES generation's members all see one version): it compares "
                            "nothing (a larger skill.every gives longer trials)")
    return warnings


def step_lines(steps: list[dict], what: str = "generation", prefix: str = "") -> list[str]:
    """Plan steps for people: one line per distinct generation, repeats folded, each line after
    `prefix` (an extension's "done: " and "to run: ")."""
    # (shape, its generations, their evaluations): one pass over the steps, so a large budget plans in
    # time linear in its steps
    groups: list[tuple[str, list[int], int]] = []
    by_generation: dict[int, list[dict]] = {}
    for step in steps:
        by_generation.setdefault(step["generation"], []).append(step)
    for generation, steps_ in by_generation.items():
        shape = ", ".join(f"skill refresh ({plural(s['count'], 'analyst')})" if s["operator"] == DISTILL else
                          f"{s['operator']} {s['count']}" + (f" (ES, {s['directions']} directions)"
                                                             if s["perturbed"] else "")
                          for s in steps_)
        count = sum(s["count"] for s in steps_)
        if groups and groups[-1][0] == shape:
            groups[-1][1].append(generation)
            groups[-1] = (shape, groups[-1][1], groups[-1][2] + count)
        else:
            groups.append((shape, [generation], count))
    lines = []
    for shape, generations, total in groups:
        if generations == [0] and what == "generation":
            label_ = "initial population"
        elif len(generations) == 1:
            label_ = f"{what} {generations[0]}"
        else:
            label_ = f"{what}{'es' if what.endswith('h') else 's'} {generations[0]}-{generations[-1]} ({len(generations)}x)"
        lines.append(f"  {prefix}{label_}: {shape}  [{plural(total, 'evaluation')}]")
    return lines


def extension_plan(config: "RunConfig", events: list[dict], before: int) -> dict:
    """The plan of `--resume DIR --budget N` (`config`: the run's config with budget N, `events`: its log,
    `before`: its budget until now): run_plan over the steps it logged, kept as they were, then the
    steps it will take, as the loop goes on (step_count); `done` counts the logged ones."""
    taken = taken_counts(events)
    plan = run_plan(config, taken)
    done = sum(1 for step in plan["steps"] if step["index"] in taken)
    ahead = plan["steps"][done:]
    return {**plan, "extended_from": before, "done": done,
            "es_restart": config.uses_es and any(step["perturbed"] for step in ahead)}


def display_name(method: str) -> str:
    """A run's method named on its own (the plan's head, the table `coevolve run` prints, a run's report):
    a file or module method by its `label` (what a comparison's report calls it among the others), with
    the name it was given after it, by which its file is found: 'TournamentGA (/x/my_method.py)'; any
    other name as given ('eoh', 'islands+esopt')."""
    if not isinstance(method, str) or not looks_like_spec(parse_name(method).base):
        return str(method)
    shown = label(method)
    return method if shown == method else f"{shown} ({method})"


def format_plan(plan: dict) -> str:
    """A plan for people: one line per distinct generation, repeats folded; an extension's
    (extension_plan) the steps done, then the steps to run."""
    lines = [f"plan: {display_name(plan['method'])} on {plan['task']}, budget T = {plan['budget']}"
             + (f" (+ {plan['outside_budget']} initial candidates outside T, as the paper counts)"
                if plan["outside_budget"] else "")]
    if plan.get("m_multiplier") is not None:
        lines.append(f"  m1/m2 offspring multiplier k = {plan['m_multiplier']:g}")
    lines += [f"  {note}" for note in plan.get("notes", [])]
    what = plan.get("unit", "generation")
    if plan.get("extended_from") is not None:
        done, ahead = plan["steps"][:plan["done"]], plan["steps"][plan["done"]:]
        lines.append(f"  budget raised {plan['extended_from']} -> {plan['budget']}: the {len(done)} logged "
                     "step(s) stay as they were (one the old budget cut short stays short)")
        lines += step_lines(done, what, "done: ")
        lines += step_lines(ahead, what, "to run: ") or ["  to run: nothing"]
        if plan.get("es_restart"):
            lines.append("  σ: the updates made keep the σ of the shorter schedule; the schedule of the updates "
                         "to come is laid over the longer plan, so σ rises again here (a warm restart) "
                         "instead of staying at es.sigma_end")
    else:
        lines += step_lines(plan["steps"], what)
    refreshes = sum(1 for step in plan["steps"] if step["operator"] == DISTILL)
    # a refresh is a step of its own (the loop's, --resume's unit) though listed in its generation's line
    lines.append(f"  steps: {len(plan['steps'])}"
                 + (f" ({len(plan['steps']) - refreshes} proposing, {refreshes} skill refreshes)" if refreshes else "")
                 + f", ES updates: {plan['es_updates']}, directions per update: "
                 f"{', '.join(map(str, plan['directions'])) or '-'}")
    if plan.get("skill_refreshes"):
        lines.append(f"  skill refreshes: {plan['skill_refreshes']} ({plan['distill_requests']} analyst requests, "
                     "each charged one evaluation)")
    if plan.get("skill_trials"):
        lines.append(trials_line(plan["skill_trials"], plan.get("skill_trial_sides")))
    lines += [f"  warning: {warning}" for warning in plan.get("warnings", [])]
    lines.append(f"  total: {plan['evaluations']} evaluations"
                 + (f" = T {plan['budget']} + {plan['outside_budget']} initial" if plan["outside_budget"]
                    else f" = T {plan['budget']}" if plan["evaluations"] == plan["budget"]
                    else f" (the plan ends before T = {plan['budget']})"))
    return "\n".join(lines)


def trials_line(totals: list[int], sides: list | None) -> str:
    """The plan's line on judged trials: each one's requests and, unless every trial splits evenly
    (within one), how many show the version on trial. `sides`: run_plan's skill_trial_sides (None: a
    plan kept by older code, totals only)."""
    even = sides is None or all(abs(on_trial - patched) <= 1 for on_trial, patched in sides)
    split = ("half a side" if even else
             f"{', '.join(str(on_trial) for on_trial, _ in sides[:-1])} of them showing the version on trial: "
             "an ES generation's members all see one version")
    *judged, last = totals
    return ("  skill versions judged: "
            + (f"{plural(len(judged), 'trial')} at the refreshes, of {', '.join(map(str, judged))} requests ({split}); "
               if judged else "")
            + f"the last version on trial for {last} requests"
            + ("" if even or not last else f" ({sides[-1][0]} of them showing it)")
            + ", judged as it stands at the end")


def run_figures(config_path: Path, run_dir: Path, direction: str) -> dict[str, Path]:
    """The figures a finished run's method draws of its archive (e.g. MAP-Elites' heat map); a method
    file from the run's copy when the original is gone or edited; none when the config no longer builds."""
    from coevolve.search.runconfig import RunConfig  # here: the run config imports this registry (a cycle)

    try:
        remember_methods(run_dir, "copy")
        method = make_method(build_config(RunConfig, read_toml(config_path)))
    except UsageError:
        return {}
    method.direction = direction
    return method.figures(Path(run_dir))
