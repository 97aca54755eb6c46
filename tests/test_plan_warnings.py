"""A run's plan warnings (coevolve.search.methods.plan_warnings) come from the method its plan was made
with: one built per plan, however many warnings it looks for (the budget's, past the budget for a step
that builds on a candidate, and the method's own)."""

from __future__ import annotations

import pytest

from coevolve.base.config import build_config
from coevolve.search import methods
from coevolve.search.runconfig import RunConfig


@pytest.mark.parametrize("raw, warning", [
    # the default EoH within its initial population: the plan is walked past the budget
    ({"run": {"method": "eoh", "budget": 5}},
     "every step in run.budget = 5 writes from the template alone: no candidate builds on another (the first step "
     "that does would need run.budget >= 11)"),
    # a method's own warning (Method.plan_warnings)
    ({"run": {"method": "islands", "budget": 40}, "islands": {"reset_every": 2}},
     "islands.reset_every = 2 evaluations is shorter than a step (10): the worse half is reset several times at one "
     "step's end, with no new program between resets"),
])
def test_a_plan_builds_its_method_once_for_its_warnings(monkeypatch, raw, warning):
    config = build_config(RunConfig, raw)
    built: list[str] = []
    make = methods.make_method

    def counted(run_config: RunConfig) -> methods.Method:
        built.append(run_config.run.method)
        return make(run_config)

    monkeypatch.setattr(methods, "make_method", counted)
    assert methods.run_plan(config)["warnings"] == [warning]
    assert built == [raw["run"]["method"]]
