"""Stand-ins for the engine, sandbox and task, for fast tests of the search logic.

The fake engine answers with canned texts whose mix of prose, crashing code
and valid code is a pure function of the request seed and the current
weights, so runs are reproducible and ES updates change what it proposes.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from coevolve.engine.base import Completion, generate_members_sequentially
from coevolve.sandbox.results import EvalResult, FailureKind
from tasks.base import behaviour_of, feedback_of

TEMPLATE = '''def heuristic(x):
    """Return a score."""
    SCORE = 50.0
    return SCORE
'''


def _unit(*parts) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


class FakeEngine:
    device = "fake"

    def __init__(self) -> None:
        self.weights = np.zeros(4)
        self.perturbation: tuple[int, float] | None = None
        self.calls: list[int] = []  # conversations per chat call
        self.perturbed_calls = 0

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        assert seeds is not None and len(seeds) == len(conversations)
        self.calls.append(len(conversations))
        self.prompts = [c[-1]["content"] for c in conversations]  # the last call's, for tests of the context
        self.systems = [c[0]["content"] for c in conversations]
        self.constraints = constraints
        shift = float(self.weights.sum())
        if self.perturbation is not None:
            shift += self.perturbation[1] * (_unit("p", self.perturbation[0]) - 0.5) * 1000
        out = []
        for conversation, seed in zip(conversations, seeds):
            u = _unit(seed, round(shift, 9))
            prompt = conversation[-1]["content"]
            if u < 0.2:
                text = "I would pick the nearest node, because it is close."
            elif u < 0.35:
                text = "{crash}\n```python\ndef heuristic(x):\n    raise ValueError('boom')\n```"
            elif u < 0.45:  # the same program each time: a duplicate after the first
                text = "{same}\n```python\ndef heuristic(x):\n    SCORE = 42.0\n    return SCORE\n```"
            else:
                value = round(10 + 40 * _unit("v", seed, round(shift, 9)) - shift, 6)
                text = f"{{idea {seed}}}\n```python\ndef heuristic(x):\n    SCORE = {value}\n    return SCORE\n```"
            out.append(Completion(text=text, prompt_tokens=len(prompt.split()), completion_tokens=len(text.split())))
        return out

    @contextmanager
    def perturbed(self, seed: int, sigma: float):
        assert self.perturbation is None
        self.perturbation = (seed, sigma)
        self.perturbed_calls += 1
        try:
            yield
        finally:
            self.perturbation = None

    def generate_members(self, jobs):
        return generate_members_sequentially(self, jobs)

    def noise_info(self) -> dict:
        return {"noise": "full", "rank": None}

    def apply_update(self, seeds, coefficients, alpha):
        for seed, c in zip(seeds, coefficients):
            self.weights += alpha / len(seeds) * c * np.random.default_rng(seed).standard_normal(4)

    def checksum(self) -> str:
        return hashlib.sha256(self.weights.tobytes()).hexdigest()[:16]


class FakeEvaluator:
    """Scores a program by its SCORE constant; `raise` in the code is a crash. For a task with
    `instance_scores`, as the sandbox does: the profile of the SCORE on each instance, its mean, the
    task's decision descriptors of those decisions and its note on them (tasks.base.behaviour_of and
    feedback_of, as the worker)."""

    def __init__(self) -> None:
        self.evaluated = 0

    def evaluate_many(self, items):
        results = []
        for code, task, split, size in items:
            self.evaluated += 1
            if "raise" in code:
                results.append(EvalResult(None, FailureKind.EXCEPTION, "ValueError: boom", seconds=0.01))
                continue
            match = re.search(r"SCORE = (-?[0-9.]+)", code)
            if match and callable(getattr(task, "instance_scores", None)):
                instances = task.instances(split, size)
                decisions = [float(match.group(1))] * len(instances)
                profile = [float(v) for v in task.instance_scores(decisions, instances)]
                results.append(EvalResult(float(np.mean(profile)), None, seconds=0.01, profile=profile,
                                          behaviour=behaviour_of(task, decisions, instances),
                                          feedback=feedback_of(task, decisions, instances)))
                continue
            results.append(EvalResult(float(match.group(1)), None, seconds=0.01) if match
                           else EvalResult(None, FailureKind.INVALID, seconds=0.01))
        return results


@dataclass
class FakeReference:
    value: float
    kind: str = "bound"
    source: str = "fake"


class FakeTask:
    name = "fake"
    description = "Minimise the score."
    function_name = "heuristic"
    template = TEMPLATE
    direction = "min"
    train = ("train", 8)

    def reference(self, split, size):
        return FakeReference(5.0)
