"""What the proposer is told about a valid parent besides its score ([context] feedback): how it
did instance by instance against the task's template, and the task's own note on its decisions
(`feedback`, computed in the sandbox's trusted worker: tasks.base.feedback_of).

A score alone cannot say that a program's change did nothing (on the embedded model most valid
candidates score exactly as the template does) or where it loses; OpenEvolve's artifacts and
ShinkaEvolve's text feedback hand the evaluator's words back for the same reason.
"""

from __future__ import annotations

import math
from typing import Sequence

from coevolve.base.untrusted import clean


def _comparable(profile: Sequence[float] | None, template: Sequence[float] | None) -> bool:
    return bool(profile) and bool(template) and len(profile or ()) == len(template or ())


def _same(mine: float, base: float) -> bool:
    return math.isclose(mine, base, rel_tol=1e-9, abs_tol=1e-12)


def same_as_template(profile: Sequence[float] | None, template: Sequence[float] | None) -> bool:
    """Whether a program's per-instance objectives equal the template's on every instance: whatever
    its code changed, it decided nothing differently there. False when either is missing."""
    return _comparable(profile, template) and all(_same(a, b) for a, b in zip(profile or (), template or ()))


def against_template(profile: Sequence[float] | None, template: Sequence[float] | None, direction: str) -> str:
    """A program's per-instance objectives against the template's on the same instances, in words;
    "" when either is missing or they differ in length."""
    if not profile or not template or not _comparable(profile, template):
        return ""
    better = worse = 0
    for mine, base in zip(profile, template):
        if _same(mine, base):
            continue
        if (mine < base) == (direction == "min"):
            better += 1
        else:
            worse += 1
    n = len(profile)
    if better == worse == 0:
        return f"the same objective as the task's template on all {n} training instances"
    return (f"against the task's template, per training instance: better on {better}, worse on {worse}, "
            f"the same on {n - better - worse} (of {n})")


def parent_note(profile: Sequence[float] | None, template: Sequence[float] | None, direction: str,
                task_note: str, limit: int) -> str:
    """The note a prompt shows under one valid parent, cut to `limit` characters; "" when there is
    nothing to say."""
    text = "; ".join(part for part in (against_template(profile, template, direction), task_note.strip()) if part)
    text = clean(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"
