"""The `[es]` section: the one declaration of the ES settings, with the one
validator. Heuristic runs (coevolve.search), agent runs (coevolve.agents) and
`ESOpt` all read it; nothing copies its fields into another.

The noise mode is a union told apart by `es.noise`: `FullNoise` (σε on every
parameter, members one after another: the paper) and `LowRankNoise` (σ·A Bᵀ/√rank
on every linear weight, the population in one batch of LoRA slots: several
times faster, embeddings and norms frozen), which alone takes `rank`. Configs
declare the field as `ESSection`; `ESConfig(**values)` builds the mode the values
name, as `pathlib.Path` builds a `PosixPath`.

Two values depend on the run and are written 0 in a config: `population`
(heuristic runs: the plan's perturbed step; agent runs: agent.population) and
`generations` (heuristic runs: the plan's ES steps; agent runs: what the
episode budget pays). The run fills them with `resolve` before building
`ESOpt`, which refuses an unresolved config.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from coevolve.base.config import Section, config_error, require
from coevolve.base.errors import did_you_mean


MAX_STEP = 10  # es.sigma and es.alpha at most
PAPER_STEP = {"sigma": "1e-3", "alpha": "5e-4"}


class ESConfig(Section):
    NAME = "es"
    # Perturbations per ES update (G). 0: set by the run. Heuristic runs: as the plan's
    # perturbed step asks (sample.batch for sample+esopt, the m-step's offspring for
    # eoh+esopt) / proposals_per_member, so each +ESOpt arm spends exactly what its base
    # method spends per step. Agent runs: agent.population (it also sizes skill rounds).
    population: int = 0
    # Length of the σ schedule; agent runs also stop after it. 0: set by the run
    # (heuristic runs: the plan's ES steps; agent runs: run.budget // (population x batch)).
    generations: int = Field(0, ge=0, description="0: set by the run")
    sigma: float = Field(1e-3, gt=0)  # at most MAX_STEP (_not_huge)
    # σ of the schedule's last step. 0 is the reference's test-time setting (the
    # paper's σ_T = 0): its last step proposes from the unperturbed model.
    sigma_end: float = Field(1e-4, ge=0, description="0: the last step explores nothing, as the reference's "
                                                      "test-time runs")
    schedule: Literal["cosine", "constant"] = "cosine"
    # What one step of the σ schedule is. "update": each ES update (ours).
    # "generation": each generation of the method's plan (an EoH generation holds
    # its m1 and m2 updates; a Sample batch is one generation), as the reference
    # code steps it. Agent runs have one update per generation: the same thing.
    sigma_steps: Literal["update", "generation"] = "update"
    alpha: float = Field(5e-4, gt=0)  # at most MAX_STEP (_not_huge)
    normalise: Literal["zscore", "rank"] = "zscore"
    # z-score std: 1 sample std (the paper's worked example, our default), 0 population std (its code)
    ddof: Literal[0, 1] = 1
    antithetic: bool = False
    # Heuristic runs only (agent configs refuse them): candidates each perturbed
    # model proposes, and which EoH operators run perturbed under eoh+esopt
    # (their names are checked by coevolve.search.runconfig, which owns the operators).
    proposals_per_member: int = Field(1, ge=1)
    operators: list[str] = ["m1", "m2"]

    def __new__(cls, **values: Any) -> ESConfig:
        if cls is ESConfig:
            cls = LowRankNoise if values.get("noise") == "lowrank" else FullNoise
        return super().__new__(cls)

    @field_validator("sigma", "alpha")
    @classmethod
    def _not_huge(cls, value: float, info: ValidationInfo) -> float:
        # the paper's σ is 1e-3 and its α 5e-4: a 1e3 or 5e4 is a minus sign dropped from the exponent, and
        # would drown the weights in noise (or throw them away in one update) with no error to say so. A
        # bound of its own, not le=: below it the line stays "must be > 0"
        if value > MAX_STEP:
            raise ValueError(f"must be <= {MAX_STEP}: the paper uses {PAPER_STEP[info.field_name]} "
                             "(a minus sign dropped from the exponent?)")
        return value

    @field_validator("population")
    @classmethod
    def _population(cls, value: int) -> int:
        if not (value == 0 or value >= 2):
            raise ValueError("must be >= 2 (or 0: set by the run)")
        return value

    @model_validator(mode="after")
    def _pairs(self) -> ESConfig:
        require(not self.antithetic or self.population % 2 == 0, "es.population", "must be even when antithetic",
                self.population)
        # the cosine schedule decays σ to sigma_end (coevolve/es/optimizer.py sigma_at); one above es.sigma
        # would grow it, which nothing documents. A constant schedule never reads sigma_end
        require(self.schedule == "constant" or self.sigma_end <= self.sigma, "es.sigma_end",
                f"must be <= es.sigma ({self.sigma:g}): the cosine schedule decays σ from es.sigma to es.sigma_end",
                self.sigma_end)
        return self

    def resolve(self, population: int, generations: int) -> ESConfig:
        """This config with the run's values where it says 0; settings it gives stay."""
        return type(self)(**{**dict(self), "population": self.population or population,
                             "generations": self.generations or generations})

    def check_resolved(self) -> None:
        """What ESOpt needs: a population to rank and a σ schedule to follow."""
        require(self.population >= 2, "es.population", "must be >= 2 when ES runs (0 is resolved by the run)",
                self.population)
        require(self.generations >= 1, "es.generations", "must be >= 1 when ES runs (0 is resolved by the run)",
                self.generations)


NOISES = ("full", "lowrank")


class FullNoise(ESConfig):
    noise: Literal["full"] = "full"
    rank: ClassVar[None] = None

    @model_validator(mode="before")
    @classmethod
    def _no_rank(cls, raw: Any) -> Any:
        # ESConfig(noise=...) with an unknown mode lands here; in a config the union says it
        if isinstance(raw, dict) and raw.get("noise", "full") not in NOISES:
            raise config_error("es.noise", f"must be one of {', '.join(NOISES)}", raw["noise"],
                               did_you_mean(raw["noise"], NOISES))
        # run directories written before the union recorded `rank = 1` under full noise too
        if isinstance(raw, dict) and raw.get("rank", 1) != 1:
            raise config_error("es.rank", 'is for es.noise = "lowrank" only', raw["rank"])
        return upgraded(raw)


class LowRankNoise(ESConfig):
    noise: Literal["lowrank"]
    rank: int = Field(1, ge=1, le=512, description="vLLM's LoRA ranks")


def _noise(raw: Any) -> str:  # named after the key it reads: error lines name es.noise
    return (raw.get("noise", "full") if isinstance(raw, dict) else getattr(raw, "noise", "full"))


# what a config declares its [es] field as
ESSection = Annotated[Union[Annotated[FullNoise, Tag("full")], Annotated[LowRankNoise, Tag("lowrank")]],
                      Discriminator(_noise)]


def upgraded(es: Any) -> Any:
    """An [es] table as a run logged it before the noise union (`rank` under full
    noise too), in today's shape: what `--resume` compares with the current config."""
    if isinstance(es, dict) and es.get("noise", "full") == "full":
        return {k: v for k, v in es.items() if k != "rank"}
    return es
