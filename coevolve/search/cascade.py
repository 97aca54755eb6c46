"""The evaluation cascade (issue 19): a cheap first stage before the full
training set, for tasks whose evaluation is expensive.

A task opts in with `cascade_stage` (a set of a few instances, one of its
splits), `cascade_margin` and `cascade_against` (tasks.base.declared_cascade).
Each new candidate is scored on the stage first; it goes on to the training
set only if that objective is no worse than the bar

    bar = R + margin * |R|   (direction "min")      R - margin * |R|   ("max")

where R is the worst, median or best objective of the current archive (the
population as it stands before the step). Otherwise it stops with the
outcome `cascade`: no objective, a message naming the stage score and the
bar, recorded as such in candidates.jsonl and events.jsonl, and counted in
the summary's failures and the ledger's outcomes. Its ES reward (levels kind)
is the bottom of "valid but worse" (coevolve/search/reward.py), not "failing".

Cost: a candidate is charged one evaluation when it is requested, whatever
becomes of it (coevolve/search/ledger.py); a stage-1 rejection is therefore
one evaluation, like any other candidate, and the budget stays exact. The
ledger only relabels its outcome from "evaluated" to "cascade". Stage-1
failures (a crash, a timeout, an invalid solution on the few instances) stop
the candidate with that failure, not scored on the full set either.

With an empty archive (the first step, or no valid candidate yet) there is
nothing to compare with: every candidate goes straight to the training set.
The bar compares a stage score with the archive's training scores, so the
stage should be representative (e.g. the first instances of the training
set); the margin absorbs the difference. The stage scores are logged with the
step's results, so a resumed run replays the same outcomes without scoring
again. Off unless a task declares it: the built-in tasks do not.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from coevolve.search.ledger import Ledger
from coevolve.search.reward import median
from tasks.base import Cascade, declared_cascade

CASCADE = "cascade"  # the outcome of a candidate stopped at stage 1 (failure name, ledger outcome)


@dataclasses.dataclass
class Stopped:
    """A candidate that did not clear stage 1 (shaped like the sandbox's EvalResult for the loop)."""

    message: str
    seconds: float
    objective: float | None = None
    failure: str = CASCADE
    ok: bool = False


def reference(cascade: Cascade, archive: Sequence[float], direction: str) -> float | None:
    """The archive's worst, median or best objective; None for an empty archive."""
    values = sorted(archive, reverse=direction == "max")  # best first
    if not values:
        return None
    if cascade.against == "best":
        return values[0]
    if cascade.against == "worst":
        return values[-1]
    return median(values)


def bar(cascade: Cascade, archive: Sequence[float], direction: str) -> float | None:
    """The stage-1 objective a candidate must reach; None: no bar (empty archive)."""
    ref = reference(cascade, archive, direction)
    if ref is None:
        return None
    slack = cascade.margin * abs(ref)
    return ref + slack if direction == "min" else ref - slack


def clears(objective: float, needed: float, direction: str) -> bool:
    return objective <= needed if direction == "min" else objective >= needed


def _gate(task: Any, archive: Sequence[float]) -> tuple[Any, float] | None:
    """The task's cascade and the bar its first stage sets; None when it declares none or the archive
    sets no bar yet (every program then goes to the training set at once)."""
    cascade = declared_cascade(task)
    needed = None if cascade is None else bar(cascade, archive, task.direction)
    return None if needed is None else (cascade, needed)


def first_set(task: Any, archive: Sequence[float]) -> tuple[str, int]:
    """The set `evaluate_many` scores a new program on first: the cascade's stage, else the training set."""
    gate = _gate(task, archive)
    return task.train if gate is None else gate[0].stage


def evaluate_many(evaluator: Any, task: Any, codes: list[str], archive: Sequence[float]) -> list[Any]:
    """Score `codes` on the task's training set, through the cascade when the
    task declares one; one result per code, in order (the sandbox's results,
    or `Stopped` for a stage-1 rejection)."""
    if not codes:
        return []
    split, size = task.train
    gate = _gate(task, archive)
    if gate is None:
        return list(evaluator.evaluate_many([(code, task, split, size) for code in codes]))
    cascade, needed = gate
    stage_split, stage_size = cascade.stage
    first = list(evaluator.evaluate_many([(code, task, stage_split, stage_size) for code in codes]))
    results: list[Any] = [None] * len(codes)
    onward = []
    where = f"stage 1 ({stage_split} {stage_size})"
    for i, result in enumerate(first):
        objective = getattr(result, "objective", None)
        if not getattr(result, "ok", objective is not None):
            # failed on the few instances: that failure, without the full set
            message = str(getattr(result, "message", "") or "")
            results[i] = dataclasses.replace(result, message=f"at {where}: {message}") \
                if dataclasses.is_dataclass(result) else result
        elif clears(objective, needed, task.direction):
            onward.append(i)
        else:
            ref = reference(cascade, archive, task.direction)
            results[i] = Stopped(f"{where}: objective {objective:.6g} misses the bar {needed:.6g} (the archive's "
                                 f"{cascade.against} {ref:.6g}, margin {cascade.margin:g}); not scored on "
                                 f"{split} {size}", float(getattr(result, "seconds", 0.0) or 0.0))
    full = evaluator.evaluate_many([(codes[i], task, split, size) for i in onward]) if onward else []
    for i, result in zip(onward, full):
        spent = float(getattr(first[i], "seconds", 0.0) or 0.0)  # a candidate's seconds cover both stages
        results[i] = dataclasses.replace(result, seconds=float(result.seconds or 0.0) + spent) \
            if dataclasses.is_dataclass(result) else result
    return results


def relabel(ledger: Ledger, results: list[Any]) -> None:
    """Move the stage-1 rejections among a step's `results` (as logged) from
    the ledger's "evaluated" outcome to "cascade": the same charge, named. Runs
    for live and replayed steps alike, so a resumed ledger equals an uninterrupted one."""
    for result in results:
        if result.failure == CASCADE and result.duplicate_of is None:
            ledger.reclassify("evaluated", CASCADE)
