"""What the proposer and the skill's analysts are shown of earlier candidates: a failure report states
its failing line once (the 135M model, shown it twice, copied the failed program back), a success
analyst reads no program that only equals the template as one that "scored well", consecutive
refreshes read different successes where there are others, and a run's skill names its task as
`coevolve distill` does (tsp_construct, not the folder's tsp-construct). Real sandbox where a
traceback matters; no engine."""

from __future__ import annotations

from pathlib import Path

from coevolve.search.loop import logged_result
from coevolve.search.population import Candidate
from coevolve.search.prompts import Context, describe_failure, operator_messages
from coevolve.search import skill as skills
from coevolve.search.skill import (SUCCESS_ANALYST, analyst_conversations, distilled_for, pick_cases, refresh,
                                   write_version)
from test_own_problem import PICK, write

FAILING = "def pick(values):\n    order = list(range(len(values)))\n    return order[len(values) * 7]\n"
TEMPLATE = [3.0, 2.0, 4.0]  # the template's per-instance objectives (min)


def candidate(id: int, objective: float | None = None, profile: list[float] | None = None,
              message: str = "") -> Candidate:
    c = Candidate(id=id, step=id, operator="m1", parents=[0], model_state={"kind": "base"},
                  code=f"def pick(values):\n    return {id}\n", idea=f"idea {id}")
    c.objective, c.profile = objective, profile
    if objective is None:
        c.failure, c.message = "exception", message or f"ValueError: boom {id}"
    return c


def test_a_real_tracebacks_report_states_the_failing_line_once(tmp_path):
    from coevolve.sandbox import Sandbox

    task = str(write(Path(tmp_path) / "pick", "problem.py", PICK))
    with Sandbox(workers=1, timeout_s=20) as sandbox:
        result = sandbox.evaluate(FAILING, task)
    failed = candidate(5)
    failed.code = FAILING
    failed.settle(logged_result(result))
    # the traceback quotes the line with ~^ markers under it: the report keeps neither, only its own line
    assert "    return order[len(values) * 7]\n           ~~~~~^" in failed.message
    report = describe_failure(failed, 300)
    assert report.count("return order[len(values) * 7]") == 1, report
    assert "failing line: return order[len(values) * 7]" in report and "IndexError" in report
    assert "^^^" not in report and "~~~" not in report
    args = ("m1", "Minimise.", "def pick(values):\n    return 0\n", "pick", "min")
    shown = operator_messages(*args, [candidate(2, 3.0)], context=Context(failures=(report,)))[1]["content"]
    assert "do not repeat their mistakes or copy their failing lines:\n" + report in shown
    repair = operator_messages("repair", *args[1:], [failed], context=Context(failures=(report,)))[1]["content"]
    assert repair.startswith("Minimise.\n\nHeuristic that failed; do not return it unchanged.")
    assert repair.count("return order[len(values) * 7]") == 2  # its program, and the report's line once


def test_a_success_that_only_equals_the_template_is_not_read_as_one_that_scored_well():
    echo = candidate(7, 9.0, list(TEMPLATE))  # the best score, but it decided as the template everywhere
    real = candidate(8, 9.5, [2.0, 3.0, 4.0])
    failures = [candidate(9), candidate(10)]
    cases = pick_cases([echo, real, *failures], 3, 1, 48, "min", template=TEMPLATE)
    assert [c.id for c in cases] == [8, 10, 9]
    # no other success: the echo is read, with the note the parents' notes give, not as one that scored well
    only = pick_cases([echo, *failures], 3, 1, 48, "min", template=TEMPLATE)
    assert only[0] is echo

    class Task:
        description, direction = "Minimise the tour.", "min"

    system, user = (m["content"] for m in analyst_conversations(only[:1], Task(), "(empty)", 300, TEMPLATE)[0])
    assert system == skills.ECHO_ANALYST and "scored well" not in system
    assert ("Outcome: WORKED, score 9 (lower is better); the same objective as the task's template on all 3 "
            "training instances") in user
    system, user = (m["content"] for m in analyst_conversations([real], Task(), "(empty)", 300, TEMPLATE)[0])
    assert system == SUCCESS_ANALYST and "better on 1, worse on 1, the same on 1 (of 3)" in user
    # with no template profile (a task without instance_scores) nothing changes
    assert pick_cases([echo, real, *failures], 3, 1, 48, "min")[0] is echo


def test_consecutive_refreshes_read_different_successes_where_there_are_others():
    best, second = candidate(3, 5.0, [1.0, 1.0, 1.0]), candidate(4, 6.0, [2.0, 1.0, 1.0])
    pool = [best, second, candidate(5)]
    first = pick_cases(pool, 2, 1, 48, "min", template=TEMPLATE)
    assert first[0] is best
    again = pick_cases(pool, 2, 1, 48, "min", template=TEMPLATE, previous=[c.id for c in first])
    assert again[0] is second
    # the only success is read again: no other exists
    assert pick_cases([best, candidate(5)], 2, 1, 48, "min", previous=[3])[0] is best


def test_a_runs_skill_names_its_task_as_distill_does(tmp_path):
    description, body = refresh(None, ["ADD Ideas: Prefer the nearest city."], [], ["Define f."], "tsp_construct",
                                "1 error and 0 success analyses")
    version = write_version(tmp_path, 1, "tsp-construct-heuristics", description, body)
    assert description.startswith("Rules for writing tsp_construct heuristics")
    assert distilled_for(version) == "tsp_construct"
    assert body.startswith("# tsp-construct-heuristics (Trace2Skill)")


def analysed(directory: Path) -> list[list[int]]:
    """Per refresh of a run, the programs its analysts read (the parents of its distill requests)."""
    import json

    events = [json.loads(line) for line in (directory / "events.jsonl").read_text().splitlines()]
    return [[r["parents"][0] for r in e["requests"]] for e in events
            if e.get("type") == "step" and e["operator"] == "distill"]


def test_a_runs_refreshes_read_different_successes_and_an_older_run_resumes_as_it_picked(tmp_path, monkeypatch):
    """In the loop: a refresh's success analysts skip the programs the previous refresh read where others
    exist; a run whose start event lacks the rule (started before it) picked as before and resumes so
    (its logged refreshes replay only under its own rule)."""
    from coevolve.runstore import read_jsonl
    from coevolve.search import loop
    from test_search_context import cut_run, make_config, run

    config = make_config("eoh+trace2skill", 40, skill={"every": 2, "analysts": 2, "successes": 1})
    run(tmp_path / "new", config)
    new = analysed(tmp_path / "new")
    assert all(a[0] != b[0] for a, b in zip(new, new[1:])), new  # each refresh's success case differs
    with monkeypatch.context() as old:
        old.setattr(loop, "RULES", {k: v for k, v in loop.RULES.items() if k != "analyst_cases"})
        run(tmp_path / "old", config)
    before = analysed(tmp_path / "old")
    assert before != new  # the old rule read one success again: the case this compatibility is for
    events = read_jsonl(tmp_path / "old" / "events.jsonl")
    steps = [i for i, e in enumerate(events) if e.get("type") == "step"]
    cut = cut_run(tmp_path / "old", tmp_path / "cut", events[:steps[-3]])
    run(cut, config, resume=True)
    assert analysed(cut) == before
