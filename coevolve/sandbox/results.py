"""What the sandbox hands back: a score or a typed failure, never an exception.

The failure kinds are ordered roughly by how far a candidate got (parse ->
syntax -> loads -> runs -> scores), so search rewards can tell them apart.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any

from coevolve.base.errors import UsageError
from coevolve.base.untrusted import clean
from tasks.base import FEEDBACK_CHARS, column_means


class TaskError(UsageError):
    """The task's own code failed in a sandbox worker before any candidate ran
    (its constructor, its instances): no candidate's fault, so no verdict. One
    line naming the task's file and line; the command stops with exit status 2."""


class FailureKind(str, Enum):
    PARSE = "parse"  # no code could be extracted (set by the caller via codeparse)
    SYNTAX = "syntax"
    MISSING_FUNCTION = "missing_function"
    BAD_SIGNATURE = "bad_signature"
    EXCEPTION = "exception"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    INVALID = "invalid"
    CRASH = "crash"  # the candidate's process died: segfault, os._exit, sys.exit, killed


@dataclass
class EvalResult:
    objective: float | None
    failure: FailureKind | None
    message: str = ""
    seconds: float = 0.0
    instances: int = 0  # instances scored (all of the set when ok)
    output: str = ""  # the candidate's captured stdout/stderr, truncated
    # each instance's objective (a task with instance_scores); None without, or when not all finite numbers
    profile: list[float] | None = None
    # the task's decision descriptors {name: value} (tasks.base.behaviour_of); None without, or when not finite
    behaviour: dict[str, float] | None = None
    feedback: str = ""  # the task's note on the decisions (tasks.base.feedback_of); "" without
    # the objective under each seed of the program's generators, when scored under several (over_seeds)
    seed_objectives: list[float] | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and self.objective is not None and math.isfinite(self.objective)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["failure"] = self.failure.value if self.failure else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvalResult":
        failure = data.get("failure")
        message = data.get("message", "")
        try:
            kind = FailureKind(failure) if failure else None
        except ValueError:  # never an exception in the caller: an unknown kind is a crash
            kind, message = FailureKind.CRASH, f"unknown failure kind {str(failure)[:40]!r}: {message}"
        objective = data.get("objective")
        return cls(  # the message and output are the candidate's text: no control characters
            objective=float(objective) if isinstance(objective, (int, float)) and kind is None else None,
            failure=kind,
            message=clean(message),
            seconds=float(data.get("seconds", 0.0)),
            instances=int(data.get("instances", 0)),
            output=clean(data.get("output", "")),
            profile=finite_numbers(data.get("profile")) if kind is None else None,
            behaviour=finite_mapping(data.get("behaviour")) if kind is None else None,
            feedback=clean(data.get("feedback", ""))[:FEEDBACK_CHARS] if kind is None else "",
            seed_objectives=finite_numbers(data.get("seed_objectives")) if kind is None else None,
        )


def over_seeds(results: list[EvalResult]) -> EvalResult:
    """One program's results with its generators seeded 0, 1, ... (`Sandbox(seeds=k)`) as one. A
    program that fails under any seed fails (the first such result): a heuristic that crashes on one
    draw in k is not one to keep. Its message names the seed when seed 0, the one a single scoring
    uses, passed: a failure under seed 0 reads as it would with one seed. Else the mean objective and the mean
    per-instance profile; the descriptors, note and output of seed 0 (the seed a single scoring
    uses); the seconds of all."""
    first = results[0]
    if len(results) == 1:
        return first
    seconds = sum(r.seconds for r in results)
    for seed, result in enumerate(results):
        if not result.ok:
            return replace(result, seconds=seconds, message=result.message if seed == 0 else
                           f"with the program's random generators seeded {seed} (one of {len(results)} seeds): "
                           f"{result.message}")
    objectives = [r.objective for r in results]
    return replace(first, objective=math.fsum(objectives) / len(results), seconds=seconds, seed_objectives=objectives,
                   profile=column_means([r.profile for r in results]))


def finite_numbers(value: Any) -> list[float] | None:
    """`value` as a list of finite floats, or None when it is anything else."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              and math.isfinite(v) for v in value):
        return None
    return [float(v) for v in value]


def finite_mapping(value: Any) -> dict[str, float] | None:
    """`value` as a non-empty {name: finite float}, or None when it is anything else."""
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        return None
    numbers = finite_numbers(list(value.values()))
    return None if numbers is None else dict(zip(value, numbers))


@dataclass
class ToolResult:
    """Outcome of `Sandbox.run_python`, shaped for an agent's observation
    (`stdout` and `error` without control characters: the Sandbox cleans them)."""

    stdout: str
    error: str
    failure: FailureKind | None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None

    def observation(self) -> str:
        """One text block to show the agent: output, then the error if any."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.failure is not None:
            parts.append(f"[{self.failure.value}] {self.error}".rstrip())
        return "\n".join(parts) if parts else "(no output)"
