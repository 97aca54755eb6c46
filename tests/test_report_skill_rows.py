"""What the run table, `coevolve report` and benchmarks/skill_trials.py say about the skill and the
context (s54 walkthrough findings 1, 2, 3, 6, 8, 11, 14, 15): run directories made by hand from dicts, as
tests/test_report.py makes its comparison, with the summary fields the loop writes (`origins`,
`failures_repeated`, `analysts_cut_off` are the contract with coevolve/search/loop.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from coevolve.base.config import dump_toml, read_toml
from coevolve.base.records import read_summary
from coevolve.report import render, render_comparison, run_table
from coevolve.report import collecting
from coevolve.report.collecting import failure_causes, skill_use
from coevolve.report.rendering import context_rows
from coevolve.runstore import atomic_write_json, atomic_write_text
from coevolve.search.population import Candidate
import test_report

comparison = test_report.comparison  # a hand-made comparison of six finished runs (the fixture)
ROOT = Path(__file__).resolve().parents[1]
STAND_IN = "from the failures' own kinds"


def candidate(cid: int, step: int, objective: float | None, version: int | None = None,
              parents: tuple[int, ...] = ()) -> dict:
    return {"id": cid, "step": step, "operator": "m1" if parents else "i1", "parents": list(parents),
            "model_state": {"kind": "base"}, "code": f"def f(): return {cid}", "objective": objective,
            "failure": None if objective is not None else "exception", "message": "IndexError: boom",
            **({"skill_version": version} if version is not None else {})}


def origins(usable: int, stand_ins: int) -> dict:
    return {"analyses": 2, "errors": 2, "usable": usable, "stand_in": STAND_IN, "contract": 3,
            "analysed": usable, "condensed": 0, "stand_ins": stand_ins, "kept": 0}


# a run of two i1 steps (no skill yet), a refresh at step 2 (v001), step 3 showing it, a refresh at step 4
# (v002), step 5 showing it; 16 candidates and 4 analyst evaluations
CANDIDATES = ([candidate(1, 0, 6.0), candidate(2, 0, None), candidate(3, 0, None), candidate(4, 0, None),
               candidate(5, 1, None), candidate(6, 1, None), candidate(7, 1, None), candidate(8, 1, None)]
              + [candidate(9, 3, 5.0, 1, (1,)), candidate(10, 3, 7.0, 1, (1,)), candidate(11, 3, None, 1, (1,)),
                 candidate(12, 3, None, 1, (1,))]
              + [candidate(13, 5, 6.5, 2, (9,)), candidate(14, 5, None, 2, (9,)), candidate(15, 5, None, 2, (9,)),
                 candidate(16, 5, None, 2, (9,))])
VERSIONS = [{"version": 1, "step": 2, "evaluations": 10, "rules": 4, "patched": None,
             "path": "skills/v001/tsp-construct-heuristics/SKILL.md"},
            {"version": 2, "step": 4, "evaluations": 16, "rules": 5, "patched": 1,
             "path": "skills/v002/tsp-construct-heuristics/SKILL.md"}]


def context(**more) -> dict:
    """A summary's context as the loop writes it; `phases` in summary.json's sorted order."""
    return {"constrain": "on", "fingerprint": False, "rejected": 0, "rejected_template": 0, "parser_repairs": {},
            "repair_requests": 0, "repaired_valid": 0, "skill_start": None, "skill_trials": [],
            "phases": {"ES generations": {"candidates": 8, "valid": 1}, "prompt steps": {"candidates": 8, "valid": 3}},
            "cut_off": {"replies": 1, "valid": 0, "max_tokens": 320}, "skill_versions": VERSIONS, **more}


def skill_run(run: Path, more: dict | None = None, skill: dict | None = None) -> Path:
    """One of the comparison's runs remade as a +trace2skill run under skill.keep = "latest"."""
    summary = json.loads((run / "summary.json").read_text())
    summary.update({"budget": 20, "evaluations": 20, "valid": 4, "valid_rate": 4 / 20, "distinct_valid": 4,
                    "failures": {"exception": 12},
                    "ledger": {**summary["ledger"], "budget": 20, "used": 20,
                               "outcomes": {"evaluated": 16, "distill": 4}},
                    "context": context(**(more or {}))})
    atomic_write_json(run / "summary.json", summary)
    atomic_write_text(run / "candidates.jsonl", "".join(json.dumps(c) + "\n" for c in CANDIDATES))
    steps = [{"type": "step", "step": s, "requests": [{"slot": i, "skill": v} for i, v in enumerate(shown)],
              "results": [{"id": c["id"]} for c in CANDIDATES if c["step"] == s]}
             for s, shown in ((0, [None] * 4), (1, [None] * 4), (3, [1] * 4), (5, [2] * 4))]
    refreshes = [{"type": "step", "step": s, "operator": "distill", "requests": [{"slot": i} for i in range(2)],
                  "results": []} for s in (2, 4)]
    steps = sorted(steps + refreshes, key=lambda e: e["step"])
    events = [{"type": "start"}, *steps, {"type": "end", "evaluations": 20}]
    atomic_write_text(run / "events.jsonl", "".join(json.dumps(e) + "\n" for e in events))
    config = read_toml(run / "config.toml")
    config["skill"] = {**config.get("skill", {}), **(skill or {})}
    atomic_write_text(run / "config.toml", dump_toml(config))
    return run


def rows(run: Path) -> dict[str, str]:
    table = run_table(read_summary(run / "summary.json"), run)
    return {line[:20].strip(): line[20:].strip() for line in table.splitlines()}


def test_the_run_table_says_what_each_skill_version_was_shown_to_and_that_it_is_no_comparison(comparison):
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0")
    row = rows(run)["skill use"]
    assert row.startswith("no skill 8 (1 valid, 1 beat), v001 4 (2 valid, 1 beat), v002 4 (1 valid, 0 beat): "), row
    assert ("not a comparison: use skill.keep = \"judged\", or compare arms" in row
            and "no skill = the requests before the first refresh, at step 2" in row), row
    table = run_table(read_summary(run / "summary.json"), run)
    names = [line[:20].strip() for line in table.splitlines()]
    assert names.index("skill use") == names.index("skill versions") + 1  # with the row it reads with
    render(run)  # `coevolve report DIR` writes the same table
    assert f"skill use           {row}" in (run / "report.md").read_text()


def test_under_judged_the_trials_are_the_one_source_of_the_versions_counts(comparison):
    trial = {"step": 5, "since": 2, "incumbent": None, "challenger": 1, "kept": None, "distinct": False,
             "children": {"challenger": {"candidates": 4, "valid": 2, "improved": 1},
                          "incumbent": {"candidates": 0, "valid": 0, "improved": 0}},
             "interval": None, "final": True}
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0", {"skill_trials": [trial]})
    shown = rows(run)
    assert "skill use" not in shown and "v001 on trial" in shown["skill trial"]


def test_the_valid_rate_says_per_candidate_where_skill_analysts_spent_evaluations(comparison):
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0")
    assert rows(run)["valid"] == "4 of 16 candidates (25.0%); 20.0% of the 20 evaluations, 4 went to skill analysts"
    assert read_summary(run / "summary.json").valid_rate == 0.2  # summary.json's meaning is unchanged
    plain = comparison / "runs/tsp_construct/sample-b10-s1"
    assert rows(plain)["valid"].startswith("4 (40.0%)")  # no analysts: as before


def test_the_skill_versions_row_says_where_the_rules_came_from(comparison):
    with_origins = [{**VERSIONS[0], "origins": origins(0, 1)}, {**VERSIONS[1], "origins": origins(0, 2)}]
    row = dict(context_rows(context(skill_versions=with_origins), None))["skill versions"]
    assert row == ("2, latest skills/v002/tsp-construct-heuristics/SKILL.md: 5 rules (3 contract, 2 from the "
                   "failures' own kinds; 0 of 2 analyses gave a usable rule); all 2 refreshes: 0 of 4 analyses "
                   "usable"), row
    old = dict(context_rows(context(), None))["skill versions"]  # a summary from before origins: as before
    assert old == "2, latest skills/v002/tsp-construct-heuristics/SKILL.md (5 rules)"


def test_failure_feedback_that_returned_the_failed_program_is_counted():
    row = dict(context_rows(context(failures_repeated={"shown": 7, "repeated": 5}), None))["failure feedback"]
    assert row == "5 of 7 requests shown a failure returned a failed program unchanged"
    assert "failure feedback" not in dict(context_rows(context(), None))


def test_the_cut_off_row_counts_the_skill_analysts_replies_at_their_own_limit(comparison):
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0", {"analysts_cut_off": 4}, {"max_tokens": 128})
    assert rows(run)["cut off"] == ("1 reply ended at sampling.max_tokens = 320 (it scored nothing); 4 skill analyst "
                                    "replies ended at skill.max_tokens = 128; raise them for longer answers")
    only = dict(context_rows(context(analysts_cut_off=1, cut_off={"replies": 0, "valid": 0, "max_tokens": 320}),
                             None, 160))["cut off"]
    assert only == "1 skill analyst reply ended at skill.max_tokens = 160; raise it for longer answers"
    assert dict(context_rows(context(), None))["cut off"].startswith("1 reply ended at sampling.max_tokens = 320")


def test_valid_per_phase_reads_in_the_runs_order_live_and_from_summary_json():
    live = {"prompt steps": {"candidates": 12, "valid": 4}, "ES generations": {"candidates": 8, "valid": 1}}
    stored = dict(sorted(live.items()))  # summary.json is written with sorted keys
    for phases in (live, stored):
        assert dict(context_rows(context(phases=phases), None))["valid per phase"] == (
            "prompt steps 4/12 (33%), ES generations 1/8 (12%)")


def test_the_commonest_failures_show_the_message_most_of_their_count_had():
    def failed(cid: int, message: str) -> Candidate:
        return Candidate(id=cid, step=0, operator="i1", parents=[], model_state={"kind": "base"},
                         failure="exception", message=message)

    one = "IndexError: index 47 is out of bounds for axis 0 with size 47"
    copies = "IndexError: index 220 is out of bounds for axis 0 with size 49"
    assert failure_causes([failed(2, one)] + [failed(i, copies) for i in range(3, 9)]) == [(copies, 7)]


def test_the_skill_sides_count_from_the_first_refresh_with_the_pre_refresh_requests_apart(comparison):
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0")
    use = skill_use(run, read_summary(run / "summary.json"))
    assert (use["before"], use["skill"], use["none"], use["since"]) == (
        {"candidates": 8, "valid": 1, "improved": 1}, {"candidates": 8, "valid": 3, "improved": 1},
        {"candidates": 0, "valid": 0, "improved": 0}, 2)
    render_comparison(comparison)
    report = (comparison / "report.md").read_text()
    section = report.split("## What the skill's requests did")[1].split("## Runs")[0]
    assert getattr(collecting, "SKILL_SIDES", "(no caveat)") in section
    assert "| before the first refresh | skill shown | none shown |" in section
    assert "| tsp_construct | Sample | 10 | 1 | 1 / 1 of 8 | 3 / 1 of 8 | – |" in section, section
    budget = report.split("## What the budget bought")[1].split("\n## ")[0]
    assert "| skill analysts | valid of the candidates |" in budget
    assert "| 4 | 12 of 36 (33.3%) |" in budget, budget  # Sample: 4 of 16, and 4 of 10 in each other seed
    assert "| 0 | 8 of 30 (26.7%) |" in budget, budget  # Sample+ESOpt: no analysts


def test_skill_trials_prints_the_pre_refresh_requests_apart_with_the_comparisons_caveat(comparison):
    skill_run(comparison / "runs/tsp_construct/sample-b10-s0")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "skill_trials.py"), str(comparison)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "before the first refresh    8 candidates,    1 scored,    1 beat their parents" in out, out
    assert "skill shown                 8 candidates,    3 scored,    1 beat their parents" in out, out
    assert getattr(collecting, "SKILL_SIDES", "(no caveat)") in out


def test_a_run_that_showed_one_starting_skill_throughout_says_there_is_nothing_to_compare(comparison):
    start = {"name": "tsp-hints", "rules": 2, "source": "/tmp/hints", "path": "skills/v000/tsp-hints/SKILL.md"}
    run = skill_run(comparison / "runs/tsp_construct/sample-b10-s0", {"skill_versions": [], "skill_start": start})
    lines = [{**c, "skill_version": 0} for c in CANDIDATES]
    atomic_write_text(run / "candidates.jsonl", "".join(json.dumps(c) + "\n" for c in lines))
    row = rows(run)["skill use"]
    assert row.startswith("skills/v000/tsp-hints/SKILL.md 16 (4 valid, 2 beat): "), row
    assert "Every request showed the one skill: nothing to compare it with: use skill.keep" in row, row
