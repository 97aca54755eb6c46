"""Search methods. A method only decides *what to ask for*: a fixed plan of
steps (operator, how many candidates, base or perturbed models) and the parents
of each request. The loop owns the budget, the generator, the sandbox and ES.

Because the plan does not depend on results, the number of ES generations a
budget allows is known before the run starts (the cosine σ schedule needs it).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Protocol

import numpy as np

from coevolve.base.config import config_error
from coevolve.search.population import Candidate, Population

if TYPE_CHECKING:  # the config module validates method and operator names with this one
    from coevolve.search.runconfig import RunConfig

BASE_METHODS = ("sample", "eoh", "sample+esopt", "eoh+esopt")
# +trace2skill: a skill distilled from the run's own candidates every skill.every steps, shown in every prompt
METHODS = BASE_METHODS + tuple(f"{m}+trace2skill" for m in BASE_METHODS)
OPERATORS = ("e1", "e2", "m1", "m2", "m3", "repair")  # what configs may name (i1 starts every run)


def check_method(name: str) -> str:
    """`name` if it is a heuristic-search method, else ValueError listing them (configs report it)."""
    if name not in METHODS:
        raise ValueError(f"must be one of {', '.join(METHODS)}")
    return name


def check_operator(name: str) -> str:
    """`name` if a config may name it as an operator, else ValueError listing them."""
    if name not in OPERATORS:
        raise ValueError(f"must be one of {', '.join(OPERATORS)}")
    return name


@dataclass(frozen=True)
class StepSpec:
    operator: str  # i1, e1, e2, m1, m2, m3, repair; "distill": a Trace2Skill refresh (`count` analyst requests)
    count: int  # candidates requested (before the budget cuts the batch)
    perturbed: bool  # True: each ES member proposes `count / G` of them from its own perturbed model
    generation: int = 0  # EoH: 0 for the initial population, then 1, 2, ...; Sample: the batch number


class Method(Protocol):
    name: str

    def plan(self) -> Iterator[StepSpec]:
        """The steps in order; the loop stops at the budget (or where a finite plan ends)."""

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        """Parents for one request; [] for parentless operators."""


# None: the method's `parents`. repair's one parent is a failed candidate the loop picks (not the population's).
PARENT_COUNTS = {"i1": 0, "e1": None, "e2": None, "m1": 1, "m2": 1, "m3": 1, "repair": 0, "distill": 0}
DISTILL = "distill"
SCALED_OPERATORS = ("m1", "m2")  # the paper's offspring multiplier k applies to these


class SampleMethod:
    """Independent i1 proposals in batches (the paper's Sample); with ESOpt each
    batch is one ES generation, one batch slot per perturbed model."""

    def __init__(self, batch: int, perturbed: bool) -> None:
        self.name = "sample+esopt" if perturbed else "sample"
        self.batch = batch
        self.perturbed = perturbed

    def plan(self) -> Iterator[StepSpec]:
        return (StepSpec("i1", self.batch, self.perturbed, n) for n in itertools.count(1))

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        return []


class EohMethod:
    """EoH: an i1 initial population, then generations of e1, e2, m1, m2 (m3
    optional), survival of the best N after each operator. With ESOpt the
    operators in `perturbed_ops` (m1, m2 by default, as in the paper) draw each
    candidate from its own perturbed model, one ES update per such operator.
    `counts` gives each operator's candidates per generation; `generations` > 0
    ends the plan after that many generations."""

    def __init__(self, init: int, counts: dict[str, int], operators: list[str], parent_count: int,
                 perturbed_ops: tuple[str, ...] = (), perturbed_counts: dict[str, int] | None = None,
                 generations: int = 0) -> None:
        self.name = "eoh+esopt" if perturbed_ops else "eoh"
        self.init = init
        self.counts = dict(counts)
        self.operators = list(operators)
        self.parent_count = parent_count
        self.perturbed_ops = tuple(perturbed_ops)
        self.perturbed_counts = dict(perturbed_counts or {})
        self.generations = generations

    def plan(self) -> Iterator[StepSpec]:
        yield StepSpec("i1", self.init, False, 0)
        for generation in itertools.count(1):
            if self.generations and generation > self.generations:
                return
            for op in self.operators:
                if op in self.perturbed_ops:
                    yield StepSpec(op, self.perturbed_counts.get(op, self.counts[op]), True, generation)
                else:
                    yield StepSpec(op, self.counts[op], False, generation)

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        wanted = PARENT_COUNTS[operator]
        if wanted is None:
            wanted = self.parent_count
        return population.select(wanted, rng) if wanted else []


class SkillMethod:
    """A method + trace2skill: the base method's plan with a skill refresh (a
    "distill" step of `analysts` requests) after every `every` of its steps."""

    def __init__(self, base: Method, every: int, analysts: int) -> None:
        self.base = base
        self.name = f"{base.name}+trace2skill"
        self.every = every
        self.analysts = analysts

    def plan(self) -> Iterator[StepSpec]:
        for index, spec in enumerate(self.base.plan(), start=1):
            yield spec
            if index % self.every == 0:
                yield StepSpec(DISTILL, self.analysts, False, spec.generation)

    def parents(self, operator: str, population: Population, rng: np.random.Generator) -> list[Candidate]:
        return [] if operator == DISTILL else self.base.parents(operator, population, rng)


def m_multiplier(config: RunConfig) -> float:
    """The paper's k for this run's budget: eoh.m_multiplier, or (0) the k that
    spends the budget T over eoh.generations generations of e1, e2 (offspring
    each) and m1, m2 (k * offspring each)."""
    eoh = config.eoh
    if eoh.m_multiplier > 0:
        return eoh.m_multiplier
    k = config.run.budget / (2 * eoh.offspring * eoh.generations) - 1
    if k <= 0:
        raise config_error("eoh.m_multiplier", f"= 0 scales m1/m2 to the budget, but budget {config.run.budget} "
                           f"leaves no m1/m2 candidates over {eoh.generations} generations of "
                           f"{2 * eoh.offspring} e1/e2 candidates; raise the budget or set eoh.m_multiplier")
    return k


def init_size(config: RunConfig) -> int:
    return config.eoh.init or config.eoh.population


def outside_budget(config: RunConfig) -> int:
    """Evaluations charged beyond run.budget: the EoH initial population when
    eoh.init_in_budget is false (the paper counts T without it)."""
    if config.run.method.startswith("eoh") and not config.eoh.init_in_budget:
        return init_size(config)
    return 0


def make_method(config: RunConfig) -> Method:
    base = make_base_method(config)
    if config.uses_skill:
        return SkillMethod(base, config.skill.every, config.skill.analysts)
    return base


def planned_refreshes(config: RunConfig) -> tuple[int, int]:
    """(skill refreshes, proposal steps) the run's budget allows."""
    budget = config.run.budget + outside_budget(config)
    steps = planned_steps(make_method(config), budget, config.es.proposals_per_member)
    refreshes = sum(s.operator == DISTILL for s in steps)
    return refreshes, len(steps) - refreshes


def make_base_method(config: RunConfig) -> Method:
    per_member = config.es.proposals_per_member
    es_count = config.es.population * per_member  # 0: as the plan's step
    method = config.run.method.removesuffix("+trace2skill")
    if method in ("sample", "sample+esopt"):
        perturbed = method == "sample+esopt"
        return SampleMethod(es_count if perturbed and es_count else config.sample.batch, perturbed)
    eoh = config.eoh
    k = m_multiplier(config)
    counts = {op: max(1, round(eoh.offspring * k)) if op in SCALED_OPERATORS else eoh.offspring
              for op in eoh.operators}
    perturbed_ops = tuple(config.es.operators) if method == "eoh+esopt" else ()
    perturbed_counts = {op: es_count for op in perturbed_ops} if es_count else {}
    return EohMethod(init=init_size(config), counts=counts, operators=eoh.operators, parent_count=eoh.parents,
                     perturbed_ops=perturbed_ops, perturbed_counts=perturbed_counts, generations=eoh.generations)


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


def planned_steps(method: Method, budget: int, per_member: int) -> list[PlannedStep]:
    """The steps the loop will run under `budget` evaluations, in order."""
    steps = []
    left = budget
    for index, spec in enumerate(method.plan()):
        if left <= 0:
            break
        granted = min(spec.count, left)
        left -= granted
        members = members_for(granted, per_member) if spec.perturbed else 0
        perturbed = spec.perturbed and members >= 2
        steps.append(PlannedStep(index, spec.generation, spec.operator, granted, perturbed,
                                 members if perturbed else 0))
    return steps


def planned_es_generations(method: Method, budget: int, per_member: int) -> int:
    """ES updates the plan makes before the budget runs out. A budget-cut last step
    still updates when at least two members proposed something."""
    return sum(1 for step in planned_steps(method, budget, per_member) if step.perturbed)


def es_directions(method: Method, budget: int, per_member: int) -> int:
    """Perturbations ESOpt must hand out per update: the largest perturbed step's members."""
    return max((s.directions for s in planned_steps(method, budget, per_member)), default=0)


def es_population(config: RunConfig) -> int:
    """ES members per update for this run: es.population, or (0) the largest
    perturbed step's members. A low-rank engine needs a LoRA slot for each."""
    if config.es.population:
        return config.es.population
    method = make_method(config)
    budget = config.run.budget + outside_budget(config)
    return max(es_directions(method, budget, config.es.proposals_per_member), 2)


def run_plan(config: RunConfig) -> dict:
    """The plan of a run as data: what `coevolve run --plan` prints and what
    `coevolve compare` checks arms against each other with."""
    method = make_method(config)
    extra = outside_budget(config)
    steps = planned_steps(method, config.run.budget + extra, config.es.proposals_per_member)
    updates = [s for s in steps if s.perturbed]
    return {
        "method": config.run.method, "task": config.run.task, "budget": config.run.budget,
        "outside_budget": extra,
        "m_multiplier": m_multiplier(config) if config.run.method.startswith("eoh") else None,
        "steps": [dataclasses.asdict(s) for s in steps],
        "evaluations": sum(s.count for s in steps),
        "generations": max((s.generation for s in steps), default=0),
        "es_updates": len(updates),
        "skill_refreshes": sum(s.operator == DISTILL for s in steps),
        "distill_requests": sum(s.count for s in steps if s.operator == DISTILL),
        "directions": sorted({s.directions for s in updates}),
    }


def format_plan(plan: dict) -> str:
    """A plan for people: one line per distinct generation, repeats folded."""
    lines = [f"plan: {plan['method']} on {plan['task']}, budget T = {plan['budget']}"
             + (f" (+ {plan['outside_budget']} initial candidates outside T, as the paper counts)"
                if plan["outside_budget"] else "")]
    if plan["m_multiplier"] is not None:
        lines.append(f"  m1/m2 offspring multiplier k = {plan['m_multiplier']:g}")
    groups: list[tuple[str, list[int]]] = []
    by_generation: dict[int, list[dict]] = {}
    for step in plan["steps"]:
        by_generation.setdefault(step["generation"], []).append(step)
    for generation, steps in by_generation.items():
        shape = ", ".join(f"skill refresh ({s['count']} analysts)" if s["operator"] == DISTILL else
                          f"{s['operator']} {s['count']}" + (f" (ES, {s['directions']} directions)"
                                                             if s["perturbed"] else "")
                          for s in steps)
        if groups and groups[-1][0] == shape:
            groups[-1][1].append(generation)
        else:
            groups.append((shape, [generation]))
    what = "batch" if plan["method"].startswith("sample") else "generation"
    for shape, generations in groups:
        total = sum(s["count"] for s in plan["steps"] if s["generation"] in generations)
        if generations == [0] and what == "generation":
            label = "initial population"
        elif len(generations) == 1:
            label = f"{what} {generations[0]}"
        else:
            label = f"{what}{'es' if what == 'batch' else 's'} {generations[0]}-{generations[-1]} ({len(generations)}x)"
        lines.append(f"  {label}: {shape}  [{total} evaluations]")
    lines.append(f"  steps: {len(plan['steps'])}, ES updates: {plan['es_updates']}, directions per update: "
                 f"{', '.join(map(str, plan['directions'])) or '-'}")
    if plan.get("skill_refreshes"):
        lines.append(f"  skill refreshes: {plan['skill_refreshes']} ({plan['distill_requests']} analyst requests, "
                     "each charged one evaluation)")
    lines.append(f"  total: {plan['evaluations']} evaluations"
                 + (f" = T {plan['budget']} + {plan['outside_budget']} initial" if plan["outside_budget"]
                    else f" = T {plan['budget']}" if plan["evaluations"] == plan["budget"]
                    else f" (the plan ends before T = {plan['budget']})"))
    return "\n".join(lines)
