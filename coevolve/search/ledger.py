"""The one counter of the evaluation budget.

Every candidate the LLM is asked to produce costs one evaluation, whatever
becomes of it: initial population, retries, duplicates of earlier code and
texts with no parseable code all count. (The reference code leaks parse
failures and init retries; charging per request closes that leak and makes
the cost of a weak proposer visible.) LLM requests, tokens and endpoint
retries are counted separately and never consume budget; so are the free
re-asks of replies with no parseable code that the reference's accounting
allows ([accounting] parse_retries, counted as `parse_retries`), and of
programs that clone the template or an earlier candidate ([accounting]
clone_retries, counted as `clone_retries`). The task's
template, scored once to seed the archive ([context] seed_template), is not a
proposal: no request was made for it, so it is counted as `seeded`, never in
`used` or the outcomes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from coevolve.engine.base import Completion


class BudgetExceeded(RuntimeError):
    """A charge beyond the budget: a bug in the caller, never silently allowed."""


@dataclass
class Ledger:
    budget: int
    used: int = 0
    outcomes: Counter = field(default_factory=Counter)  # "evaluated" / "duplicate" / "parse" / "cascade" -> count
    llm_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parse_retries: int = 0  # free re-asks of unparseable replies (the reference's accounting); never in `used`
    clone_retries: int = 0  # free re-asks of clones of the template or an earlier candidate; never in `used`
    llm_retries: int = 0  # endpoint requests tried again (429/5xx/no answer): counted, never charged
    seeded: int = 0  # programs scored to seed the archive (the template), not proposed: never in `used`

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"budget must be >= 1, got {self.budget}")

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    @property
    def exhausted(self) -> bool:
        return self.used >= self.budget

    def grant(self, wanted: int) -> int:
        """How many of `wanted` candidates may still be requested (a batch is cut to the budget)."""
        return max(0, min(wanted, self.remaining))

    def charge(self, outcome: str) -> int:
        """Charge one candidate; returns its evaluation number (1-based)."""
        if self.used >= self.budget:
            raise BudgetExceeded(f"evaluation {self.used + 1} charged beyond the budget of {self.budget}")
        self.used += 1
        self.outcomes[outcome] += 1
        return self.used

    def reclassify(self, old: str, new: str) -> None:
        """Name one charged candidate's outcome anew (a stage-1 rejection of the
        evaluation cascade was charged as "evaluated"): `used` does not change."""
        if self.outcomes[old] < 1:
            raise ValueError(f"no {old!r} charge to reclassify as {new!r}")
        self.outcomes[old] -= 1
        self.outcomes[new] += 1
        if not self.outcomes[old]:
            del self.outcomes[old]

    def count_reasks(self, why: str, n: int) -> None:
        """Free re-asks ([accounting]), by reason ("parse" or "clone"): counted, never charged."""
        if why not in ("parse", "clone"):
            raise ValueError(f"unknown re-ask reason {why!r}")
        setattr(self, f"{why}_retries", getattr(self, f"{why}_retries") + n)

    def record_llm(self, completions: Iterable[Completion]) -> None:
        for completion in completions:
            self.llm_requests += 1
            self.prompt_tokens += completion.prompt_tokens
            self.completion_tokens += completion.completion_tokens
            self.llm_retries += completion.retries

    def to_dict(self) -> dict:
        return {
            "budget": self.budget,
            "used": self.used,
            "outcomes": dict(sorted(self.outcomes.items())),
            "llm_requests": self.llm_requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "parse_retries": self.parse_retries,
            "clone_retries": self.clone_retries,
            "llm_retries": self.llm_retries,
            "seeded": self.seeded,
        }
