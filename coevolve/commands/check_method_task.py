"""The task `coevolve check-method` drives a method on unless --task names another: scored in
milliseconds, each instance's objective the distance of the template's constant to the instance's
number (0.5, 1, 1.5), so a reply that changes the constant scores differently (the method's archive
fills: a real task's template may have no constant to change) and different constants win
different instances (a per-instance archive, Pareto's, holds more than one)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

TEMPLATE = '''def heuristic(x):
    """Return a guess of the number x (a float in 0.5..1.5); the objective is the mean distance."""
    GUESS = 1.0
    return GUESS
'''


class MethodProbe:
    name = "method_probe"
    description = "Guess each instance's number x; the closer the better."
    function_name = "heuristic"
    template = TEMPLATE
    direction = "min"
    train = ("train", 3)
    score_is_instance_mean = True

    def splits(self) -> dict[str, list[int]]:
        return {"train": [3]}

    def instances(self, split: str, size: int) -> list[float]:
        return [0.5 + k / max(size - 1, 1) for k in range(size)]

    def decide(self, fn: Callable[..., Any], instances: Any) -> Iterator[float]:
        for x in instances:
            yield float(fn(x))

    def instance_scores(self, decisions: list[Any], instances: Any) -> list[float]:
        return [abs(float(d) - x) for d, x in zip(decisions, instances)]

    def score(self, decisions: list[Any], instances: Any) -> float:
        values = self.instance_scores(decisions, instances)
        return sum(values) / len(values)

    def instance_seconds(self, size: int) -> float:
        return 1.0

    def reference(self, split: str, size: int) -> None:
        return None
