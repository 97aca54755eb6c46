"""Judged skill trials under ES (the plan's split is the run's), a skill given by its SKILL.md path,
and a comparison's Δ pairs for +trace2skill arms."""

from __future__ import annotations

import pytest

from coevolve.runstore import read_jsonl
from coevolve.search.methods import format_plan, run_plan
from coevolve.search.skill_versions import SkillVersions
from test_search_context import make_config, run


def walkthrough_config(budget: int = 24):
    """The shape of the walkthrough's judged run: EoH with m1/m2 as ES generations of 4 members, a
    refresh every 2 steps; its last trial is one ES generation."""
    return make_config("eoh+esopt+trace2skill", budget,
                       eoh={"population": 4, "offspring": 4, "operators": ["e1", "e2", "m1", "m2", "repair"],
                            "parents": 2},
                       es={"population": 4, "proposals_per_member": 1, "operators": ["m1", "m2"]},
                       skill={"every": 2, "analysts": 2, "successes": 1, "keep": "judged"},
                       context={"fingerprint": False})


def run_sides(directory, summary) -> list[tuple[int, int]]:
    """Per trial the run judged (or left open), the candidates whose prompt showed the version on trial
    and those that showed the other, counted from candidates.jsonl between its refresh and the next."""
    lines = read_jsonl(directory / "candidates.jsonl")
    trials = summary.context["skill_trials"]
    ends = [t["step"] for t in trials[:-1]] + [float("inf")]
    sides = []
    for trial, end in zip(trials, ends):
        mine = [c for c in lines if trial["since"] < c["step"] < end]
        on_trial = sum(c.get("skill_version") == trial["challenger"] for c in mine)
        sides.append((on_trial, len(mine) - on_trial))
    return sides


def test_a_judged_trial_whose_only_step_is_an_es_generation_shows_the_version_on_trial_as_the_plan_says(tmp_path):
    config = walkthrough_config()
    plan = run_plan(config)
    summary, *_ = run(tmp_path / "r", config)
    sides = run_sides(tmp_path / "r", summary)
    assert sides[-1][0] > 0  # the last version was shown (it was shown to none: its generation was odd)
    assert [tuple(s) for s in plan["skill_trial_sides"]] == sides
    assert plan["skill_trials"] == [a + b for a, b in sides]
    text = format_plan(plan)
    assert (f"the last version on trial for {sum(sides[-1])} requests ({sides[-1][0]} of them showing it)"
            in text)
    # one ES generation alone: the version on trial is shown, but the trial compares nothing, and says so
    assert "warning: the last skill version's trial (judged at the end) shows the version on trial to all 4" in text


@pytest.mark.parametrize("budget", [30, 40])
def test_the_plan_splits_every_judged_trial_as_the_run_does(tmp_path, budget):
    config = walkthrough_config(budget)
    summary, *_ = run(tmp_path / "r", config)
    assert [tuple(s) for s in run_plan(config)["skill_trial_sides"]] == run_sides(tmp_path / "r", summary)


def test_es_generations_alternate_from_each_trials_first():
    versions = SkillVersions(judged=True)
    versions.add(1, None, 3, generation=1)  # after the run's ES generation 0
    assert [versions.for_generation(g) for g in (1, 2, 3)] == [1, None, 1]  # the trial's first: the challenger
    versions.settle(1)
    versions.add(2, None, 9, generation=4)
    assert versions.for_generation(4) == 2  # an even generation counted from the run's first would show v1


# -- a skill given by its SKILL.md ---------------------------------------------------------------------------
def test_the_skill_md_a_run_table_prints_goes_to_skill_as_it_is(tmp_path, monkeypatch, capsys):
    from coevolve.agents.runconfig import read_seed_skills
    from coevolve.base.skills import SkillError, load_skill
    from coevolve.cli import main

    summary, *_ = run(tmp_path / "r", make_config("eoh+trace2skill", 20, skill={"every": 2, "analysts": 2}))
    printed = tmp_path / "r" / summary.context["skill_versions"][-1]["path"]  # skills/vNNN/<task>-heuristics/SKILL.md
    assert printed.name == "SKILL.md" and printed.is_file()
    skill = load_skill(printed)
    assert skill.path == printed.parent and skill == load_skill(printed.parent)
    assert read_seed_skills([str(printed)]) == [skill]  # an agent's [skills] paths read it the same way
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('[run]\nmethod = "sample"\nbudget = 4\n')
    assert main(["run", str(tmp_path / "c.toml"), "--plan", "--skill", str(printed)]) == 0
    assert f"every prompt shows the skill {printed} (skill.start)" in capsys.readouterr().out
    # a file that is not a SKILL.md is said to be one, not a folder lacking a SKILL.md
    other = printed.parent / "notes.txt"
    other.write_text("rules\n")
    with pytest.raises(SkillError) as caught:
        load_skill(other)
    assert str(caught.value) == f"{other}: a file, not a skill folder (give the folder holding a SKILL.md, or the SKILL.md)"
    (tmp_path / "c.toml").write_text(f'[run]\nmethod = "sample"\nbudget = 4\n[skill]\nstart = "{printed}"\n')
    assert main(["run", str(tmp_path / "c.toml"), "--plan"]) == 0  # [skill] start too


# -- a comparison's Δ rows for +trace2skill arms ---------------------------------------------------------------
def compare(methods, **sections):
    from coevolve.base.config import build_config
    from coevolve.plan import CompareConfig

    return build_config(CompareConfig, {"compare": {"methods": methods, "tasks": ["tsp_construct"], "budgets": [10],
                                                    "seeds": [0, 1, 2]}, "test": {"sizes": [20]}, **sections})


def test_a_trace2skill_arm_is_set_against_the_method_without_the_skill():
    from coevolve.plan import compared_pairs

    assert compared_pairs(compare(["eoh+esopt", "eoh+esopt+trace2skill"])) == [("eoh+esopt", "eoh+esopt+trace2skill")]
    assert compared_pairs(compare(["eoh", "eoh+trace2skill", "sample"])) == [("eoh", "eoh+trace2skill"),
                                                                            ("sample", "eoh")]
    # four arms: each variant one base (the report keys a Δ row by its variant); +ESOpt's pairs first
    assert compared_pairs(compare(["eoh", "eoh+esopt", "eoh+trace2skill", "eoh+esopt+trace2skill"])) == [
        ("eoh", "eoh+esopt"), ("eoh+trace2skill", "eoh+esopt+trace2skill"), ("eoh", "eoh+trace2skill")]


def test_the_report_has_a_delta_row_with_its_verdict_for_the_skill_arm(tmp_path):
    from coevolve.compare import planned_runs, run_config
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.report import render_comparison
    from coevolve.runstore import atomic_write_text
    from test_report import fake_run

    config = compare(["eoh+esopt", "eoh+esopt+trace2skill"], eoh={"population": 2, "offspring": 2},
                     skill={"every": 1, "analysts": 1})
    objectives = {"eoh+esopt": [4.4, 4.6, 4.8], "eoh+esopt+trace2skill": [4.2, 4.4, None]}
    root = tmp_path / "cmp"
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    for spec in planned_runs(config):
        directory = spec.directory(root)
        fake_run(directory, run_config(config, spec, directory), objectives[spec.method][spec.seed])
    render_comparison(root)
    report = (root / "report.md").read_text()
    # gaps 15% and 7.5% (as test_report's): Δ = 100%, over 3 and 2 seeds too few to tell apart
    assert "| Δ EoH+ESOpt+Trace2Skill vs EoH+ESOpt |  | +100.0% (cannot be told apart) |" in report


def test_compare_plan_with_two_esopt_arms_and_no_base_says_what_is_missing(tmp_path, capsys):
    from coevolve.cli import main

    config = tmp_path / "c.toml"
    config.write_text('[compare]\nmethods = ["sample+esopt", "eoh+esopt"]\ntasks = ["tsp_construct"]\nbudgets = [8]\n'
                      'seeds = [0]\n')
    assert main(["compare", str(config), "--plan"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("structural check: no method here with its +esopt variant (an M and M+esopt pair), "
                                 "nothing to match (each arm's plan is above)")


def test_a_run_started_under_the_old_generation_rule_resumes_under_it(tmp_path, monkeypatch):
    """A judged run whose start event has no `rules` (written before trials counted ES generations from
    their own first) counted them from the run's first: its logged steps replay only under that rule, so
    a resume keeps it (before: "step N does not replay the same requests")."""
    import json

    from coevolve.search import loop
    from test_search_context import cut_run

    def old_rule(self, generation):
        return self.current if self.challenger is None else self.for_request(generation)

    config = walkthrough_config(40)
    with monkeypatch.context() as old:  # the run as the code before wrote it
        old.setattr(SkillVersions, "for_generation", old_rule)
        old.setattr(loop, "RULES", {k: v for k, v in loop.RULES.items() if k != "judged_generations"})
        run(tmp_path / "whole", config)
    events = read_jsonl(tmp_path / "whole" / "events.jsonl")
    assert "judged_generations" not in events[0]["rules"]
    shown = [[r.get("skill") for r in e["requests"]] for e in events if e.get("type") == "step"]
    new_rule = SkillVersions(judged=True)
    assert shown and new_rule.generations_from_trial  # (what a new run gets)
    steps = [i for i, e in enumerate(events) if e.get("type") == "step"]
    cut = cut_run(tmp_path / "whole", tmp_path / "cut", events[:steps[-2]])  # killed before its last two steps
    summary, *_ = run(cut, config, resume=True)
    again = read_jsonl(cut / "events.jsonl")
    assert [[r.get("skill") for r in e["requests"]] for e in again if e.get("type") == "step"] == shown
    assert summary.evaluations == json.loads((tmp_path / "whole" / "summary.json").read_text())["evaluations"]
