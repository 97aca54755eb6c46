"""Typed records: what one module writes and another reads.

A run's files and the values handed between the loop, the comparison and the
report are these types, not dicts read by key:

- `Candidate`: one requested heuristic and what became of it (candidates.jsonl,
  one per line; the search population holds them);
- `Evaluation`: what scoring one candidate gave, as a step event logs it (the
  sandbox's richer `EvalResult` turns into one with `EvalResult.evaluation()`);
- `SearchSummary` / `AgentSummary`: summary.json of a heuristic or an agent
  run, told apart by their `kind` (`read_summary`);
- `TestScores` / `TestScore`: a run's test.json, its best heuristic's scores;
- `ComparisonCell`: one planned run of a comparison as the report collects it;
- `AgentEvalRound`: one held-out evaluation of an agent run (eval.jsonl);
- `IslandsSnapshot` / `MapElitesSnapshot` / `ParetoSnapshot`: an archive
  method's part of a snapshot (population/gen_NNNN.json), as its
  `snapshot()` writes it and the dashboard's archive panel reads it.

pydantic v2 models rather than dataclasses: reading an old file is the hard
part, and a model states it on the field lines (a field added since has a
default; nested records validate themselves; an unknown key written by newer
code is kept, not refused) with one error that names the file and the field.
The config sections use the same library.

Versions: every file record carries `schema_version` (SCHEMA_VERSION when
made or written; 0 when read from a file written before the field existed).
An archive snapshot is the exception: the loop writes the file (its step
beside the method's part), and the part keeps the shape it always had, a
field added since with a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coevolve.base.durable import atomic_write_json, read_json  # read_json: None when absent, one line when not JSON
from coevolve.base.errors import UsageError

SCHEMA_VERSION = 1

Direction = Literal["min", "max"]


class Record(BaseModel):
    """A record read from or written to a run's files. Keys this code does not
    know (a newer writer's) are kept and written back, never refused."""

    model_config = ConfigDict(extra="allow")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Versioned(Record):
    """A record that is a file, or a line of one: it says which schema wrote it."""

    schema_version: int = SCHEMA_VERSION  # `read` makes it 0 for a file written before records carried one

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "schema_version": SCHEMA_VERSION}

    @classmethod
    def read(cls, data: Any) -> Any:
        """`data` as read from a file: without a version it predates them (0)."""
        return cls.model_validate({"schema_version": 0, **data} if isinstance(data, dict) else data)


# ------------------------------------------------------------- candidates
class Evaluation(Record):
    """What scoring one candidate gave (a step event's `results` entry): an
    objective, or the failure that stands for it. An exact-code repeat of an
    earlier candidate is not scored again: it is `duplicate_of` that one."""

    objective: float | None = None
    failure: str | None = None  # a sandbox FailureKind value, "parse", "duplicate" or "invalid"
    message: str = ""
    seconds: float = 0.0
    duplicate_of: int | None = None
    profile: list[float] | None = None  # each training instance's objective (a task with instance_scores)
    behaviour: dict[str, float] | None = None  # the task's decision descriptors (a task with describe_decisions)
    feedback: str = ""  # the task's note on a valid program's decisions (a task with feedback)

    def to_event(self) -> dict[str, Any]:
        """The logged form: a repeat is its original's id alone; no profile, behaviour or feedback key
        when there is none (a step event written before they existed reads the same)."""
        if self.duplicate_of is not None:
            return {"duplicate_of": self.duplicate_of}
        absent = {name for name in ("profile", "behaviour", "feedback") if getattr(self, name) in (None, "")}
        return self.model_dump(mode="json", exclude={"duplicate_of"} | absent)


class Candidate(Versioned):
    """One requested heuristic and what became of it (a line of candidates.jsonl)."""

    id: int  # its evaluation number: 1..budget; 0: the task's template seeded into the archive
    step: int
    operator: str
    parents: list[int]
    # {"kind": "base"} | {"kind": "perturbed", "seed", "sigma", "member"} | {"kind": "endpoint", ...}
    # (written as "remote" before)
    model_state: dict[str, Any]
    code: str | None = None  # None: no code could be extracted
    idea: str | None = None
    objective: float | None = None  # None unless the code ran and gave a valid result
    # "parse"; "duplicate": a clone rejected before scoring (context.fingerprint); exact-code duplicates
    # without fingerprints keep the original's result instead
    failure: str | None = None
    message: str = ""
    seconds: float = 0.0
    duplicate_of: int | None = None
    reward: float | None = None  # ES reward, for candidates from perturbed models
    repairs: list[str] = []  # what the parser repaired (codeparse.Extracted.repairs)
    # each training instance's objective, when the task gives them (Evaluation.profile): kept for the
    # run's archive (MAP-Elites' descriptors), not written to candidates.jsonl (the step event has it)
    profile: list[float] | None = Field(None, exclude=True)
    # the task's decision descriptors (Evaluation.behaviour): a few numbers, also in candidates.jsonl
    behaviour: dict[str, float] | None = None
    feedback: str = ""  # the task's note (Evaluation.feedback), also in candidates.jsonl when there is one
    # the skill version its prompt showed (skills/vNNN; None: no skill), kept in candidates.jsonl when there is one
    skill_version: int | None = None
    # the failed candidates whose reports its prompt showed (their ids), kept in candidates.jsonl when there are some
    failures_shown: list[int] = []

    @property
    def valid(self) -> bool:
        return self.objective is not None

    def settle(self, result: Evaluation, original: "Candidate | None" = None) -> None:
        """Take the scoring's outcome; a repeat (`result.duplicate_of`) takes
        its `original`'s, in no time."""
        if result.duplicate_of is not None:
            if original is None or original.id != result.duplicate_of:
                raise ValueError(f"candidate {self.id} repeats {result.duplicate_of}, which was not given")
            result = Evaluation(objective=original.objective, failure=original.failure, message=original.message,
                                profile=original.profile, behaviour=original.behaviour, feedback=original.feedback)
        self.objective, self.failure, self.profile = result.objective, result.failure, result.profile
        self.behaviour, self.feedback = result.behaviour, result.feedback
        self.message, self.seconds = result.message, result.seconds

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        for name in ("behaviour", "feedback", "skill_version", "failures_shown"):  # no key: reads as before
            if data[name] in (None, "", []):
                del data[name]
        return data

    def to_dict(self) -> dict[str, Any]:
        return self.to_json()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Candidate":
        return cls.read(data)


# ------------------------------------------------------------- summaries
class LedgerCounts(Record):
    """The ledger's counts (coevolve.search.ledger.Ledger.to_dict): evaluations
    for search runs, episodes for agent runs."""

    budget: int
    used: int
    outcomes: dict[str, int] = {}
    llm_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parse_retries: int = 0
    clone_retries: int = 0
    llm_retries: int = 0
    seeded: int = 0  # search runs: the template scored to seed the archive, outside the budget


class TrainSet(Record):
    split: str
    size: int
    direction: Direction
    reference: float | None = None
    # why there is no reference, where the task's reference() gave none usable (raised, or no Reference)
    reference_problem: str | None = None


class BestCandidate(Record):
    id: int
    objective: float
    gap: float | None = None
    operator: str
    step: int
    idea: str | None = None
    model_state: dict[str, Any] = {}


class ESCounts(Record):
    """ES in a summary: updates made, of which `flat` moved no weight (every
    member's reward equal); search runs add the generation, the checksum and
    the engine's noise_info."""

    updates: int
    flat: int = 0  # absent from summaries written before it was counted
    generation: int | None = None
    checksum: str | None = None


class SearchSummary(Versioned):
    """summary.json of a heuristic-search run."""

    kind: Literal["search"] = "search"
    method: str
    task: str
    seed: int
    budget: int
    outside_budget: int = 0
    evaluations: int
    ledger: LedgerCounts
    valid: int
    valid_rate: float
    distinct_valid: int | None = None  # valid candidates that repeat no earlier one's code (older summaries: None)
    failures: dict[str, int] = {}  # per failure kind, repeats of a failed program's code included
    sandbox: dict[str, Any] | None = None  # what bounded the candidates
    train: TrainSet
    best: BestCandidate | None = None
    best_so_far: list[tuple[int, float]] = []  # (evaluation, best objective so far)
    population: list[int] = []
    context: dict[str, Any] | None = None  # issue 25's context: absent from older summaries
    stopped: dict[str, Any] | None = None  # a cap ended the run: {cap, used, limit, step, evaluations} (+ direction)
    es: ESCounts | None = None


class EvalRound(Record):
    """A held-out evaluation's scores: mean_reward, plus whatever the task
    scores (solved_rate, progress, ...), kept as extra keys."""

    round: int
    episodes_used: int
    mean_reward: float
    skills: list[str] = []


class AgentEvalRound(Versioned, EvalRound):
    """A line of an agent run's eval.jsonl: the round's scores and its wall time."""

    seconds: float = 0.0


class AgentSummary(Versioned):
    """summary.json of an agent run (seed and budget absent from runs written
    before the shared run machinery)."""

    kind: Literal["agent"] = "agent"
    method: str
    task: str
    seed: int | None = None
    budget: int | None = None
    rounds: int
    ledger: LedgerCounts
    eval_first: EvalRound
    eval_last: EvalRound
    evals: list[EvalRound] = []
    best_eval_reward: float
    skill: str | None = None
    config: dict[str, Any] = {}
    checksum: str | None = None
    es: ESCounts | None = None
    noise: dict[str, Any] | None = None


RunSummary = SearchSummary | AgentSummary


# ------------------------------------------------------------ test scores
class TestScore(Record):
    """One test set's score of a run's best heuristic (or of the task template)."""

    __test__ = False  # not a pytest class

    split: str
    size: int
    limit: int = 0  # > 0: the set was cut to its first `limit` instances
    objective: float | None = None
    failure: str | None = None
    message: str = ""
    instances: int = 0
    seconds: float = 0.0
    reference: float | None = None
    reference_kind: str | None = None
    gap: float | None = None


class TestScores(Versioned):
    """test.json: which file was scored (its hash), under which settings, on which sets."""

    __test__ = False

    file: str | None = None  # "best.py", "template", or None: the run had no valid heuristic
    sha256: str | None = None
    settings: dict[str, Any] = {}
    sets: list[list[Any]] = []
    scores: list[TestScore] = []

    def by_set(self) -> dict[tuple[str, int], TestScore]:
        return {(s.split, s.size): s for s in self.scores}


# ------------------------------------------------------------ comparisons
class ComparisonCell(Record):
    """One planned run of a comparison, as the report collects it from its directory."""

    model_config = ConfigDict(extra="forbid")

    task: str
    method: str
    budget: int
    seed: int
    dir: str  # relative to the comparison directory
    state: Literal["new", "partial", "finished"]  # plan.run_state
    summary: SearchSummary | None = None  # None until the run finished
    scores: dict[tuple[str, int], TestScore] = {}
    # the run's best is where it started: the task's template, one of its seed heuristics, or one of the
    # run's [start] programs
    best_is: Literal["template", "seed", "start"] | None = None


# ------------------------------------------------------ archive snapshots
GRID_BINS = 256  # cells per descriptor a MAP-Elites grid may have for the dashboard to draw it (map_elites.bins allows 64)


class SnapshotPart(Record):
    """Part of an archive snapshot (population/gen_NNNN.json). Strict, unlike the other records: the
    dashboard reads a running run's newest snapshot and must say which field is wrong rather than
    draw a string as a number or a float as a count."""

    model_config = ConfigDict(extra="allow", strict=True, validate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)  # by alias: a reset's "from" is a keyword here


class SnapshotMember(SnapshotPart):
    """One program of a snapshot's population (Population.snapshot), best first."""

    id: int
    objective: float | None = None
    operator: str = ""
    idea: str | None = None
    code: str | None = None


class ArchiveSnapshot(SnapshotPart):
    """What every method's snapshot holds: its archive's programs."""

    population: list[SnapshotMember] = []


class IslandReset(SnapshotPart):
    """One reset of the islands: the worse half emptied, each refounded from an island of the better half."""

    step: int
    evaluations: int
    reset: list[int]
    from_: list[int] = Field([], alias="from")  # the island each reset one was refounded from, in order


class IslandsSnapshot(ArchiveSnapshot):
    islands: list[list[int]]  # each island's program ids, best first
    resets: list[IslandReset] | None = None  # None: a snapshot written before resets were kept


class GridCell(SnapshotPart):
    cell: list[int]
    id: int
    objective: float | None
    descriptors: list[float] = []


class Grid(SnapshotPart):
    descriptors: list[str] = Field(min_length=1)
    bins: int = Field(ge=1, le=GRID_BINS)
    ranges: list[Annotated[list[float], Field(min_length=2, max_length=2)]]  # (low, high) per descriptor
    cells: list[GridCell]
    undescribed: int | None = None  # valid programs kept out, their descriptors not all finite (None: older)


class MapElitesSnapshot(ArchiveSnapshot):
    grid: Grid


class ParetoWin(SnapshotPart):
    id: int
    wins: int  # training instances it is the best on
    objective: float | None


class ParetoFront(SnapshotPart):
    instances: int
    wins: list[ParetoWin]  # best objective first
    unprofiled: int | None = None  # valid programs with no per-instance objectives (None: older)


class ParetoSnapshot(ArchiveSnapshot):
    pareto: ParetoFront


# -------------------------------------------------------------- reading
R = TypeVar("R", bound=BaseModel)


def _problem(exc: ValidationError) -> str:
    """The first problem of a ValidationError, as `field.path: message`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    return f"{where}: {error['msg']}"


def parse(data: Any, kind: type[R], source: str | Path) -> R:
    """`data` as a `kind`; UsageError naming the file and the field when it is not one."""
    try:
        return kind.read(data) if issubclass(kind, Versioned) else kind.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{source}: not a valid {kind.__name__}: {_problem(exc)}") from None


def read_record(path: str | Path, kind: type[R]) -> R | None:
    """A file holding one record (None when absent)."""
    data = read_json(path)
    return None if data is None else parse(data, kind, path)


def summary_kind(data: Any) -> str:
    """A summary's run kind. Summaries written before they said so: agent runs'
    were the ones with held-out evaluations (`eval_first`)."""
    if isinstance(data, dict) and isinstance(data.get("kind"), str):
        return data["kind"]
    return "agent" if isinstance(data, dict) and "eval_first" in data else "search"


def parse_summary(data: Any, source: str | Path) -> SearchSummary | AgentSummary:
    kind = summary_kind(data)
    if kind not in ("search", "agent"):
        raise UsageError(f"{source}: kind {kind!r} is not a run kind (search, agent)")
    return parse(data, AgentSummary if kind == "agent" else SearchSummary, source)


def read_summary(path: str | Path) -> SearchSummary | AgentSummary | None:
    """A run's summary.json, of either kind (None when the run has none yet)."""
    data = read_json(path)
    return None if data is None else parse_summary(data, path)


def write_record(path: str | Path, record: Record) -> None:
    """A whole-file record, atomically (coevolve.base.durable)."""
    atomic_write_json(path, record.to_json())
