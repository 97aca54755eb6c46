"""A killed comparison's report does not compare an arm whose runs have not finished: it says so and how to
go on (walkthrough s51, finding 8)."""

from __future__ import annotations

from coevolve.report.collecting import verdict


def arm(method: str, runs: int, finished: int, mean: float | None) -> dict:
    return {"kind": "method", "method": method, "runs": runs, "finished": finished,
            "objective": {"mean": mean, "std": 0.0 if mean is not None else None, "n": finished}}


def test_an_arm_with_an_unfinished_run_is_not_compared():
    found = verdict(arm("sample", 1, 1, 7.0), arm("eoh", 1, 0, None))
    assert found["distinct"] is None and found["unfinished"]
    assert found["why"] == "eoh's run has not finished (0 of 1 done): rerun coevolve compare"
    two = verdict(arm("sample", 3, 1, 7.0), arm("eoh", 3, 3, 6.0))["why"]
    assert two == "sample's runs have not finished (1 of 3 done): rerun coevolve compare"


def test_finished_arms_are_still_judged():
    found = verdict(arm("sample", 1, 1, None), arm("eoh", 1, 1, 6.0))
    assert found == {"distinct": None, "why": "a method has no scored heuristic"}


def test_the_report_says_the_arm_has_not_finished_instead_of_a_verdict():
    from types import SimpleNamespace

    from coevolve.report.rendering import conclusions

    delta = {"kind": "delta", "task": "tsp_construct", "budget": 6, "split": "test", "size": 50, "base": "sample",
             "variant": "eoh", **verdict(arm("sample", 1, 1, 7.0), arm("eoh", 1, 0, None))}
    lines = conclusions(SimpleNamespace(compare=SimpleNamespace(tasks=[])), [delta], [], {}, [])
    assert lines[0].endswith("at budget 6: not compared yet: eoh's run has not finished (0 of 1 done): "
                             "rerun coevolve compare.")
    assert "cannot be told apart" not in "\n".join(lines)
