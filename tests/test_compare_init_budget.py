"""Arms that spend other than the budget T (walkthrough s52, findings 2, 6 and 9):

- a named arm with `eoh = { init_in_budget = false }` spends T + its initial population, as the
  comparison-wide setting makes every EoH arm do: `--plan` and the comparison's start warn of it, naming
  the arm and the extra evaluations; the report's budget sentence names the arms that spend more, each Δ
  conclusion involving one says its arms spent unequally, and results.json does not claim the comparison
  structurally matched;
- `--plan` against an existing --out refuses a run folder under other settings as the run does, and says
  how many of the planned runs the folder already holds;
- a single run's table says the evaluations charged outside T, as its plan does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve import compare as compare_module
from coevolve.base.config import as_dict, dump_toml
from coevolve.base.records import read_summary
from coevolve.cli import main
from coevolve.compare import CompareConfig, planned_runs, run_config
from coevolve.engine import pool
from coevolve.report import render_comparison, run_table
from coevolve.runstore import atomic_write_json, atomic_write_text
from test_report import fake_run

# the walkthrough's shape: EoH, and EoH with its 4 initial candidates charged outside T (16 evaluations, not 12)
ARM = ('[compare]\nmethods = ["sample", "eoh", "eoh-free-init"]\ntasks = ["tsp_construct"]\nbudgets = [12]\n'
       'seeds = [0]\n[compare.arms.eoh-free-init]\nmethod = "eoh"\neoh = { init_in_budget = false }\n'
       '[test]\nsizes = [20]\nlimit = 8\n[eoh]\npopulation = 4\n')
# no Sample, and the comparison's [eoh] charges the initial population outside T: every arm spends 16
ALL_EOH = ARM.replace('"sample", ', "").replace("population = 4\n", "population = 4\ninit_in_budget = false\n")
WARNING = ("warning: tsp_construct budget 12: the arms spend different evaluations: eoh-free-init 16 (T 12 + 4 "
           "initial outside T: compare.arms.eoh-free-init.eoh.init_in_budget = false), sample and eoh 12; a "
           "difference between them may come from the evaluations, not the method")


def _config(text: str, tmp_path: Path) -> CompareConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return compare_module.load_compare_config(path)


# ------------------------------------------------------------ said before the comparison runs
def test_the_plan_warns_of_an_arm_that_spends_more_than_the_others(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(ARM)
    assert main(["compare", str(path), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "total: 16 evaluations = T 12 + 4 initial" in out  # the plan's numbers, which the warning repeats
    assert WARNING in out.splitlines(), out


def test_the_comparison_warns_of_it_before_it_runs(tmp_path, monkeypatch):
    from search_fakes import FakeEngine

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the comparison's first write: every warning has been logged by now
        raise Stop

    monkeypatch.setattr(compare_module, "begin", stop)
    logged: list[str] = []
    with pytest.raises(Stop):
        compare_module.run_comparison(_config(ARM, tmp_path), tmp_path / "out", engine=FakeEngine(),
                                      log=logged.append)
    assert WARNING in logged, logged


def test_arms_that_spend_the_same_are_not_warned_of(tmp_path, capsys, monkeypatch):
    """Every arm EoH under the comparison-wide eoh.init_in_budget = false: each spends 16, none more than
    another; the plan says the total, and no warning."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(ALL_EOH)
    assert main(["compare", str(path), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "total: 16 evaluations = T 12 + 4 initial" in out and "warning:" not in out, out


# ------------------------------------------------------------ said in the report
def _comparison(tmp_path: Path, text: str, objectives: dict[str, float]) -> Path:
    """A hand-made finished comparison of `text`'s arms (one seed each), each run spending what its plan
    says (summary.json's evaluations and outside_budget), scored as `objectives` says."""
    config = _config(text, tmp_path)
    root = tmp_path / "cmp"
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    for spec in planned_runs(config):
        directory = spec.directory(root)
        run = run_config(config, spec, directory)
        fake_run(directory, run, objectives[spec.method])
        summary = json.loads((directory / "summary.json").read_text())
        outside = 0 if run.eoh.init_in_budget or run.run.method != "eoh" else 4
        summary.update(evaluations=12 + outside, outside_budget=outside)
        summary["ledger"].update(budget=12 + outside, used=12 + outside)
        atomic_write_json(directory / "summary.json", summary)
    return root


def test_the_report_names_the_arm_that_spent_more_and_does_not_claim_a_match(tmp_path):
    root = _comparison(tmp_path, ARM, {"sample": 4.4, "eoh": 4.4, "eoh-free-init": 4.2})
    render_comparison(root)
    report = (root / "report.md").read_text()
    assert "Every run has the same budget of 12 evaluations" not in report
    assert ("Every run's budget T is 12 evaluations" in report
            and "eoh-free-init spends 4 more evaluations than T: its initial population, charged outside T as the "
                "paper counts T (compare.arms.eoh-free-init.eoh.init_in_budget = false)." in report
            and "the arms do not spend the same evaluations: a difference between them may come from the "
                "evaluations, not the method" in report), report
    conclusions = [line for line in report.splitlines() if line.startswith("- EoH vs eoh-free-init")]
    assert len(conclusions) == 1 and conclusions[0].endswith(
        " (not budget-matched: eoh-free-init spent 16 evaluations a run, EoH 12).")
    sample_eoh = [line for line in report.splitlines() if line.startswith("- Sample vs EoH on")]
    assert len(sample_eoh) == 1 and "not budget-matched" not in sample_eoh[0]  # both spent 12
    results = json.loads((root / "results.json").read_text())
    assert results["structurally_matched"] is False
    assert results["off_budget_arms"] == [{"task": "tsp_construct", "budget": 12, "arm": "eoh-free-init",
                                         "evaluations": 16, "outside_budget": 4,
                                         "setting": "compare.arms.eoh-free-init.eoh.init_in_budget = false",
                                         "unequal": True}]
    assert "not spend the same evaluations" in results["budget_counts"]
    assert any("not budget-matched" in line for line in results["conclusions"])


def test_the_comparison_wide_setting_is_said_and_matched_when_every_arm_spends_alike(tmp_path):
    root = _comparison(tmp_path, ALL_EOH, {"eoh": 4.4, "eoh-free-init": 4.2})
    render_comparison(root)
    report = (root / "report.md").read_text()
    assert ("EoH spends 4 more evaluations than T: its initial population, charged outside T as the paper counts "
            "T (eoh.init_in_budget = false)" in report), report
    assert "do not spend the same" not in report and "not budget-matched" not in report
    results = json.loads((root / "results.json").read_text())
    assert results["structurally_matched"] is True
    assert [entry["unequal"] for entry in results["off_budget_arms"]] == [False, False]


def test_the_progress_plot_reaches_the_evaluations_spent_outside_t(tmp_path, monkeypatch):
    from coevolve.report import plots

    ends: list[float] = []
    real = plots.save_figure

    def recorded(fig, path):  # the comparison's progress plot: its x axis reaches the evaluations spent
        if Path(path).name.startswith("progress-"):
            ends.append(fig.axes[0].get_xlim()[1])
        return real(fig, path)

    monkeypatch.setattr(plots, "save_figure", recorded)
    root = _comparison(tmp_path, ARM, {"sample": 4.4, "eoh": 4.4, "eoh-free-init": 4.2})
    render_comparison(root)
    assert ends == [16]


# ------------------------------------------------------------ --plan against an existing --out
CHANGED = ('[compare]\nmethods = ["sample", "eoh"]\ntasks = ["tsp_construct"]\nbudgets = [12]\nseeds = [0]\n'
           '[test]\nsizes = [20]\nlimit = 8\n[eoh]\npopulation = 4\n[sampling]\nmax_tokens = 256\n')


def _finished(root: Path, config: CompareConfig, methods: tuple[str, ...]) -> None:
    """Finished runs of `methods` in `root`, under `config`'s settings."""
    for spec in planned_runs(config):
        if spec.method in methods:
            directory = spec.directory(root)
            fake_run(directory, run_config(config, spec, directory), 4.4)


def test_the_plan_refuses_a_run_folder_under_other_settings_as_the_run_does(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused comparison started its engine"))
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "cmp"
    _finished(root, _config(CHANGED, tmp_path), ("sample",))
    path = tmp_path / "changed.toml"
    path.write_text(CHANGED.replace("max_tokens = 256", "max_tokens = 200"))
    expected = (f"coevolve compare: error: {root}/runs/tsp_construct/sample-b12-s0 holds a run under other "
                "settings: sampling.max_tokens (256 there, 200 here); use another --out, or delete that run to "
                "redo it")
    capsys.readouterr()
    assert main(["compare", str(path), "--out", str(root), "--plan"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == expected and captured.out == "", captured
    assert main(["compare", str(path), "--out", str(root), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == expected


def test_the_plan_says_how_many_runs_the_folder_holds_already(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "cmp"
    config = _config(CHANGED.replace("budgets = [12]", "budgets = [12, 16]"), tmp_path)
    _finished(root, config, ("sample",))
    path = tmp_path / "c.toml"
    path.write_text(CHANGED.replace("budgets = [12]", "budgets = [12, 16]"))
    assert main(["compare", str(path), "--out", str(root), "--plan"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("4 runs: ")
    assert out[1] == f"{root} holds 2 of them finished (skipped); 2 to run", out[:3]
    assert main(["compare", str(path), "--plan"]) == 0  # no --out: a new folder, nothing said of it
    assert "holds" not in capsys.readouterr().out


# ------------------------------------------------------------ a single run's table
def test_a_runs_table_says_the_evaluations_charged_outside_t(tmp_path):
    root = _comparison(tmp_path, ARM, {"sample": 4.4, "eoh": 4.4, "eoh-free-init": 4.2})
    for arm, says in (("eoh-free-init", "16 / 12 (+ 4 initial outside T)"), ("eoh", "12 / 12")):
        directory = root / "runs" / "tsp_construct" / f"{arm}-b12-s0"
        table = run_table(read_summary(directory / "summary.json"), directory)
        (line,) = [line for line in table.splitlines() if line.startswith("evaluations")]
        assert line.split(None, 1)[1] == says, table


def test_the_progress_bar_of_an_arm_that_spends_outside_t_ends_at_its_whole_spend(tmp_path):
    """EoH with its 4 initial candidates charged outside T 12: the loop reports the ledger's 16, and the
    bar's total is 16 (it was T: 12/12, then a bare `16eval`); an arm within T keeps T."""
    from coevolve.runstore import RunStore
    from coevolve.search.loop import SearchLoop
    from coevolve.search.progress import progress_bar
    from search_fakes import FakeEngine, FakeEvaluator, FakeTask

    config = _config(ARM, tmp_path)
    for method, total in (("eoh-free-init", 16), ("eoh", 12)):
        spec = next(s for s in planned_runs(config) if s.method == method)
        run_cfg = run_config(config, spec, spec.directory(tmp_path / "out"))
        run_cfg.run.task = "fake"  # the fake task the fake evaluator scores
        bar = progress_bar(run_cfg, label=method)
        store = RunStore.create(tmp_path / method, dump_toml(as_dict(run_cfg)))
        try:
            SearchLoop(run_cfg, store, FakeEngine(), FakeEvaluator(), FakeTask(), on_progress=bar.update_from).run()
            assert (bar.tqdm.n, bar.tqdm.total) == (total, total), method
        finally:
            bar.close()
