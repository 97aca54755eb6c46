"""Sampling settings: the one declaration. It is the `[sampling]` section of
every run config (heuristic search and agent runs) and what a `Generator`
takes per call; a config's own defaults come from the section instance its
dataclass declares (e.g. shorter replies for agent turns)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator
from pydantic.dataclasses import dataclass

from coevolve.base.config import STRICT

# vLLM refuses a temperature above 2 (so do OpenAI-compatible servers), but only at the first
# generation, after the run directory is written and the engine loaded: every temperature field
# is bounded here, with this text in its error line
MAX_TEMPERATURE = 2
TEMPERATURE = "vLLM's and OpenAI's range"


# A pydantic dataclass rather than a Section: generators take it per call and
# callers derive variants with dataclasses.replace, which validates them too.
# Strict field by field: a strict dataclass would take no TOML table, only instances.
@dataclass(frozen=True, config={**STRICT, "strict": False})
class Sampling:
    temperature: float = Field(0.7, ge=0, le=MAX_TEMPERATURE, strict=True, description=TEMPERATURE)
    top_p: float = Field(1.0, gt=0, le=1, strict=True)  # < 1 sorts the whole vocabulary per token: slow on CPU
    top_k: int = Field(-1, strict=True)  # -1: the whole vocabulary; the paper's agent evaluation samples with 40
    max_tokens: int = Field(512, ge=1, strict=True)
    # TOML gives a list; vLLM refuses an empty stop string at the first generation
    stop: tuple[Annotated[str, StringConstraints(min_length=1)], ...] = ()
    # > 0 penalises tokens already in the reply (OpenAI/vLLM semantics); the paper's
    # agent runs use 1.5 (Sudoku) and 2 (math); 0 is off
    presence_penalty: float = Field(0.0, ge=-2, le=2, strict=True)

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, value: int) -> int:
        if not (value == -1 or value >= 1):
            raise ValueError("must be -1 (off) or >= 1")
        return value


# The paper's agent evaluation sampling per task (App. D). Math (ReAct, Table 8):
# temperature 1, top-p 1, top-k 40 (its training rollouts add presence penalty 2;
# that it holds for evaluation too is not stated, so it is left out here). Sudoku
# (D.1.2, "training and evaluation"): temperature 0.7, top-p 0.8, top-k 20,
# presence penalty 1.5. min-p 0 and repetition penalty 1 are vLLM's defaults.
# Tasks name theirs as `paper_sampling`; PAPER_EVAL is the fallback.
PAPER_EVAL = Sampling(temperature=1.0, top_p=1.0, top_k=40)
PAPER_SUDOKU = Sampling(temperature=0.7, top_p=0.8, top_k=20, presence_penalty=1.5)
