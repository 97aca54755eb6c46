"""The `coevolve run` config of a heuristic search: one model per TOML section."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from coevolve.base.config import Config, Section, build_config, config_error, require
from coevolve.base.logsection import LogSection
from coevolve.base.sampling import MAX_TEMPERATURE, TEMPERATURE, Sampling
from coevolve.base.sections import (MAX_BUDGET, MAX_TIMEOUT_S, TIMEOUT, DistributedSection, EndpointSection,
                                    ModelSection, RunSection, task_named)
from coevolve.es.config import ESConfig, ESSection
from coevolve.sandbox.pool import MAX_SEEDS
from coevolve.search.population import parse_tie
from coevolve.search.methods import (BUILTIN, check_method_name, check_operator_name, declared_sections, make_method,
                                     method_class, names_a_method, parse_name, planned_refreshes, uses_es,
                                     uses_skill)
from tasks.base import STARTS


def _operators(ops: list[str], field: str) -> list[str]:
    for op in ops:
        check_operator_name(op, field)  # the operator registry's one check (coevolve/search/operators.py)
    return ops


class SearchRun(RunSection):
    _method = field_validator("method")(classmethod(lambda cls, value: check_method_name(value, "run.method") or value))


MAX_PARENTS = 100


# the cap on the sizes no budget check reaches: an initial population charged outside run.budget
# (eoh.init_in_budget = false) is spent on top of it, so it may not ask more than any run.budget may
SIZE = "at most run.budget's cap"


class EohSection(Section):
    # survivors kept after each operator (paper: 10)
    population: int = Field(10, ge=1, le=MAX_BUDGET, description=SIZE)
    offspring: int = Field(10, ge=1)  # candidates per e1/e2 step per generation (paper: 10)
    operators: list[str] = Field(["e1", "e2", "m1", "m2"], min_length=1)
    # parents shown to e1 / e2, each with its code: more than MAX_PARENTS fit no prompt, and drawn with
    # replacement an absurd count is an absurd list, made before anything is asked
    parents: int = Field(2, ge=1, le=MAX_PARENTS, description="programs shown in one prompt")
    # initial i1 candidates; 0 means `population`
    init: int = Field(0, ge=0, le=MAX_BUDGET, description="0 means eoh.population; " + SIZE)
    # m1/m2 steps ask for round(offspring * m_multiplier) candidates (the paper's k).
    # 0: scaled to the budget as in the paper, k = T / (2 * offspring * generations) - 1
    # (k = 1 at T = 1000, k = 3 at T = 2000 with 10 offspring and 25 generations).
    # At most MAX_BUDGET: one m1/m2 step would ask for more candidates than any budget pays (and a huge k
    # overflows the step's count)
    m_multiplier: float = Field(1.0, ge=0, le=MAX_BUDGET, description="0: scaled to the budget")
    generations: int = Field(0, ge=0)  # 0: generations until the budget runs out; > 0: exactly this many
    init_in_budget: bool = True  # False: the initial i1 population is charged outside T, as the paper counts
    parents_with_replacement: bool = False  # True: parents drawn with replacement (the paper's code)
    # >= 0: population duplicates by objective rounded to this many decimals (paper: 5)
    dedup_decimals: int = Field(-1, ge=-1, le=15, description="-1: exact")
    show_scores: bool = True  # operator prompts show parents' scores (ours); EoH's prompts do not
    # equal objectives told apart, in order: NAME `seconds` (the scoring's), `lines` (the program's non-blank
    # ones) or a task's decision descriptor (checked against the task when it is built: Method.check_task)
    tie_break: list[Annotated[str, StringConstraints(pattern=r"^(min|max) [A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        [], description='"min NAME" or "max NAME" (NAME: seconds, lines or a decision descriptor of the task)')

    _check_ops = field_validator("operators")(classmethod(lambda cls, value: _operators(value, "eoh.operators")))

    @field_validator("tie_break")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        names = [parse_tie(tie)[1] for tie in value]
        require(len(set(names)) == len(names), "eoh.tie_break", "must name each measure once", value)
        return value

    @model_validator(mode="after")
    def _spread(self) -> EohSection:
        require(self.m_multiplier > 0 or self.generations >= 1, "eoh.generations", "must be >= 1 when "
                "eoh.m_multiplier = 0 (the budget is spread over a fixed number of generations)", self.generations)
        return self


class SampleSection(Section):
    batch: int = Field(20, ge=1)  # i1 candidates per step (paper: 20)
    population: int = Field(10, ge=1)  # best candidates kept for the snapshots


class AccountingSection(Section):
    """What the budget T charges. Ours (the default) charges every candidate asked
    for. The reference code asks again, free of charge, when a reply holds no
    parseable code: `parse_retries` = n re-asks it up to n more times (same prompt
    and weights, a fresh sampling seed); the ledger counts them apart, never in T.
    `clone_retries` = n does the same for a program that clones (context.similarity)
    the template or an earlier candidate; one still a clone after n is scored as
    any program (or rejected, with context.fingerprint)."""

    parse_retries: int = Field(0, ge=0, le=8)
    clone_retries: int = Field(0, ge=0, le=8)


class StartSection(Section):
    """The program a run starts from (the i1 prompt shows it; a comparison scores
    it as the starting point). "template": the task's template, a working baseline
    (ours). "reference": the reference code's seed function where the task has
    one (asp: `return 1`), else the template."""

    program: Literal[STARTS] = "template"
    # files whose programs the archive starts with, scored before the first step and free of T (e.g. an
    # earlier run's best.py; relative paths count from the TOML's folder): coevolve/search/start_programs.py
    programs: list[Annotated[str, StringConstraints(min_length=1)]] = []


class RewardSection(Section):
    """ES reward of one candidate; see docs/search.md and coevolve/search/reward.py.

    kind = "levels" (ours): four ordered levels with a bounded tanh on the relative
    improvement. kind = "paper": the reference code's raw-objective rewards
    (EoH+ES: parent minus child, failures pinned near the population's worst and
    clipped at `floor`; Sample+ES: the negated objective, failures at
    min(valid) - std(valid))."""

    kind: Literal["levels", "paper"] = "levels"
    unparseable: float = -1.0  # levels: no code could be extracted
    failing: float = -0.6  # levels: code that does not run or gives an invalid solution
    worse_floor: float = Field(-0.4, lt=0)  # levels: valid candidates approach this as they get much worse
    gain: float = Field(5.0, gt=0)  # levels: tanh slope on the relative improvement
    floor: float = Field(-1.0, lt=0)  # paper: lowest reward of an EoH+ES child, in raw objective units

    @model_validator(mode="after")
    def _ordered(self) -> RewardSection:
        require(self.unparseable < self.failing, "reward.unparseable", "must be < reward.failing", self.unparseable)
        require(self.failing < self.worse_floor, "reward.failing", "must be < reward.worse_floor", self.failing)
        return self


MAX_WORKERS = 1024
MAX_MEMORY_MB = 16 * 1024 * 1024
MEMORY = "MB, 16 TiB at most"


class SandboxLimits(Section):
    """What a sandbox is built with (coevolve.sandbox.Sandbox.from_section); a comparison's [test] too."""

    timeout_s: float = Field(30.0, gt=0, le=MAX_TIMEOUT_S, description=TIMEOUT)
    # 0: the sandbox's default. Each worker is a process started before the first scoring: a count
    # past any machine's cores would never finish starting
    workers: int = Field(0, ge=0, le=MAX_WORKERS, description="0: the sandbox's default")
    # the child's rlimit is memory_mb << 20 bytes, a C long: past ~8.8e12 MB every candidate fails to start
    memory_mb: int = Field(2048, ge=64, le=MAX_MEMORY_MB, description=MEMORY)
    # k > 1: each program is scored k times, its `random` and numpy global generators seeded 0..k-1, and
    # judged by the mean (one failing seed fails it): for heuristics that draw random numbers; k times the time
    seeds: int = Field(1, ge=1, le=MAX_SEEDS)


class SandboxSection(SandboxLimits):
    # score an [endpoint]'s replies as they arrive, while the rest of the step is generated; the run's
    # records are the same either way (coevolve/search/overlap.py)
    overlap: bool = True


class ContextSection(Section):
    """What the proposer is shown and what reaches the sandbox (docs/search.md, "Context").
    The paper presets turn all of it off: the reference decodes freely, shows no failures and starts
    from an empty population."""

    failures: bool = True  # a parent's or a recent sibling's failure (kind, message, failing line) in the prompt
    failure_chars: int = Field(300, ge=40)  # failure and feedback texts are cut to this many characters (~80 tokens)
    constrain: bool = True  # decode the fenced block with the template's exact `def` line (where the engine can)
    # under each valid parent: per training instance against the template (a task with instance_scores),
    # and the task's own note on its decisions (a task with feedback); cut to failure_chars
    feedback: bool = True
    # reject clones of earlier candidates and of the template before they are scored (charged, never
    # scored). Off by default: on the embedded 135M model a third to two thirds of the budget went to
    # rejected clones of the request's own parent, the valid rate fell (tsp_construct 55.9% -> 2.8%,
    # tsp_aco 56.9% -> 16.3%, 3 seeds) and only the run without it beat the template
    # (benchmarks/results/s28/proposal_efficiency_defaults.md); scored, a clone is at worst a duplicate
    fingerprint: bool = False
    similarity: float = Field(1.0, gt=0, le=1)  # near-clones: similarity at or above this is a clone (1: exact)
    # the archive starts with the template (candidate 0), scored once in the sandbox but not proposed: no
    # request, no charge (the ledger's `seeded`); as OpenEvolve and FunSearch seed their databases. Off by
    # default: on the embedded 135M model it cut the valid rate (tsp_aco 18.6% -> 1.1%, 3 seeds) and beat
    # the template in no run either way (benchmarks/results/s27/proposal_efficiency_seed_template.md)
    seed_template: bool = False


class SkillSection(Section):
    """The +trace2skill methods: every `every` plan steps, `analysts` teacher
    requests (each charged one evaluation, like a candidate) read recent
    candidates and patch the run's SKILL.md, which every operator prompt shows.
    `start` serves every method."""

    every: int = Field(4, ge=1, description="plan steps between skill refreshes")
    analysts: int = Field(3, ge=1)  # analyst requests per refresh
    successes: int = Field(1, ge=0)  # of the analysts, those that read the best programs; the rest read failures
    recent: int = Field(48, ge=1)  # the candidates analysts choose from: the last this many
    teacher: Literal["engine", "endpoint"] = "engine"  # "endpoint": [endpoint] must be set
    temperature: float = Field(0.3, ge=0, le=MAX_TEMPERATURE, description=TEMPERATURE)
    max_tokens: int = Field(160, ge=16)
    # a skill folder (its SKILL.md) every prompt shows from the first request, under any method: rules you
    # wrote, or what `coevolve distill` took from an earlier run; +trace2skill refreshes patch it. A path
    # counts from the config file's folder; the run logs its text, so a resume shows what the run began with
    start: str = ""
    # "latest": every request shows the newest version. "judged": a new version is on trial; requests
    # alternate between it and the version it patched, and the next refresh keeps the one whose children
    # did better (coevolve/search/skill.py judge) and patches that
    keep: Literal["latest", "judged"] = "latest"

    @model_validator(mode="after")
    def _successes(self) -> SkillSection:
        require(self.successes <= self.analysts, "skill.successes", "must be in 0..skill.analysts", self.successes)
        return self


NO_CAP = "leave it out for no cap"


class CapsSection(Section):
    """Limits besides the evaluation budget; the run ends cleanly at the step
    boundary where one is reached (summary `stopped`), and `--resume` after
    raising it in DIR/config.toml goes on. Unset: no limit. A comparison
    refuses target and patience: its arms would spend different budgets."""

    completion_tokens: int | None = Field(None, gt=0, description=NO_CAP)  # LLM completion tokens, all requests
    wall_s: float | None = Field(None, gt=0, description=NO_CAP)  # wall-clock seconds, summed over resumed sessions
    money: float | None = Field(None, gt=0, description=NO_CAP)  # spend on [endpoint] requests, priced by `prices`
    # model -> [USD per 1M prompt tokens, USD per 1M completion tokens]
    prices: dict[str, list[float]] = {}
    # Stop early on the search itself (good enough, or stuck). target: the best train objective is at or
    # beyond it (<= for a task that minimises, >= for one that maximises). patience: this many plan steps
    # in a row (skill refreshes included) have not improved the best objective, or found none (a program
    # that only wins an [eoh] tie_break is no improvement: timing noise alone would keep a run going).
    target: float | None = None
    patience: int | None = Field(None, gt=0, description=NO_CAP)

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        for model, price in value.items():
            require(len(price) == 2 and min(price) >= 0, f"caps.prices.{model}",
                    "must be [USD per 1M prompt tokens, USD per 1M completion tokens]", price)
        return value


class SearchSections(Config):
    """The sections every heuristic-search config shares: RunConfig adds [run],
    coevolve.plan.CompareConfig adds [compare] and [test]."""

    RENAMED: ClassVar[dict[str, str]] = {"proposer": "endpoint"}

    model: ModelSection = ModelSection()
    # Stop at the code block's closing fence: the small model tends to ramble on after
    # its code, and those tokens cost time and are never used.
    sampling: Sampling = Sampling(temperature=0.7, top_p=1.0, max_tokens=384, stop=("\n```\n",))
    eoh: EohSection = EohSection()
    sample: SampleSection = SampleSection()
    es: ESSection = ESConfig()
    reward: RewardSection = RewardSection()
    sandbox: SandboxSection = SandboxSection()
    accounting: AccountingSection = AccountingSection()
    start: StartSection = StartSection()
    endpoint: EndpointSection = EndpointSection()
    distributed: DistributedSection = DistributedSection()
    context: ContextSection = ContextSection()
    skill: SkillSection = SkillSection()
    caps: CapsSection = CapsSection()

    @model_validator(mode="after")
    def _across(self) -> SearchSections:
        """The [es] keys whose meaning belongs to heuristic search, and the rules across sections."""
        _operators(self.es.operators, "es.operators")
        require(self.es.generations == 0, "es.generations",
                "is for agent runs; heuristic runs take their ES generations from the plan", self.es.generations)
        if self.caps.money is not None:
            require(bool(self.endpoint.base_url), "caps.money",
                    "prices [endpoint] requests, but no [endpoint] is set (local generation costs nothing)")
            for model in self.endpoint.choices:  # each model of an ensemble
                require(model in self.caps.prices, "caps.prices", f"has no price for the [endpoint] model {model!r}",
                        sorted(self.caps.prices))
        require(self.skill.teacher == "engine" or bool(self.endpoint.base_url), "skill.teacher",
                '= "endpoint" needs [endpoint] base_url and model')
        if not self.endpoint.base_url:  # the engine answers every request (with an endpoint: RunConfig, under ES)
            self._replies_fit()
        return self

    def _replies_fit(self) -> None:
        """The replies the engine writes leave its context (model.max_len) room for their prompts."""
        self.model.require_room(self.sampling.max_tokens, "sampling.max_tokens")
        if self.skill.teacher == "engine":
            self.model.require_room(self.skill.max_tokens, "skill.max_tokens")


def require_step_fits(config: Any, field: str, value: Any, asked: int, step: str, default: int,
                      per_unit: float = 1) -> None:
    """A method's `check`: refuse `field` (= `value`) when one `step` of its plan asks for `asked` candidates
    (`per_unit` for each unit of `value`), more than the whole run.budget. Let be, the plan cut that step to
    the budget: a run of one truncated step, and under +trace2skill an error that blamed skill.every. A step
    no larger than the defaults ask for (`default` candidates) is let be under any budget: a smoke run's
    small budget cuts it short knowingly."""
    budget = config.run.budget
    limit = max(budget, default)
    if asked <= limit:
        return
    bound = f"{limit / per_unit:g}" if isinstance(value, float) else int(limit // per_unit)
    why = "" if limit == budget else f" (as large a step as the defaults ask; run.budget = {budget} cuts it short)"
    raise config_error(field, f"must be <= {bound}{why}: {step} would ask for {asked} candidates, more than the "
                       f"run's whole budget (run.budget = {budget})", value)


def method_tables(raw: Any, methods: list, listed: str) -> Any:
    """`raw` with the tables the `methods` declare themselves (e.g. [islands]) taken out and validated by
    their models into `method_sections`; as it is when none declares one or when that is done. A table
    only a method the config does not run declares (`listed`: the key that lists its methods) is refused
    as that, not as an unknown section: left over from a config written for that method. With a name
    that is no method, those tables are left out unread: the name's own check (its field's validator,
    check_method_name) refuses the config, listing the known methods and the one it may mean."""
    builtin = {section for name in BUILTIN for section in declared_sections([name])}
    if isinstance(raw, dict) and not all(names_a_method(name, listed) for name in methods):
        # a misspelt `--method map_elite` would otherwise be told to remove the [map_elites] it needs
        return {k: v for k, v in raw.items() if k not in builtin}
    declared = declared_sections(methods)
    for name in BUILTIN:
        for section in set(declared_sections([name])) - set(declared):
            if isinstance(raw, dict) and section in raw:
                raise config_error(section, f"is read by method {name} only, which {listed} does not name: remove "
                                   f"[{section}], or run {name}")
    if not isinstance(raw, dict) or not declared or "method_sections" in raw:
        return raw
    return {**{k: v for k, v in raw.items() if k not in declared},
            "method_sections": {name: build_config(model, raw.get(name, {}), name) for name, model in declared.items()}}


class RunConfig(SearchSections):
    run: SearchRun = SearchRun()
    log: LogSection = LogSection()  # trackers (coevolve/base/mirror.py)
    # the sections the run's method declares itself (e.g. [islands]; coevolve/search/methods.py), each
    # validated by the method's own model; as_dict writes them beside the fixed sections
    method_sections: dict[str, Any] = Field({}, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _task(cls, raw: Any) -> Any:
        """`[task] name` as run.task (heuristic tasks take no options); the method's own sections."""
        raw = task_named(raw)
        if isinstance(raw, dict) and isinstance(raw.get("task"), dict):
            for key in raw["task"]:
                raise config_error(f"task.{key}", "is not a known field (known: name); heuristic tasks take no "
                                   "options")
            raw = {k: v for k, v in raw.items() if k != "task"}
        run = raw.get("run") if isinstance(raw, dict) else None
        method = run.method if isinstance(run, SearchRun) else (run or {}).get("method") if isinstance(run, dict) else None
        return method_tables(raw, [method or SearchRun.model_fields["method"].default], "run.method")

    def _es_operators_run(self, method: Any) -> None:
        """Under EoH (or an archive over it) with +esopt, es.operators are the steps ES perturbs: at least
        one must be an operator the plan runs (eoh.operators), or ES silently moves no weights. (One the
        plan does not run is let be: the default m1, m2 stays right when a config drops m2.)"""
        if not getattr(method, "perturbed_ops", ()):  # no ES, or a plan (Sample's) that es.operators do not name
            return
        require(any(op in method.operators for op in self.es.operators), "es.operators",
                f"names no operator eoh.operators runs (it runs: {', '.join(method.operators)}): ES would move "
                "no weights", self.es.operators)

    @property
    def uses_es(self) -> bool:
        return uses_es(self.run.method)

    @property
    def uses_skill(self) -> bool:
        return uses_skill(self.run.method)

    @model_validator(mode="after")
    def _method_rules(self) -> RunConfig:
        # the method's own rules across sections (e.g. against run.budget), before its setup derives the plan
        # from them (EoH's m_multiplier = 0 would otherwise blame itself for an absurd eoh.offspring)
        method_class(parse_name(self.run.method).base).check(self)
        method = make_method(self)
        inner = getattr(method, "inner", method)  # an archive over EoH or Sample runs that method's plan
        if type(inner) is not type(method):
            type(inner).check(self)
        self._es_operators_run(getattr(method, "inner", method))
        if self.uses_es:  # perturbed requests go to the engine even with an [endpoint]
            self._replies_fit()
        require(self.skill.keep == "latest" or self.uses_skill or bool(self.skill.start), "skill.keep",
                '= "judged" needs a skill to judge: a +trace2skill method or skill.start', self.skill.keep)
        if self.uses_skill:
            refreshes, steps = planned_refreshes(self)
            require(refreshes >= 1, "skill.every",
                    f"is longer than the run ({steps} proposal steps under run.budget = {self.run.budget}): "
                    "the skill would never be refreshed", self.skill.every)
        return self
