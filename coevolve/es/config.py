"""The `[es]` section: the one declaration of the ES settings, with the one
validator. Heuristic runs (coevolve.search), agent runs (coevolve.agents) and
`ESOpt` all read this class; nothing copies its fields into another.

Two values depend on the run and are written 0 in a config: `population`
(heuristic runs: the plan's perturbed step; agent runs: agent.population) and
`generations` (heuristic runs: the plan's ES steps; agent runs: what the
episode budget pays). The run fills them with `resolve` before building
`ESOpt`, which refuses an unresolved config.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from coevolve.base.config import one_of, require

NOISE_MODES = ("full", "lowrank")


@dataclass
class ESConfig:
    # Perturbations per ES update (G). 0: set by the run. Heuristic runs: as the plan's
    # perturbed step asks (sample.batch for sample+esopt, the m-step's offspring for
    # eoh+esopt) / proposals_per_member, so each +ESOpt arm spends exactly what its base
    # method spends per step. Agent runs: agent.population (it also sizes skill rounds).
    population: int = 0
    # Length of the σ schedule; agent runs also stop after it. 0: set by the run
    # (heuristic runs: the plan's ES steps; agent runs: run.budget // (population x batch)).
    generations: int = 0
    sigma: float = 1e-3
    # σ of the schedule's last step. 0 is the reference's test-time setting (the
    # paper's σ_T = 0): its last step proposes from the unperturbed model.
    sigma_end: float = 1e-4
    schedule: str = "cosine"  # "cosine" | "constant"
    # What one step of the σ schedule is. "update": each ES update (ours).
    # "generation": each generation of the method's plan (an EoH generation holds
    # its m1 and m2 updates; a Sample batch is one generation), as the reference
    # code steps it. Agent runs have one update per generation: the same thing.
    sigma_steps: str = "update"
    alpha: float = 5e-4
    normalise: str = "zscore"  # "zscore" | "rank"
    ddof: int = 1  # z-score std: 1 sample std (the paper's worked example, our default), 0 population std (its code)
    antithetic: bool = False
    # "full": σε on every parameter, members one after another (the paper).
    # "lowrank": σ·A Bᵀ/√rank on every linear weight, the population in one
    # batch of LoRA slots (several times faster; embeddings and norms frozen).
    noise: str = "full"
    rank: int = 1
    # Heuristic runs only (agent configs refuse them): candidates each perturbed
    # model proposes, and which EoH operators run perturbed under eoh+esopt
    # (their names are checked by coevolve.search.runconfig, which owns the operators).
    proposals_per_member: int = 1
    operators: list[str] = field(default_factory=lambda: ["m1", "m2"])

    def __post_init__(self) -> None:
        self.check("es")  # built in code (tests, benchmarks) or from TOML: the same rules

    def check(self, name: str) -> None:
        require(self.population == 0 or self.population >= 2, f"{name}.population",
                "must be >= 2 (or 0: set by the run)", self.population)
        require(self.generations >= 0, f"{name}.generations", "must be >= 0 (0: set by the run)", self.generations)
        require(math.isfinite(self.sigma) and self.sigma > 0, f"{name}.sigma", "must be > 0", self.sigma)
        require(math.isfinite(self.sigma_end) and self.sigma_end >= 0, f"{name}.sigma_end",
                "must be >= 0 (0: the last step explores nothing, as the reference's test-time runs)",
                self.sigma_end)
        one_of(self.schedule, ("cosine", "constant"), f"{name}.schedule")
        one_of(self.sigma_steps, ("update", "generation"), f"{name}.sigma_steps")
        require(math.isfinite(self.alpha) and self.alpha > 0, f"{name}.alpha", "must be > 0", self.alpha)
        one_of(self.normalise, ("zscore", "rank"), f"{name}.normalise")
        require(self.ddof in (0, 1), f"{name}.ddof", "must be 0 or 1", self.ddof)
        if self.antithetic:
            require(self.population % 2 == 0, f"{name}.population", "must be even when antithetic", self.population)
        one_of(self.noise, NOISE_MODES, f"{name}.noise")
        require(isinstance(self.rank, int) and 1 <= self.rank <= 512, f"{name}.rank",
                "must be in 1..512 (vLLM's LoRA ranks)", self.rank)
        require(self.proposals_per_member >= 1, f"{name}.proposals_per_member", "must be >= 1",
                self.proposals_per_member)

    def resolve(self, population: int, generations: int) -> "ESConfig":
        """This config with the run's values where it says 0; settings it gives stay."""
        return dataclasses.replace(self, population=self.population or population,
                                   generations=self.generations or generations)

    def check_resolved(self) -> None:
        """What ESOpt needs: a population to rank and a σ schedule to follow."""
        require(self.population >= 2, "es.population", "must be >= 2 when ES runs (0 is resolved by the run)",
                self.population)
        require(self.generations >= 1, "es.generations", "must be >= 1 when ES runs (0 is resolved by the run)",
                self.generations)
