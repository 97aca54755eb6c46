"""A starting skill (`--skill DIR`, `[skill] start`) distilled for another task is named in one warning line
before the run: a skill `coevolve distill` wrote from a kp_construct run, given to a tsp_construct run, was
taken silently. Its description is what records the task (search/skill.py DISTILLED); a hand-written skill
records none and passes. Fake teachers: no engine."""

from __future__ import annotations

import json

from coevolve.base.skills import load_skill
from coevolve.cli import main
from coevolve.commands import distill as command
from coevolve.engine.base import Completion
from coevolve.search.population import Candidate
from coevolve.search.skill import refresh, write_version

WARNING = "warning: skill.start"


class Teacher:
    def chat(self, conversations, sampling, seeds=None, constraints=None):
        return [Completion(text="ADD Ideas: Prefer the item with the best value per unit of weight.")
                for _ in conversations]


def distilled(tmp_path, monkeypatch, task: str, name: str, *extra: str):
    """The skill `coevolve distill` writes from a `task` run of two failed candidates."""
    run = tmp_path / f"run-{name}"
    run.mkdir()
    (run / "config.toml").write_text(f'[run]\ntask = "{task}"\nmethod = "eoh"\nbudget = 8\n')
    failed = [Candidate(id=i, step=1, operator="i1", parents=[], model_state={"kind": "base"}, code="def f():\n"
                        "    return x", failure="exception", message=f"line {i}: NameError") for i in (1, 2)]
    (run / "candidates.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n" for c in failed))
    monkeypatch.setattr(command, "teacher", lambda args: (Teacher(), None))
    assert main(["distill", str(run), "--out", str(tmp_path / name), "--no-progress", *extra]) == 0
    return tmp_path / name


def tsp_config(tmp_path, skill=None) -> str:
    path = tmp_path / "tsp.toml"
    start = f'[skill]\nstart = "{skill}"\n' if skill else ""
    path.write_text(f'[run]\ntask = "tsp_construct"\nmethod = "sample"\nbudget = 4\n{start}')
    return str(path)


def test_a_skill_distilled_for_another_task_is_one_warning_naming_both_and_the_folder(tmp_path, monkeypatch,
                                                                                      capsys):
    kp = distilled(tmp_path, monkeypatch, "kp_construct", "kp-learnt")
    capsys.readouterr()
    assert main(["run", tsp_config(tmp_path), "--skill", str(kp), "--plan"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(WARNING)]
    assert lines == [f"{WARNING} {kp.resolve()} was distilled for kp_construct, and this run's task is "
                     "tsp_construct: its rules, its Contract's function included, are kp_construct's"], err
    # [skill] start goes the same way, and the run itself (not only --plan) says it once, before anything
    # is written: here the missing checkpoint stops it after the checks
    config = tsp_config(tmp_path, kp)
    with open(config, "a") as f:
        f.write('[model]\npath = "/nonexistent/model"\n')
    assert main(["run", config, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and "distilled for kp_construct" in err, err
    assert not (tmp_path / "r").exists()


def test_the_same_task_and_a_hand_written_skill_pass_silently(tmp_path, monkeypatch, capsys):
    from coevolve.search.skill import distilled_for

    tsp = distilled(tmp_path, monkeypatch, "tsp_construct", "tsp-learnt")
    mine = distilled(tmp_path, monkeypatch, "kp_construct", "kp-mine", "--description", "My own rules.")
    hand = tmp_path / "hints"
    hand.mkdir()
    (hand / "SKILL.md").write_text("---\nname: hints\ndescription: Short programs.\n---\n## Ideas\n- Go near.\n")
    capsys.readouterr()
    for skill in (tsp, mine, hand):
        assert main(["run", tsp_config(tmp_path), "--skill", str(skill), "--plan"]) == 0
        assert WARNING not in capsys.readouterr().err, skill
    assert distilled_for(load_skill(mine)) is None  # --description: the user's words record no task


def test_a_runs_own_version_names_its_task_as_distill_does(tmp_path):
    """A +trace2skill run's versions (RUN_DIR/skills/vNNN/kp-construct-heuristics, what --skill is told to
    carry on) name the task by its name, kp_construct, as `coevolve distill` does; a version written
    before, naming it as its folder does (kp-construct), is still kp_construct's."""
    from coevolve.search.skill import distilled_for, other_task

    description, body = refresh(None, ["ADD Ideas: Prefer light items with a high value."], [], ["Define f."],
                                "kp_construct", "1 error and 0 success analyses")
    version = write_version(tmp_path, 1, "kp-construct-heuristics", description, body)
    assert distilled_for(version) == "kp_construct" and body.startswith("# kp-construct-heuristics (Trace2Skill)")
    assert other_task(version, "kp_construct") is None
    assert other_task(version, "tsp_construct") == "kp_construct"
    older = write_version(tmp_path, 2, "kp-construct-heuristics", description.replace("kp_", "kp-"), body)
    assert distilled_for(older) == "kp-construct" and other_task(older, "kp_construct") is None


def test_a_comparison_warns_of_it_per_task_and_arm_as_its_plan_does(tmp_path, monkeypatch, capsys):
    """`coevolve compare --plan` says it for each task the skill was not distilled for (kp_construct's skill
    on tsp_construct and kp_construct: tsp_construct's line only), and a named arm's own skill.start too;
    the comparison logs the same lines (plan.skill_warnings)."""
    from coevolve.plan import arm_runs, load_compare_config, skill_warnings

    kp = distilled(tmp_path, monkeypatch, "kp_construct", "kp-learnt")
    tsp = distilled(tmp_path, monkeypatch, "tsp_construct", "tsp-learnt")
    path = tmp_path / "compare.toml"
    path.write_text('[compare]\nmethods = ["sample", "mine"]\ntasks = ["tsp_construct", "kp_construct"]\n'
                    'budgets = [8]\nseeds = [0]\n[test]\nlimit = 4\n[sample]\nbatch = 4\n'
                    f'[skill]\nstart = "{kp}"\n[compare.arms.mine]\nmethod = "sample"\nskill = {{ start = "{tsp}" }}\n')
    capsys.readouterr()
    assert main(["compare", str(path), "--plan"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ")]
    assert lines == [f"warning: tsp_construct sample: skill.start {kp} was distilled for kp_construct, and this run's "
                     "task is tsp_construct: its rules, its Contract's function included, are kp_construct's",
                     f"warning: kp_construct mine: skill.start {tsp} was distilled for tsp_construct, and this run's "
                     "task is kp_construct: its rules, its Contract's function included, are tsp_construct's"]
    assert [f"warning: {w}" for w in skill_warnings(arm_runs(load_compare_config(path)))] == lines
