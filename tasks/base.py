"""The contracts a task fulfils. A heuristic-design task is a template program
plus an evaluator (LLM4AD's split); the search loop and the sandbox know tasks
only through this protocol and the registry.

The evaluator is cut in two along the sandbox's trust boundary: `decide`
runs the heuristic (in the candidate's process) and yields only its
decisions, as plain data; `score` checks them and computes the objective on
the task's own copy of the instances (in the trusted worker). A heuristic
therefore cannot reach the code or the state that scores it.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Protocol, Sequence, get_args, runtime_checkable

import numpy as np

from coevolve.base.untrusted import clean

Direction = Literal["min", "max"]


class InvalidSolution(Exception):
    """A heuristic produced an infeasible or malformed decision (visited node,
    wrong type, NaN ...). The sandbox turns it into the `invalid` failure."""


ReferenceKind = Literal["exact", "best-known", "bound"]
REFERENCE_KINDS: tuple[str, ...] = get_args(ReferenceKind)


@dataclass(frozen=True)
class Reference:
    """What `reference()` returns for a set that has one (None where it has none): the loop's gap, `coevolve
    eval`'s and the comparison's test scores read it. Anything else (a bare float, a raise) is taken as
    no reference, with a warning naming the task's line (tasks.check.checked_reference)."""

    value: float  # a finite real number, in the objective's units (the mean over the set, as score() is)
    kind: ReferenceKind
    source: str  # e.g. "LKH-3 via elkai", "dynamic programming", "C(n,w) bound"


@runtime_checkable
class HeuristicTask(Protocol):
    name: str  # registry key, e.g. "tsp_construct"
    description: str  # the problem, in words, for prompts
    function_name: str  # e.g. "select_next_node"
    template: str  # a complete baseline program: imports, signature, docstring, body
    direction: Direction
    train: tuple[str, int]  # (split, size) scored during search, e.g. ("train", 50)

    def splits(self) -> dict[str, list[int]]:
        """split name -> available instance sizes."""

    def instances(self, split: str, size: int) -> Any:
        """Deterministic instance set, regenerated from seeds (cached is fine)."""

    def decide(self, fn: Callable[..., Any], instances: Any) -> Iterator[Any]:
        """Untrusted side: run heuristic `fn` and yield its decisions for each
        instance, in order (one item per instance; a set that is not a
        sequence counts as one). Decisions are plain data that travel on the
        sandbox's wire: numbers, lists, int64/float64 numpy arrays. Raises
        InvalidSolution for a bad choice it sees."""

    def score(self, decisions: list[Any], instances: Any) -> float:
        """Trusted side: check every decision (a full tour, a feasible
        packing, ...; InvalidSolution otherwise) and return the mean
        objective computed from `instances`, never from the decisions' claims:
        a real number (an int or a float, numpy's too; not a bool, a string or
        an array: tasks.check.real_number), finite for a valid program."""

    def instance_seconds(self, size: int) -> float:
        """CPU seconds a heuristic may spend on one instance of `size` (and on
        loading): the sandbox's per-instance limit, so a hang fails fast."""

    def reference(self, split: str, size: int) -> Reference | None:
        """Reference objective for a set: a Reference, or None where the set has none (never a bare
        number, never a raise). Asked in the owner's process: by a run as it ends (its training set), by
        `coevolve eval` and a comparison's test scoring (each set scored), by `coevolve check-task` (the
        training set and every split's smallest set; a task file's, not a built-in's). May be slow (a
        solver): cache it (tasks/references.py)."""

    # Optional, read by the sandbox when present (not part of the protocol check):
    #   instance_scores(decisions, instances) -> list[float]: each instance's objective, trusted side,
    #     whose mean is score() (check-task holds the template to it). The sandbox calls score() for the
    #     verdict and the objective, then this on the decisions score() accepted, and hands the profile
    #     back (MAP-Elites' `spread` and `wins`, the notes against the template); what either raises is
    #     the program's `invalid` verdict, naming the method, as is a value that is not a real number
    #     (each one as score()'s) or, where the objective is their mean, one that is nan or inf (named by
    #     its index). Where they disagree, score() is the objective.
    #   score_is_instance_mean: bool (default False): True declares score() to be by definition the mean
    #     of instance_scores() (every built-in task that has them: the ACO tasks' colony runs are too
    #     costly to run twice); the sandbox then computes the profile once and takes its mean as the
    #     objective WITHOUT calling score(), so a check that is only in score() is skipped. A subclass
    #     overriding score() or instance_scores() below an inherited flag is not covered by it
    #     (tasks.check.declared_instance_mean).
    #   decision_bytes(size) -> int: the most one decision's arrays weigh on the wire
    #     (default 8 * (size + 2) ** 2 + 4096: a tour, a pick list, a prior matrix);
    #     every frame a candidate sends is bounded by it.
    #   sandbox_environment: tuple[str, ...]: names of the owner's environment
    #     variables a candidate may see (none by default).
    #   cascade_stage: tuple[str, int]: an evaluation cascade for expensive evaluators
    #     (see `declared_cascade`): a cheap first set, one of splits(), scored first;
    #   cascade_margin: float (default 0.0) and cascade_against: "worst" | "median" |
    #     "best" (default "worst"): the bar it must clear, relative to the current archive.
    #   decision_descriptors: dict[str, tuple[float, float]] and
    #     describe_decisions(decisions, instances) -> {name: value}: behaviour descriptors of a
    #     program's decisions (e.g. how greedy its tours are), computed in the trusted worker after
    #     score() accepted them and handed back with the objective (`behaviour_of`); MAP-Elites'
    #     grid may use them. Declared ranges bound the grid's edge cells.
    #   feedback(decisions, instances) -> str: a short note on a valid program's decisions (which
    #     instances it does badly on, what constraint it sits against), computed in the trusted worker
    #     after score() accepted them (`feedback_of`); the proposer sees it beside the parent's score
    #     ([context] feedback), as OpenEvolve's artifacts and ShinkaEvolve's text feedback do.


def template_function(task: HeuristicTask) -> Callable[..., Any]:
    """The task's template loaded in this process (our own code, not a
    candidate's: no sandbox): its `function_name`. What the template raises
    while loading propagates; a template without the function is a KeyError."""
    namespace: dict[str, Any] = {"__name__": "template"}
    exec(compile(task.template, "<template>", "exec"), namespace)
    if not callable(namespace.get(task.function_name)):
        raise KeyError(f"the template defines no function {task.function_name!r}")
    return namespace[task.function_name]


# A program runs with `random` and numpy's legacy global generator seeded: children would otherwise
# draw from fresh entropy (`random` reseeds after a fork) or from the worker's state, and a heuristic
# that calls random.choice would score differently each time: a resumed run, a rerun or a test-set
# rescore would not reproduce it. The sandbox seeds a candidate with PROGRAM_SEED, or with each of
# 0..k-1 under [sandbox] seeds = k (a randomised heuristic scored under several: coevolve/sandbox/pool.py).
PROGRAM_SEED = 0


def seed_program_generators(seed: int = PROGRAM_SEED) -> None:
    """`random` and numpy's legacy global generator, as a program finds them.
    (`numpy.random.default_rng()` with no seed draws from the OS: docs/sandbox.md.)"""
    random.seed(seed)
    np.random.seed(seed)


def template_decisions(task: HeuristicTask, seed: int = PROGRAM_SEED, instances: Any = None) -> tuple[list[Any], Any]:
    """The template's decisions on the training set (`instances`, when the caller has them built) and
    those instances, in this process (the task's own code, as the loop scores the template for its
    summary), its generators seeded as the sandbox seeds a candidate's (this process's own draws are
    put back after)."""
    if instances is None:
        instances = task.instances(*task.train)
    saved = random.getstate(), np.random.get_state()
    try:
        seed_program_generators(seed)
        return list(task.decide(template_function(task), instances)), instances
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])


def template_runs(task: HeuristicTask, seeds: int = 1) -> list[tuple[list[Any], Any]]:
    """`template_decisions` under each of the seeds 0..seeds-1, as the sandbox scores a candidate under
    [sandbox] seeds (a randomised template is then compared as a mean, as its candidates are)."""
    instances = task.instances(*task.train)  # built once: every seed decides on the same set
    return [template_decisions(task, seed, instances) for seed in range(seeds)]


def column_means(rows: Sequence[Sequence[float] | None]) -> list[float] | None:
    """Each position's mean over `rows` (per-instance objectives under several seeds); None when there
    are none, or one is missing or of another length."""
    if not rows or any(r is None or len(r) != len(rows[0]) for r in rows):
        return None
    return [math.fsum(column) / len(rows) for column in zip(*rows)]


def mean_profile(task: HeuristicTask, runs: list[tuple[list[Any], Any]]) -> list[float] | None:
    """Each training instance's objective (`instance_scores`), its mean over `runs`."""
    return column_means([[float(v) for v in task.instance_scores(*run)] for run in runs])


def template_profile(task: HeuristicTask, seeds: int = 1) -> list[float] | None:
    """The template's per-instance train objectives (a task with `instance_scores`), each the mean over
    `seeds` seeds."""
    return mean_profile(task, template_runs(task, seeds))


def evaluate_in_process(task: HeuristicTask, fn: Callable[..., Any], instances: Any) -> float:
    """Both halves of the evaluator in this process, without the sandbox
    (tests, references, benchmarks): score(decide(...)). Same value to the bit
    as the sandbox gives."""
    return task.score(list(task.decide(fn, instances)), instances)


STARTS = ("template", "reference")


def starting_program(task: Any, which: str) -> str:
    """The program a run starts from: the task's template (ours: a working
    baseline), or with "reference" the reference code's seed function where the
    task defines one (`reference_seed`), else its template."""
    if which not in STARTS:
        raise ValueError(f"unknown starting program {which!r} (known: {', '.join(STARTS)})")
    if which == "reference":
        return getattr(task, "reference_seed", None) or task.template
    return task.template


CASCADE_AGAINST = ("worst", "median", "best")


@dataclass(frozen=True)
class Cascade:
    """An evaluation cascade a task declares (`cascade_stage`, optional
    `cascade_margin`, `cascade_against`): each new candidate is scored first
    on `stage`, a cheap set (a few instances); only if that objective is no
    worse than `margin` (relative) behind the current archive's `against`
    member is it scored on the training set. coevolve.search.cascade runs it."""

    stage: tuple[str, int]
    margin: float = 0.0
    against: str = "worst"


def declared_cascade(task: Any) -> Cascade | None:
    """The cascade `task` declares, None without `cascade_stage`; a ValueError
    whose message is one line naming the attribute when it is malformed
    (checked against splits(): tasks/check.py reports it before any engine)."""
    stage = getattr(task, "cascade_stage", None)
    margin = getattr(task, "cascade_margin", None)
    against = getattr(task, "cascade_against", None)
    if stage is None:
        if margin is not None or against is not None:
            named = "cascade_margin" if margin is not None else "cascade_against"
            raise ValueError(f"{named}: set without cascade_stage (the cheap first set, e.g. (\"quick\", 50))")
        return None
    if not (isinstance(stage, (tuple, list)) and len(stage) == 2 and isinstance(stage[0], str)
            and isinstance(stage[1], (int, np.integer)) and not isinstance(stage[1], bool)):
        raise ValueError(f"cascade_stage: expected a (split, size) pair such as (\"quick\", 50), got {stage!r:.60}")
    if margin is None:
        margin = 0.0
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not np.isfinite(margin) or margin < 0:
        raise ValueError(f"cascade_margin: expected a finite number >= 0 (0.1 = within 10%), got {margin!r:.60}")
    if against is None:
        against = "worst"
    if against not in CASCADE_AGAINST:
        raise ValueError(f"cascade_against: expected one of {', '.join(CASCADE_AGAINST)}, got {against!r:.60}")
    return Cascade((stage[0], int(stage[1])), float(margin), against)


# How many instances the built-in tasks' describe_decisions read at most: a behaviour summary needs no
# more than a training set (64); the worker describes training-set scorings only, and a user's task may
# have a larger training set.
DESCRIBED_INSTANCES = 64


def described_once(describe: Callable[[Any, list[Any], Any], dict[str, float]]) -> Callable[..., dict[str, float]]:
    """A task's `describe_decisions` computed once per evaluation: the sandbox's worker asks for a
    program's descriptors (`behaviour_of`) and then for its note (`feedback_of`), which the built-in
    tasks write from the same values. The last call's arguments are held, so an identity match is the
    same objects, which the worker does not change in between."""
    memo = f"_last_{describe.__name__}"

    @functools.wraps(describe)
    def once(self: Any, decisions: list[Any], instances: Any) -> dict[str, float]:
        last = self.__dict__.get(memo)
        if last is None or last[0] is not decisions or last[1] is not instances:
            last = (decisions, instances, describe(self, decisions, instances))
            self.__dict__[memo] = last
        return dict(last[2])
    return once


def declared_behaviour(task: Any) -> dict[str, tuple[float, float]]:
    """The decision descriptors `task` declares ({name: (low, high)}); {} without any. A ValueError
    whose message is one line naming the attribute when the declaration is malformed (tasks/check.py
    reports it before any engine)."""
    declared = getattr(task, "decision_descriptors", None)
    if declared is None:
        return {}
    if not callable(getattr(task, "describe_decisions", None)):
        raise ValueError("decision_descriptors: declared without a describe_decisions(decisions, instances) method")
    if not isinstance(declared, dict):
        raise ValueError(f"decision_descriptors: expected {{name: (low, high)}}, got {type(declared).__name__}")
    ranges: dict[str, tuple[float, float]] = {}
    for name, bounds in declared.items():
        try:
            low, high = (float(b) for b in bounds)
        except (TypeError, ValueError):
            low = high = math.nan
        if not (isinstance(name, str) and name.isidentifier() and math.isfinite(low) and math.isfinite(high)
                and low < high):
            raise ValueError(f"decision_descriptors: expected {{name: (low, high)}} with finite low < high, "
                             f"got {name!r:.40}: {bounds!r:.40}")
        ranges[name] = (low, high)
    return ranges


def behaviour_of(task: Any, decisions: list[Any], instances: Any) -> dict[str, float] | None:
    """Trusted side: the task's decision descriptors of `decisions` (already accepted by score()),
    only the declared names with finite values; None when the task declares none, or when its
    describe_decisions raises or gives nothing usable. Never raises: a descriptor is a hint for the
    archive, and the program's objective stands without it."""
    try:
        names = declared_behaviour(task)
        if not names:
            return None
        values = {str(k): float(v) for k, v in dict(task.describe_decisions(decisions, instances)).items()
                  if k in names and not isinstance(v, bool)}
    except Exception:  # a task's bug (or a decision it did not foresee) costs the descriptors, not the score
        return None
    kept = {k: v for k, v in values.items() if math.isfinite(v)}
    return kept or None


FEEDBACK_CHARS = 1000  # the most of a task's note a result carries; prompts cut it further


def feedback_of(task: Any, decisions: list[Any], instances: Any) -> str:
    """Trusted side: the task's note on `decisions` (already accepted by score()), one string without
    control characters, cut to FEEDBACK_CHARS; "" when the task writes none, or when its `feedback`
    raises or returns something other than a string (check-task names that; the objective stands)."""
    hook = getattr(task, "feedback", None)
    if not callable(hook):
        return ""
    try:
        note = hook(decisions, instances)
    except Exception:  # a task's bug costs the note, not the score
        return ""
    return clean(note).strip()[:FEEDBACK_CHARS] if isinstance(note, str) else ""  # its start says most


def instance_count(instances: Any) -> int:
    """How many instances a set holds (a set that is not a sequence counts as one,
    as `decide` yields one item per instance)."""
    try:
        return len(instances)
    except TypeError:
        return 1


def gap(objective: float, reference: float, direction: Direction) -> float:
    """Relative distance to the reference, positive when worse (0.05 = 5% worse)."""
    if reference == 0:
        raise ValueError("gap is undefined for a zero reference")
    diff = objective - reference if direction == "min" else reference - objective
    return diff / abs(reference)


@runtime_checkable
class AgentTask(Protocol):
    """A multi-turn environment an LLM agent acts in, one text action per turn.

    Pure Python and deterministic: the agent loop owns the LLM, the task owns
    the world. `state` is whatever the task needs and is opaque to the loop.
    """

    name: str
    system_prompt: str  # rules of the game and the action format
    stop: tuple[str, ...]  # stop strings that end one action

    def cases(self, split: str, n: int, seed: int) -> list[Any]:
        """`n` deterministic episodes of `split` ("train" or "eval") for `seed`;
        each case has a string `id` unique within its split."""

    def reset(self, case: Any) -> tuple[Any, str]:
        """Fresh episode state and the first observation shown to the agent."""

    def step(self, state: Any, action_text: str) -> tuple[str, bool]:
        """Apply one raw LLM action: (observation, episode done)."""

    def max_turns(self, case: Any) -> int:
        """Turn budget of an episode."""

    def reward(self, state: Any) -> float:
        """Episode reward, read at the end (0..1)."""

    def metrics(self, state: Any) -> dict[str, float]:
        """Diagnostics of an episode (moves, errors, ...) for logs and reports;
        "progress" in [0, 1], when given, is a dense signal for fitness shaping."""


def case_content(task: Any, case: Any) -> Any:
    """What makes two of an agent task's cases the same problem (held-out sets must not hold a training
    problem): the task's `case_key(case)` where it declares one, else the case's fields other than `id`
    (a dataclass or any object with attributes), else its text. The fallback can only see what the
    case holds: a task whose cases are drawn from hidden state should declare `case_key`."""
    key = getattr(task, "case_key", None)
    if callable(key):
        return key(case)
    fields = getattr(case, "__dict__", None)
    if isinstance(fields, dict):
        return tuple(sorted((name, repr(value)) for name, value in fields.items() if name != "id"))
    return repr(case)


class ToolOutput(Protocol):
    """What a Python tool returns (coevolve.sandbox.ToolResult is one)."""

    @property
    def ok(self) -> bool: ...

    def observation(self) -> str:
        """One text block for the agent: output, then the error if any."""


# code -> its output; tasks receive a tool, they never build the sandbox behind it
PythonTool = Callable[[str], ToolOutput]


def as_index(value: Any, upper: int, what: str) -> int:
    """Validate a heuristic's choice of an index in [0, upper). Accepts Python
    and numpy integers (or a one-element integer array, which numpy idioms
    like `np.where(...)[0][:1]` produce); anything else is InvalidSolution
    with a message naming what came back."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iu":
        value = value.reshape(()).item()
    if value is None:
        raise InvalidSolution(f"returned None instead of a {what} index")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and np.isnan(value):
            raise InvalidSolution(f"returned NaN instead of a {what} index")
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise InvalidSolution(f"returned {type(value).__name__} {shown}, expected an int {what} index")
    index = int(value)
    if not 0 <= index < upper:
        raise InvalidSolution(f"{what} index {index} is out of range 0..{upper - 1}")
    return index


def call_budget(calls: int, per_call_s: float, base_s: float = 2.0) -> float:
    """A per-instance CPU limit for `calls` heuristic calls: generous (tens
    of times what the published heuristics need), so only a hang or a
    pathologically slow program meets it."""
    return base_s + calls * per_call_s


def check_array(value: Any, kind: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """Trusted-side check of a decision array: numpy, dtype kind `kind`
    ("i" or "f") and exactly `shape`; InvalidSolution otherwise."""
    if not isinstance(value, np.ndarray) or value.dtype.kind != kind:
        shown = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise InvalidSolution(f"{what} is {shown}, expected a numpy {'integer' if kind == 'i' else 'float'} array")
    if value.shape != shape:
        raise InvalidSolution(f"{what} has shape {value.shape}, expected {shape}")
    return value


@dataclass(frozen=True)
class Draw:
    """One instance set in a seeded stream: drawn by `make(rng)` in stream order."""

    split: str
    size: int
    make: Callable[[np.random.RandomState], Any]
    count: int | None = None  # instances it makes, when known without drawing (draws_of knows)


def draws_of(make: Callable[[np.random.RandomState, int, int], Any],
             plan: list[tuple[str, int, tuple[int, ...]]]) -> list[Draw]:
    """The draws of a seeded stream, in `plan` order: for each (split, count,
    sizes), one set per size of `count` instances made by make(rng, count, size)."""
    return [Draw(split, size, lambda rng, count=count, size=size: make(rng, count, size), count)
            for split, count, sizes in plan for size in sizes]


def unit_square(rng: np.random.RandomState, count: int, size: int) -> np.ndarray:
    """`count` instances of `size` uniform points (or (weight, value) pairs) in [0, 1)^2."""
    return rng.rand(count, size, 2)


class SeededSets:
    """Instance sets drawn in a fixed order from one RandomState(seed) stream.

    The reference repos draw several sets one after another from the global
    numpy seed; a set is reproducible only if every earlier draw happens
    first. A private RandomState gives the same stream without touching
    numpy's global state. Sets are drawn lazily (up to the one asked for) and
    cached."""

    def __init__(self, seed: int, draws: list[Draw]):
        self.seed = seed
        self.draws = draws
        self._cache: dict[tuple[str, int], Any] = {}

    def splits(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for draw in self.draws:
            result.setdefault(draw.split, []).append(draw.size)
        return result

    def count(self, split: str, size: int) -> int | None:
        """How many instances a set holds, without drawing it (None: its draw does not say)."""
        return next((d.count for d in self.draws if (d.split, d.size) == (split, size)), None)

    def get(self, split: str, size: int) -> Any:
        key = (split, size)
        if key in self._cache:
            return self._cache[key]
        if key not in {(d.split, d.size) for d in self.draws}:
            raise KeyError(f"no instance set {split}{size} (available: {self.splits()})")
        rng = np.random.RandomState(self.seed)
        for draw in self.draws:
            drawn = draw.make(rng)  # always draw, even if cached, to advance the stream
            if isinstance(drawn, np.ndarray):
                drawn.setflags(write=False)  # shared by every evaluation: nobody may edit it
            self._cache.setdefault((draw.split, draw.size), drawn)
            if (draw.split, draw.size) == key:
                break
        return self._cache[key]
