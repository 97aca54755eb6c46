"""Bad comparison configs through the real CLI (`coevolve compare CFG --plan`, which runs no engine):
each is refused with one line naming the TOML key as the user wrote it (dotted), the value and what
was expected, exit code 2, and nothing written. Heuristic comparisons (compare_quick-like) and agent
comparisons (agents_compare-like), from the audit's items B1, B3, B4, B8, B9, C9 and C11."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from coevolve.base.config import dump_toml
from coevolve.cli import main

ROOT = Path(__file__).resolve().parents[1]
SKILL = str(ROOT / "skills" / "sudoku-basics")

HEURISTIC = {"compare": {"methods": ["sample"], "tasks": ["tsp_construct"], "budgets": [8], "seeds": [0]},
             "test": {"sizes": [50], "limit": 8}, "sample": {"batch": 4}}
AGENT = {"compare": {"kind": "agent", "methods": ["base", "esopt"], "tasks": ["sudoku"], "budgets": [16],
                     "seeds": [0]},
         "eval": {"problems": 4, "k": 1, "max_tokens": 8}, "task": {"sudoku": {"masked": 1}},
         "agent": {"population": 4, "batch": 4, "eval_cases": 2}, "sampling": {"max_tokens": 8}}


def _toml(raw: dict) -> str:
    """dump_toml, with [task.NAME] and [compare.arms.NAME] as the user writes them (inline tables)."""
    return dump_toml(raw)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def refused(tmp_path: Path, capsys, monkeypatch, raw: dict, *extra: str) -> str:
    """`coevolve compare CFG --plan` on `raw`: exit 2, one stderr line without a traceback, nothing on
    stdout, nothing written; the line."""
    folder = tmp_path / "cfg"
    folder.mkdir(exist_ok=True)
    path = folder / "c.toml"
    path.write_text(_toml(raw))
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    capsys.readouterr()
    code = main(["compare", str(path), "--plan", *extra])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (code, captured.out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("coevolve compare: error: config error: "), err
    assert captured.out == ""
    assert _files(tmp_path) == before  # nothing written
    return err.removeprefix("coevolve compare: error: ")


def changed(base: dict, **sections: dict) -> dict:
    raw = copy.deepcopy(base)
    for section, values in sections.items():
        if values is None:
            raw.pop(section, None)
        else:
            raw.setdefault(section, {}).update(values)
    return raw


# ------------------------------------------------------------------ B1: compare.kind
@pytest.mark.parametrize("kind, hint", [("agnet", "; did you mean 'agent'?"), ("AGENT", "; did you mean 'agent'?"),
                                        (1, "")])
def test_a_misspelt_kind_is_named_as_compare_kind(tmp_path, capsys, monkeypatch, kind, hint):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, compare={"kind": kind}))
    assert err == f"config error: compare.kind must be one of heuristic, agent (got {kind!r}){hint}"


# ------------------------------------------------------------------ B3: agent runs' keys as written
def test_a_budget_too_small_for_an_agent_round_names_compare_budgets(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, compare={"budgets": [8]}))
    assert err.startswith("config error: compare.budgets must pay at least one round of agent.population x "
                          "agent.batch = 16 episodes (got 8)"), err
    assert "run.budget" not in err


@pytest.mark.parametrize("options, key", [({"maskd": 1}, "task.sudoku.maskd is not an option of sudoku"),
                                          ({"masked": "one"}, "task.sudoku.masked must be an integer"),
                                          ({"masked": 1.5}, "task.sudoku.masked must be an integer")])
def test_an_agent_task_option_is_named_under_its_task_table(tmp_path, capsys, monkeypatch, options, key):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, task={"sudoku": options}))
    assert err.startswith(f"config error: {key}"), err
    assert repr(next(iter(options.values()))) in err or "maskd" in err


# ------------------------------------------------------------------ B4: an arm's files under the arm
def test_a_heuristic_arms_skill_start_is_named_under_the_arm(tmp_path, capsys, monkeypatch):
    raw = changed(HEURISTIC, compare={"methods": ["sample", "x"],
                                      "arms": {"x": {"method": "sample", "skill": {"start": "noskill"}}}})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: compare.arms.x.skill.start is not a valid skill: "), err
    assert "noskill" in err


def test_an_agent_arms_skills_paths_are_named_under_the_arm(tmp_path, capsys, monkeypatch):
    raw = changed(AGENT, compare={"methods": ["base", "x"],
                                  "arms": {"x": {"method": "trace2skill", "skills": {"paths": [SKILL, "nope"]}}}},
                  skills={"paths": [SKILL]})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: compare.arms.x.skills.paths[1] is not a valid skill: "), err
    assert "nope" in err


def test_the_comparisons_skills_paths_read_by_an_arm_are_the_comparisons(tmp_path, capsys, monkeypatch):
    """An arm that sets no [skills] plays the comparison's: a bad folder there is skills.paths, not the arm's."""
    raw = changed(AGENT, compare={"methods": ["x", "base"], "arms": {"x": {"method": "esopt"}}},
                  skills={"paths": ["noskill"]})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: skills.paths[0] is not a valid skill: "), err


# ------------------------------------------------------------------ B8/B9: tasks, sections, names
def test_a_missing_task_file_is_named_by_its_place(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(HEURISTIC, compare={"tasks": ["tsp_construct", "nope.py"]}))
    assert err.startswith("config error: compare.tasks[1]: task file not found: nope.py"), err


def test_an_unknown_heuristic_task_is_named_by_its_place(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(HEURISTIC, compare={"tasks": ["tsp_constrct"]}))
    assert err.startswith("config error: compare.tasks[0]: unknown task 'tsp_constrct'"), err
    assert err.endswith("did you mean 'tsp_construct'?"), err


def test_an_agent_comparisons_unknown_task_is_not_called_a_heuristic_one(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, compare={"tasks": ["sudok"]}))
    assert err.startswith("config error: compare.tasks[0] is not a known task (agent tasks: "), err
    assert "react_math, sudoku, sudoku9" in err and "(got 'sudok')" in err, err
    assert err.endswith("; did you mean 'sudoku'?"), err
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, compare={"tasks": ["tsp_construct"]}))
    assert err.startswith("config error: compare.tasks[0] is a heuristic task, not an agent task"), err


def test_the_other_kinds_section_names_this_kinds(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, test={"sizes": [50]}))
    assert err.startswith("config error: test is not a section of an agent comparison") and "[eval]" in err, err
    assert "did you mean 'es'" not in err
    err = refused(tmp_path, capsys, monkeypatch, changed(HEURISTIC, eval={"k": 2}))
    assert err.startswith("config error: eval is not a section of a heuristic comparison") and "[test]" in err, err


def test_a_misspelt_test_split_gets_the_near_one(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(HEURISTIC, test={"split": "tset"}))
    assert err == ("config error: test.split is not a split of task tsp_construct (splits: train, val, test) "
                   "(got 'tset'); did you mean 'test'?")


def test_a_misspelt_arm_section_gets_the_near_one(tmp_path, capsys, monkeypatch):
    raw = changed(HEURISTIC, compare={"methods": ["sample", "x"],
                                      "arms": {"x": {"method": "sample", "contxt": {"feedback": False}}}})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: compare.arms.x.contxt is not a section an arm may set"), err
    assert err.endswith("; did you mean 'context'?"), err


# ------------------------------------------------------------------ C9: nothing dropped silently
def test_a_test_size_the_task_lacks_is_refused_not_dropped(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(HEURISTIC, test={"sizes": [50, 7]}))
    assert err == ("config error: test.sizes[1] is not a test size of tsp_construct (its test sizes: 20, 50, 100, "
                   "200, 500, 1000) (got 7)")


def test_a_test_size_no_compared_task_has_is_refused(tmp_path, capsys, monkeypatch):
    raw = changed(HEURISTIC, compare={"tasks": ["tsp_construct", "kp_construct"]}, test={"sizes": [50, 7]})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: test.sizes[1] is not a test size of any compared task "
                          "(test sizes of tsp_construct: 20, 50,"), err
    assert "kp_construct: 50, 100, 200" in err and err.endswith("(got 7)"), err


@pytest.mark.parametrize("base, method", [(HEURISTIC, "sample"), (AGENT, "esopt")])
def test_a_named_arm_compare_methods_does_not_list_is_refused(tmp_path, capsys, monkeypatch, base, method):
    raw = changed(base, compare={"arms": {"x": {"method": method}}})
    err = refused(tmp_path, capsys, monkeypatch, raw)
    assert err.startswith("config error: compare.arms.x is not listed in compare.methods ("), err
    assert err.endswith("list it in compare.methods or remove it"), err


# ------------------------------------------------------------------ C11: --plan refuses what the run refuses
def test_an_agent_plan_reads_the_seed_skills_as_the_comparison_does(tmp_path, capsys, monkeypatch):
    err = refused(tmp_path, capsys, monkeypatch, changed(AGENT, skills={"paths": ["noskill"]}))
    assert err.startswith("config error: skills.paths[0] is not a valid skill: "), err
    assert str(tmp_path / "cfg" / "noskill") in err  # counted from the TOML's folder


def test_valid_comparisons_still_plan(tmp_path, capsys, monkeypatch):
    """The checks above refuse only what they should: the same configs, valid, plan with exit 0."""
    monkeypatch.chdir(tmp_path)
    for name, raw in (("h", changed(HEURISTIC, compare={"tasks": ["tsp_construct", "kp_construct"]},
                                     test={"sizes": [20, 50]})),
                      ("a", changed(AGENT, skills={"paths": [SKILL]}))):
        path = tmp_path / f"{name}.toml"
        path.write_text(_toml(raw))
        before = _files(tmp_path)
        assert main(["compare", str(path), "--plan"]) == 0, capsys.readouterr().err
        assert _files(tmp_path) == before


# ------------------------------------------------------------------ `coevolve run` of a comparison's arm
def test_run_of_a_comparisons_arm_finds_its_file_task_from_anywhere_and_only_runs_its_arms(tmp_path, capsys,
                                                                                             monkeypatch):
    """`coevolve run cmp/compare.toml --method eoh` counts the comparison's relative task file from the TOML's
    folder, as the comparison does; a method the comparison does not list is refused, not run as its arm."""
    problem = tmp_path / "prob" / "problem.py"
    problem.parent.mkdir()
    problem.write_text((Path(__file__).resolve().parents[1] / "examples/problems/flow_shop/problem.py").read_text())
    (tmp_path / "cmp").mkdir()
    config = tmp_path / "cmp" / "compare.toml"
    config.write_text('[compare]\nmethods = ["sample", "eoh"]\ntasks = ["../prob/problem.py"]\nbudgets = [8]\n'
                      'seeds = [0]\n')
    monkeypatch.chdir(tmp_path / "prob")
    assert main(["run", str(config), "--method", "eoh", "--plan"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"plan: eoh on {problem.resolve()}:FlowShop, budget T = 8"), out
    assert main(["run", str(config), "--method", "islands", "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("coevolve run: error: --method islands is not one of the comparison's methods (sample, eoh): "
                   "a comparison config runs its own arms"), err


def test_two_tasks_whose_runs_would_share_a_folder_are_refused_before_any_run(tmp_path, capsys, monkeypatch):
    """Two versions of one problem (their classes keep one `name`) would write runs/<name>/ both: refused by
    --plan and the comparison alike, before anything is written."""
    source = (Path(__file__).resolve().parents[1] / "examples/problems/flow_shop/problem.py").read_text()
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "problem.py").write_text(source)
    config = tmp_path / "compare.toml"
    config.write_text('[compare]\nmethods = ["sample"]\ntasks = ["v1/problem.py", "v2/problem.py"]\nbudgets = [8]\n'
                      'seeds = [0]\n')
    for flags in (["--plan"], ["--out", str(tmp_path / "cmp")]):
        assert main(["compare", str(config), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("coevolve compare: error: config error: compare.tasks[1] is named 'flow_shop', as "
                              "compare.tasks[0] is: their runs would share runs/flow_shop/; give one task class "
                              "another `name` (got "), err
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("base", [HEURISTIC, AGENT])
def test_a_plan_refuses_a_model_path_that_names_no_checkpoint(tmp_path, capsys, monkeypatch, base):
    """As `coevolve run --plan` does, and as the comparison itself does when it starts its engine."""
    err = refused(tmp_path, capsys, monkeypatch, changed(base, model={"path": str(tmp_path / "no-checkpoint")}))
    assert err == f"config error: model.path: model directory {str(tmp_path / 'no-checkpoint')!r} does not exist", err
