"""Adaptive endpoint ensembles (`[endpoint] select = "adaptive"`): the run
learns which of its proposer models pays, as ShinkaEvolve's bandit ensemble
does, from its own candidates.

Each model's weight for the next step is its configured weight times the
posterior mean of its success rate under a uniform prior,
`weight x (1 + successes) / (2 + candidates)`. A success is a candidate that
scored and beat every parent it was shown (a request with no scored parent:
one that scored), the event the search lives on. A model that writes prose
loses weight with each candidate; none ever reaches zero, so a model that
started badly is still asked now and then.

The weights are a function of the candidates before the step, so a resumed
run, which rebuilds its candidates from the log, asks the same models.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

SELECTIONS = ("fixed", "adaptive")


def improved(candidate: Any, parents: Iterable[Any], direction: str) -> bool:
    """Whether a candidate is a success for its model: it scored, and beat each scored parent it was shown."""
    if not candidate.valid:
        return False
    scored = [p.objective for p in parents if p is not None and p.valid]
    if not scored:
        return True
    return candidate.objective < min(scored) if direction == "min" else candidate.objective > max(scored)


def record(candidates: Iterable[Any], models: Iterable[str], direction: str) -> dict[str, dict[str, int]]:
    """Per model: the candidates it wrote, how many scored, how many were successes (`improved`).
    `candidates` must include every parent they name (the seeded template too)."""
    candidates = list(candidates)
    by_id = {c.id: c for c in candidates}
    found = {name: {"candidates": 0, "valid": 0, "improved": 0} for name in models}
    for c in candidates:
        model = c.model_state.get("model") if c.model_state.get("kind") == "endpoint" else None
        if model in found:
            found[model]["candidates"] += 1
            found[model]["valid"] += c.valid
            found[model]["improved"] += improved(c, (by_id.get(p) for p in c.parents), direction)
    return found


def adaptive_weights(models: Mapping[str, float], seen: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """The next step's weights, summing to 1: configured weight x (1 + successes) / (2 + candidates)."""
    raw = {name: weight * (1 + seen[name]["improved"]) / (2 + seen[name]["candidates"])
           for name, weight in models.items()}
    total = sum(raw.values())
    return {name: round(value / total, 6) for name, value in raw.items()}
