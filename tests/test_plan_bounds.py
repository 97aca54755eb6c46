"""Bad configs from the config sweep (benchmarks/results/s55/config_sweep.md B14, W1, W2, W5) whose error
named another key than the one written wrong, or that planned silently: through the real CLI, exit 2,
one error line naming the key as the file wrote it, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.cli import main

RUN = '[run]\nmethod = "{method}"\ntask = "tsp_construct"\nbudget = {budget}\n'
AGENT_COMPARE = ('[compare]\nkind = "agent"\nmethods = {methods}\ntasks = ["{task}"]\nbudgets = [64]\nseeds = [0]\n'
                 '[agent]\npopulation = 4\nbatch = 4\n')


def refused(tmp_path: Path, capsys, text: str, *command: str) -> str:
    """`coevolve COMMAND c.toml ...` on `text`: exit 2 and nothing written; its error line (the last line of
    stderr: a comparison given to `run` first says which arm it plans) is returned."""
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    before = sorted(tmp_path.rglob("*"))
    assert main([command[0], str(config), *command[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before
    return err.splitlines()[-1]


def planned(tmp_path: Path, capsys, text: str) -> str:
    config = tmp_path / "c.toml"
    config.write_text(text, encoding="utf-8")
    assert main(["run", str(config), "--plan"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


# -- B14: a size no step of the budget can pay is refused by its own key ----------------------------------
@pytest.mark.parametrize("method, section, key", [
    ("eoh+trace2skill", "eoh", "population"),  # eoh.init = 0: the initial step asks eoh.population
    ("eoh", "eoh", "population"),
    ("eoh", "eoh", "offspring"),
    ("eoh+trace2skill", "eoh", "offspring"),
    ("eoh", "eoh", "init"),
    ("eoh", "eoh", "m_multiplier"),
    ("eoh+esopt", "es", "population"),
    ("sample+esopt", "es", "population"),
    ("sample", "sample", "batch"),
    ("sample+trace2skill", "sample", "batch"),
    ("islands", "eoh", "offspring"),  # an archive over EoH runs EoH's plan
])
def test_a_size_larger_than_the_budget_is_refused_by_its_key(tmp_path, capsys, method, section, key):
    err = refused(tmp_path, capsys, RUN.format(method=method, budget=400) + f"[{section}]\n{key} = 100000\n",
                  "run", "--plan")
    assert err.startswith(f"coevolve run: error: config error: {section}.{key} must be <= "), err
    assert "more than the run's whole budget (run.budget = 400)" in err and "skill.every" not in err, err


def test_the_bound_names_the_largest_value_that_fits(tmp_path, capsys):
    err = refused(tmp_path, capsys, RUN.format(method="eoh", budget=400) + "[eoh]\noffspring = 1000000\n",
                  "run", "--plan")
    assert err == ("coevolve run: error: config error: eoh.offspring must be <= 400: one e1 step would ask for "
                   "1000000 candidates, more than the run's whole budget (run.budget = 400) (got 1000000)")
    # m1/m2 ask offspring x m_multiplier: 10 x 41 = 410 > 400
    err = refused(tmp_path, capsys, RUN.format(method="eoh", budget=400) + "[eoh]\nm_multiplier = 41\n",
                  "run", "--plan")
    assert err.startswith("coevolve run: error: config error: eoh.m_multiplier must be <= 40: one m1 step "
                          "(eoh.offspring x eoh.m_multiplier) would ask for 410 candidates"), err
    # with m_multiplier = 0 (scaled to the budget) an absurd offspring is named, not the k it leaves no room for
    err = refused(tmp_path, capsys, RUN.format(method="eoh", budget=400)
                  + "[eoh]\nm_multiplier = 0\ngenerations = 5\noffspring = 100000\n", "run", "--plan")
    assert err.startswith("coevolve run: error: config error: eoh.offspring must be <= 400: one e1 step"), err
    err = refused(tmp_path, capsys, RUN.format(method="sample+esopt", budget=400)
                  + "[es]\npopulation = 201\nproposals_per_member = 2\n", "run", "--plan")
    assert err.startswith("coevolve run: error: config error: es.population must be <= 200: one perturbed batch "
                          "(es.population x es.proposals_per_member) would ask for 402 candidates"), err


def test_sizes_the_budget_pays_and_the_defaults_under_a_small_budget_still_plan(tmp_path, capsys):
    assert "e1 400" in planned(tmp_path, capsys, RUN.format(method="eoh", budget=800) + "[eoh]\noffspring = 400\n")
    # a smoke run's budget cuts the defaults' steps short, as it always has
    assert "i1 4" in planned(tmp_path, capsys, RUN.format(method="eoh", budget=4))
    assert "i1 4" in planned(tmp_path, capsys, RUN.format(method="sample", budget=4))
    # an initial population charged outside run.budget is not bounded by it ...
    out = planned(tmp_path, capsys, RUN.format(method="eoh", budget=400)
                  + "[eoh]\ninit_in_budget = false\ninit = 1000\n")
    assert "T 400 + 1000 initial" in out, out
    # ... but by run.budget's own cap
    err = refused(tmp_path, capsys, RUN.format(method="eoh", budget=400)
                  + "[eoh]\ninit_in_budget = false\ninit = 10000000\n", "run", "--plan")
    assert err.startswith("coevolve run: error: config error: eoh.init must be in 0..1000000"), err


def test_a_comparison_names_the_arm_whose_size_the_budget_cannot_pay(tmp_path, capsys):
    text = ('[compare]\nmethods = ["eoh", "eoh+esopt"]\ntasks = ["tsp_construct"]\nbudgets = [400]\nseeds = [0]\n'
            '[es]\npopulation = 1000000\n')
    err = refused(tmp_path, capsys, text, "compare", "--plan")
    assert err.startswith("coevolve compare: error: config error: es.population must be <= 400") and \
        err.endswith("(arm eoh+esopt)"), err


# -- W2: [compare] itself written wrong is named before the [eval] rule -------------------------------------
@pytest.mark.parametrize("compare, expected", [
    ("[comparee]\nkind = \"agent\"\n", "comparee is not a known section (a comparison's settings are [compare]); "
                                       "did you mean 'compare'?"),
    ('compare = "agent"\n', "compare must be a table ([compare] with kind, methods, tasks, budgets, seeds) "
                            "(got 'agent'); did you mean [compare] kind = \"agent\"?"),
    ('[compare]\nkindd = "agent"\n', "compare.kindd is not a known field (known: allow_unmatched, arms, baseline, "
                                     "budgets, kind, methods, out, seeds, tasks); did you mean 'kind'?"),
])
def test_a_misspelt_or_scalar_compare_is_named_itself(tmp_path, capsys, compare, expected):
    err = refused(tmp_path, capsys, compare + '[eval]\nk = 1\n', "compare", "--plan")
    assert err == f"coevolve compare: error: config error: {expected}"


def test_a_comparison_with_no_kind_is_still_told_its_eval_is_an_agent_comparisons(tmp_path, capsys):
    err = refused(tmp_path, capsys, '[compare]\nmethods = ["base", "esopt"]\n[eval]\nk = 1\n', "compare", "--plan")
    assert "eval is not a section of a heuristic comparison" in err and '[compare] kind = "agent"' in err


# -- W1: `coevolve run --plan COMPARISON` names the keys as the comparison wrote them -------------------------
@pytest.mark.parametrize("text, expected", [
    ('[compare]\nmethods = ["sample"]\ntasks = ["tsp_constuct"]\nbudgets = [8]\nseeds = [0]\n',
     "compare.tasks: unknown task 'tsp_constuct'"),
    (AGENT_COMPARE.format(methods='["base", "esopt"]', task="sudoku") + '[task.sudoku]\nmasked = "1"\n',
     "task.sudoku.masked must be an integer"),
    (AGENT_COMPARE.format(methods='["base", "mine"]', task="sudoku")
     + '[compare.arms.mine]\nmethod = "esopt"\nskills = { paths = ["nosuchskill"] }\n',
     "compare.arms.mine.skills.paths[0] is not a valid skill"),
    ('[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [8]\nseeds = [0]\n[sample]\nbatch = 100\n',
     "sample.batch must be <= 20"),
])
def test_run_on_a_comparison_names_the_comparisons_keys(tmp_path, capsys, text, expected):
    run = refused(tmp_path, capsys, text, "run", "--plan")
    assert run.startswith(f"coevolve run: error: config error: {expected}"), run
    # the key `coevolve compare` names (it names a task by its index in compare.tasks)
    compare = refused(tmp_path, capsys, text, "compare", "--plan")
    key = expected.split(" ")[0].replace("compare.tasks:", "compare.tasks[0]:")
    assert compare.startswith(f"coevolve compare: error: config error: {key}"), compare


def test_run_on_a_comparison_names_a_flags_key_as_the_runs(tmp_path, capsys):
    text = '[compare]\nmethods = ["sample"]\ntasks = ["tsp_construct"]\nbudgets = [8]\nseeds = [0]\n'
    err = refused(tmp_path, capsys, text, "run", "--plan", "--budget", "0")
    assert err.startswith("coevolve run: error: config error: run.budget must be in 1..1000000"), err


# -- W5: an agent task's file option of another type ----------------------------------------------------------
def test_a_file_option_that_is_no_string_is_named_with_its_key(tmp_path, capsys):
    text = ('[run]\ntask = "react_math"\nmethod = "esopt"\nbudget = 64\n[task]\nproblems_file = 5\n'
            '[agent]\npopulation = 4\nbatch = 4\n')
    err = refused(tmp_path, capsys, text, "run", "--plan")
    assert err == ("coevolve run: error: config error: task.problems_file must be a file's path, a string "
                   "(counted from the config's folder) (got 5)")
