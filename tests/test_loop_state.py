"""What the search loop keeps between requests gives the same answers however it was reached: the side
of a judged skill trial an ES generation shows (asked in any order, again, or rebuilt on resume), and the
failures each request shows (looked up in the candidates kept by id). Fake engine and sandbox."""

from __future__ import annotations

from coevolve.runstore import read_jsonl
from coevolve.search.skill_versions import SkillVersions
from test_feedback_records import CRASH, PROSE, ScriptedEngine, valid
from test_feedback_records import run as run_scripted
from test_search_context import cut_run, make_config, run


def test_a_trials_side_of_an_es_generation_is_the_same_asked_again_or_out_of_order():
    versions = SkillVersions(judged=True)
    versions.add(1, None, 3, generation=2)  # written at step 3, after the run's ES generations 0 and 1
    # before: the first generation asked (5) became the trial's first, and 2 then showed the other side
    asked = [versions.for_generation(g) for g in (5, 2, 3, 2, 4, 5)]
    assert asked == [None, 1, None, 1, 1, None]  # from generation 2 on: the challenger, then alternating


def test_a_trial_rebuilt_on_resume_shows_the_sides_of_the_one_that_ran_through():
    walked = SkillVersions(judged=True)
    walked.add(0, None, -1, generation=0)
    walked.settle(None)
    walked.add(1, None, 6, generation=3)
    through = [walked.for_generation(g) for g in range(3, 8)]
    rebuilt = SkillVersions(judged=True)
    rebuilt.add(1, None, 6, generation=3)  # a resume that goes on live from generation 5
    assert [rebuilt.for_generation(g) for g in range(5, 8)] == through[2:] == [1, None, 1]


def requests_shown(directory) -> list[list]:
    """Per step of a run's log, the skill version and the failures each request showed."""
    return [[(r.get("skill"), r.get("failures_shown")) for r in e["requests"]]
            for e in read_jsonl(directory / "events.jsonl") if e.get("type") == "step"]


def judged_es_config():
    """EoH with m1/m2 as ES generations of 4 members and a judged refresh every 4 steps: one trial holds
    two ES generations in a row, the second showing the version it patched."""
    return make_config("eoh+esopt+trace2skill", 60,
                       eoh={"population": 4, "offspring": 4, "operators": ["e1", "e2", "m1", "m2", "repair"],
                            "parents": 2},
                       es={"population": 4, "proposals_per_member": 1, "operators": ["m1", "m2"]},
                       skill={"every": 4, "analysts": 2, "successes": 1, "keep": "judged"},
                       context={"fingerprint": False})


def test_a_judged_es_run_resumed_anywhere_shows_each_request_what_the_whole_run_did(tmp_path):
    config = judged_es_config()
    run(tmp_path / "whole", config)
    shown = requests_shown(tmp_path / "whole")
    lines = read_jsonl(tmp_path / "whole" / "candidates.jsonl")
    events = read_jsonl(tmp_path / "whole" / "events.jsonl")
    steps = [i for i, e in enumerate(events) if e.get("type") == "step"]
    generations = [i for i in steps if events[i].get("es")]
    # a trial's two generations in a row: its first shows the version on trial, the next the one it patched
    pair = next(i for i, j in zip(generations, generations[1:]) if j == i + 1 and events[i]["requests"][0]["skill"])
    assert events[pair + 1]["requests"][0]["skill"] is None
    for i in [i for i in steps if events[i]["operator"] == "distill" and events[i]["skill"]]:
        first = next((j for j in generations if j > i), None)  # each trial's first generation shows its version
        if first is not None and not any(events[k]["operator"] == "distill" for k in steps if i < k < first):
            assert {r["skill"] for r in events[first]["requests"]} == {events[i]["skill"]["version"]}
    # killed before each ES generation, and before each refresh
    cuts = generations + [i for i in steps if events[i]["operator"] == "distill"]
    for cut in cuts:
        d = cut_run(tmp_path / "whole", tmp_path / f"cut{cut}", events[:cut])
        run(d, config, resume=True)
        assert requests_shown(d) == shown, cut
        assert read_jsonl(d / "candidates.jsonl") == lines, cut


def test_the_failures_a_request_shows_are_the_same_on_replay_as_when_first_asked(tmp_path):
    # copies of a crash: a copy stands for its original, looked up by id
    config = make_config("sample", 16, context={"fingerprint": False})
    run_scripted(tmp_path / "full", config, ScriptedEngine([CRASH, PROSE, valid(1), valid(2)], copy=True))
    lines = read_jsonl(tmp_path / "full" / "candidates.jsonl")
    copies = {c["duplicate_of"] for c in lines if c.get("duplicate_of") is not None}
    assert copies & {i for c in lines for i in c.get("failures_shown", [])}  # an original shown for its copy
    events = read_jsonl(tmp_path / "full" / "events.jsonl")
    cut = [i for i, e in enumerate(events) if e.get("type") == "step"][2]  # killed before step 2
    d = cut_run(tmp_path / "full", tmp_path / "killed", events[:cut])
    again = ScriptedEngine([], copy=True)
    again.calls.append(4)  # its first call was the killed run's step 0
    run_scripted(d, config, again, resume=True)
    assert requests_shown(d) == requests_shown(tmp_path / "full")
    assert read_jsonl(d / "candidates.jsonl") == lines
