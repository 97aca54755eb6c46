"""The `coevolve run` config: one dataclass per TOML section, with its rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from coevolve.base.config import one_of, require
from coevolve.base.sampling import Sampling
from coevolve.base.sections import DistributedSection, EndpointSection, ModelSection
from coevolve.es.config import ESConfig



def check_method(value: str, field: str) -> None:
    """run.method / compare.methods: a method of the registry (coevolve/search/methods.py)."""
    from coevolve.search.methods import check_method_name  # methods imports this module's types

    check_method_name(value, field)


def check_operator(value: str, field: str) -> None:
    """eoh.operators / es.operators: an operator of the registry (coevolve/search/operators.py)."""
    from coevolve.search.methods import check_operator_name

    check_operator_name(value, field)


@dataclass
class RunSection:
    method: str = "eoh+esopt"
    task: str = "tsp_construct"
    budget: int = 100
    seed: int = 0
    out: str = ""  # empty: runs/<task>-<method>-seed<seed>-<time>

    def check(self, name: str) -> None:
        check_method(self.method, f"{name}.method")
        require(bool(self.task), f"{name}.task", "must not be empty")
        require(self.budget >= 1, f"{name}.budget", "must be >= 1", self.budget)
        require(self.seed >= 0, f"{name}.seed", "must be >= 0", self.seed)


@dataclass
class EohSection:
    population: int = 10  # survivors kept after each operator (paper: 10)
    offspring: int = 10  # candidates per e1/e2 step per generation (paper: 10)
    operators: list[str] = field(default_factory=lambda: ["e1", "e2", "m1", "m2"])
    parents: int = 2  # parents shown to e1 / e2
    init: int = 0  # initial i1 candidates; 0 means `population`
    # m1/m2 steps ask for round(offspring * m_multiplier) candidates (the paper's k).
    # 0: scaled to the budget as in the paper, k = T / (2 * offspring * generations) - 1
    # (k = 1 at T = 1000, k = 3 at T = 2000 with 10 offspring and 25 generations).
    m_multiplier: float = 1.0
    generations: int = 0  # 0: generations until the budget runs out; > 0: exactly this many
    init_in_budget: bool = True  # False: the initial i1 population is charged outside T, as the paper counts
    parents_with_replacement: bool = False  # True: parents drawn with replacement (the paper's code)
    dedup_decimals: int = -1  # >= 0: population duplicates by objective rounded to this many decimals (paper: 5)
    show_scores: bool = True  # operator prompts show parents' scores (ours); EoH's prompts do not

    def check(self, name: str) -> None:
        require(self.population >= 1, f"{name}.population", "must be >= 1", self.population)
        require(self.offspring >= 1, f"{name}.offspring", "must be >= 1", self.offspring)
        require(len(self.operators) >= 1, f"{name}.operators", "must name at least one operator")
        for op in self.operators:
            check_operator(op, f"{name}.operators")
        require(self.parents >= 1, f"{name}.parents", "must be >= 1", self.parents)
        require(self.init >= 0, f"{name}.init", "must be >= 0", self.init)
        require(self.m_multiplier >= 0, f"{name}.m_multiplier", "must be >= 0 (0: scaled to the budget)",
                self.m_multiplier)
        require(self.generations >= 0, f"{name}.generations", "must be >= 0", self.generations)
        if self.m_multiplier == 0:
            require(self.generations >= 1, f"{name}.generations",
                    "must be >= 1 when eoh.m_multiplier = 0 (the budget is spread over a fixed number of generations)",
                    self.generations)
        require(-1 <= self.dedup_decimals <= 15, f"{name}.dedup_decimals", "must be in -1..15 (-1: exact)",
                self.dedup_decimals)


@dataclass
class SampleSection:
    batch: int = 20  # i1 candidates per step (paper: 20)
    population: int = 10  # best candidates kept for the snapshots

    def check(self, name: str) -> None:
        require(self.batch >= 1, f"{name}.batch", "must be >= 1", self.batch)
        require(self.population >= 1, f"{name}.population", "must be >= 1", self.population)


@dataclass
class AccountingSection:
    """[accounting]: what the budget T charges. Ours (the default) charges every
    candidate asked for. The reference code asks again, free of charge, when a
    reply holds no parseable code: `parse_retries` = n re-asks it up to n more
    times (same prompt and weights, a fresh sampling seed); the ledger counts
    them apart, as `parse_retries`, never in T."""

    parse_retries: int = 0

    def check(self, name: str) -> None:
        require(0 <= self.parse_retries <= 8, f"{name}.parse_retries", "must be in 0..8", self.parse_retries)


@dataclass
class StartSection:
    """[start]: the program a run starts from (the i1 prompt shows it; a comparison
    scores it as the starting point). "template": the task's template, a working
    baseline (ours). "reference": the reference code's seed function where the
    task has one (asp: `return 1`), else the template."""

    program: str = "template"

    def check(self, name: str) -> None:
        from tasks.base import STARTS

        one_of(self.program, STARTS, f"{name}.program")


@dataclass
class RewardSection:
    """ES reward of one candidate; see docs/search.md and coevolve/search/reward.py.

    kind = "levels" (ours): four ordered levels with a bounded tanh on the relative
    improvement. kind = "paper": the reference code's raw-objective rewards
    (EoH+ES: parent minus child, failures pinned near the population's worst and
    clipped at `floor`; Sample+ES: the negated objective, failures at
    min(valid) - std(valid))."""

    kind: str = "levels"
    unparseable: float = -1.0  # levels: no code could be extracted
    failing: float = -0.6  # levels: code that does not run or gives an invalid solution
    worse_floor: float = -0.4  # levels: valid candidates approach this as they get much worse than the reference
    gain: float = 5.0  # levels: tanh slope on the relative improvement
    floor: float = -1.0  # paper: lowest reward of an EoH+ES child, in raw objective units

    def check(self, name: str) -> None:
        one_of(self.kind, ("levels", "paper"), f"{name}.kind")
        require(self.unparseable < self.failing, f"{name}.unparseable", f"must be < {name}.failing",
                self.unparseable)
        require(self.failing < self.worse_floor, f"{name}.failing", f"must be < {name}.worse_floor", self.failing)
        require(self.worse_floor < 0, f"{name}.worse_floor", "must be < 0", self.worse_floor)
        require(self.gain > 0, f"{name}.gain", "must be > 0", self.gain)
        require(self.floor < 0, f"{name}.floor", "must be < 0", self.floor)


@dataclass
class SandboxSection:
    timeout_s: float = 30.0
    workers: int = 0  # 0: the sandbox's default
    memory_mb: int = 2048

    def check(self, name: str) -> None:
        require(self.timeout_s > 0, f"{name}.timeout_s", "must be > 0", self.timeout_s)
        require(self.workers >= 0, f"{name}.workers", "must be >= 0", self.workers)
        require(self.memory_mb >= 64, f"{name}.memory_mb", "must be >= 64", self.memory_mb)


@dataclass
class ContextSection:
    """What the proposer is shown and what reaches the sandbox (docs/search.md, "Context").
    The paper presets turn all of it off: the reference decodes freely and shows no failures."""

    failures: bool = True  # a parent's or a recent sibling's failure (kind, message, failing line) in the prompt
    failure_chars: int = 300  # the failure text is cut to this many characters (about 80 tokens)
    constrain: bool = True  # decode the fenced block with the template's exact `def` line (where the engine can)
    fingerprint: bool = True  # reject clones of earlier candidates and of the template before they are scored
    similarity: float = 1.0  # near-clones: fingerprint similarity at or above this is a clone (1.0: exact only)

    def check(self, name: str) -> None:
        require(self.failure_chars >= 40, f"{name}.failure_chars", "must be >= 40", self.failure_chars)
        require(0 < self.similarity <= 1, f"{name}.similarity", "must be in (0, 1]", self.similarity)


@dataclass
class SkillSection:
    """The +trace2skill methods: every `every` plan steps, `analysts` teacher
    requests (each charged one evaluation, like a candidate) read recent
    candidates and patch the run's SKILL.md, which every operator prompt shows."""

    every: int = 4  # plan steps between refreshes
    analysts: int = 3  # analyst requests per refresh
    successes: int = 1  # of the analysts, those that read the best programs; the rest read failures
    recent: int = 48  # the candidates analysts choose from: the last this many
    teacher: str = "engine"  # "engine" (base weights) or "endpoint" ([endpoint] must be set)
    temperature: float = 0.3
    max_tokens: int = 160

    def check(self, name: str) -> None:
        require(self.every >= 1, f"{name}.every", "must be >= 1 (plan steps between skill refreshes)", self.every)
        require(self.analysts >= 1, f"{name}.analysts", "must be >= 1", self.analysts)
        require(0 <= self.successes <= self.analysts, f"{name}.successes", f"must be in 0..{name}.analysts",
                self.successes)
        require(self.recent >= 1, f"{name}.recent", "must be >= 1", self.recent)
        one_of(self.teacher, ("engine", "endpoint"), f"{name}.teacher")
        require(self.temperature >= 0, f"{name}.temperature", "must be >= 0", self.temperature)
        require(self.max_tokens >= 16, f"{name}.max_tokens", "must be >= 16", self.max_tokens)


@dataclass
class CapsSection:
    """Limits besides the evaluation budget; the run ends cleanly at the step
    boundary where one is reached (summary `stopped`), and `--resume` after
    raising it in DIR/config.toml goes on. Unset: no limit."""

    completion_tokens: int | None = None  # LLM completion tokens, all requests
    wall_s: float | None = None  # wall-clock seconds, summed over resumed sessions
    money: float | None = None  # spend on [endpoint] requests, priced by `prices`
    prices: dict[str, list[float]] = field(default_factory=dict)  # model -> [USD per 1M prompt, per 1M completion tokens]

    def check(self, name: str) -> None:
        for key in ("completion_tokens", "wall_s", "money"):
            value = getattr(self, key)
            require(value is None or value > 0, f"{name}.{key}", "must be > 0 (leave it out for no cap)", value)
        for model, price in self.prices.items():
            require(isinstance(price, list) and len(price) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in price),
                f"{name}.prices.{model}", "must be [USD per 1M prompt tokens, USD per 1M completion tokens]", price)


@dataclass
class SearchSections:
    """The sections every heuristic-search config shares: RunConfig adds [run],
    coevolve.compare.CompareConfig adds [compare] and [test]."""

    RENAMED: ClassVar[dict[str, str]] = {"proposer": "endpoint"}  # old name, read with a deprecation message

    model: ModelSection = field(default_factory=ModelSection)
    # Stop at the code block's closing fence: the small model tends to ramble on after
    # its code, and those tokens cost time and are never used.
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.7, top_p=1.0, max_tokens=384,
                                                                stop=("\n```\n",)))
    eoh: EohSection = field(default_factory=EohSection)
    sample: SampleSection = field(default_factory=SampleSection)
    es: ESConfig = field(default_factory=ESConfig)
    reward: RewardSection = field(default_factory=RewardSection)
    sandbox: SandboxSection = field(default_factory=SandboxSection)
    accounting: AccountingSection = field(default_factory=AccountingSection)
    start: StartSection = field(default_factory=StartSection)
    endpoint: EndpointSection = field(default_factory=EndpointSection)
    distributed: DistributedSection = field(default_factory=DistributedSection)
    context: ContextSection = field(default_factory=ContextSection)
    skill: SkillSection = field(default_factory=SkillSection)
    caps: CapsSection = field(default_factory=CapsSection)

    def check(self) -> None:
        """The [es] keys whose meaning belongs to heuristic search, and the rules across sections."""
        for op in self.es.operators:
            check_operator(op, "es.operators")
        require(self.es.generations == 0, "es.generations",
                "is for agent runs; heuristic runs take their ES generations from the plan", self.es.generations)
        if self.caps.money is not None:
            require(bool(self.endpoint.base_url), "caps.money",
                    "prices [endpoint] requests, but no [endpoint] is set (local generation costs nothing)")
            require(self.endpoint.model in self.caps.prices, "caps.prices",
                    f"has no price for the [endpoint] model {self.endpoint.model!r}", sorted(self.caps.prices))
        if self.skill.teacher == "endpoint":
            require(bool(self.endpoint.base_url), "skill.teacher", '= "endpoint" needs [endpoint] base_url and model')


@dataclass
class RunConfig(SearchSections):
    run: RunSection = field(default_factory=RunSection)

    @property
    def uses_es(self) -> bool:
        from coevolve.search.methods import uses_es

        return uses_es(self.run.method)

    @property
    def uses_skill(self) -> bool:
        from coevolve.search.methods import uses_skill

        return uses_skill(self.run.method)

    @classmethod
    def declared_sections(cls, raw: dict) -> dict:
        """The hook of coevolve.base.config.build_config: {section: pydantic model} the run's method
        declares itself (e.g. [islands]); they are validated by their models and kept in
        `method_sections`."""
        from coevolve.search.methods import declared_sections

        run = raw.get("run") if isinstance(raw.get("run"), dict) else {}
        return declared_sections([run.get("method", RunSection.method)])

    def check(self) -> None:
        super().check()
        from coevolve.search.methods import make_method

        type(make_method(self)).check(self)
        if self.uses_skill:
            from coevolve.search.methods import planned_refreshes  # methods imports this module

            refreshes, steps = planned_refreshes(self)
            require(refreshes >= 1, "skill.every",
                    f"is longer than the run ({steps} proposal steps under run.budget = {self.run.budget}): "
                    "the skill would never be refreshed", self.skill.every)
