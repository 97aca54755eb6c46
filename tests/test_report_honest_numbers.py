"""Numbers a report must not make look better (or worse) than the runs were, from a newcomer walkthrough
on real runs: a Δ whose sign flips when an arm beats the reference, a best that is worse than the template
told as a bare "no", a mean best-so-far curve that jumps when a late seed enters it, a run's progress plot
without the template to beat, "1 seeds", and an arm's mean over fewer seeds than it planned.

Hand-made comparison and run directories (tests/test_report.py's fake_run): no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.base.records import read_summary
from coevolve.compare import CompareConfig, planned_runs, run_config
from coevolve.report import render, render_comparison, run_table
from coevolve.report.rendering import context_rows
from coevolve.runstore import atomic_write_json, atomic_write_text
from coevolve.stats import gap_closed, paper_delta
from test_report import baseline, fake_run


def make_comparison(root: Path, methods: list[str], objectives: dict[tuple[str, int], float | None],
                    seeds: list[int], compare: dict | None = None) -> Path:
    """A finished comparison of tsp_construct (lower is better, test20 reference 4.0) whose runs' test
    objectives are `objectives` by (method, seed); None: the run found no valid program. `compare`: more
    [compare] keys."""
    config = build_config(CompareConfig, {
        "compare": {"methods": methods, "tasks": ["tsp_construct"], "budgets": [10], "seeds": seeds,
                    **(compare or {})},
        "test": {"sizes": [20]}})
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    for spec in planned_runs(config):
        directory = spec.directory(root)
        fake_run(directory, run_config(config, spec, directory), objectives[(spec.method, spec.seed)])
    return root


def results(root: Path) -> dict:
    render_comparison(root)
    return json.loads((root / "results.json").read_text())


def figure_of(monkeypatch, draw):
    """The matplotlib figure `draw()` saves through the report's plots (or the run plot it used before),
    kept open to be read."""
    import coevolve.report.plots as plots
    import coevolve.search.plot as search_plot

    figures = []

    def keep(fig, path):
        figures.append(fig)
        return Path(path)

    monkeypatch.setattr(plots, "save_figure", keep)
    monkeypatch.setattr(search_plot, "save_figure", keep)
    draw()
    return figures


# ---------------------------------------------------------------- 1. Δ when an arm beats the reference
def test_paper_delta_and_gap_closed_are_undefined_where_their_sign_would_lie():
    assert paper_delta(0.02, -0.01) is None  # was -3.0: "far worse" for the method beyond the reference
    assert paper_delta(-0.05, -0.01) is None and paper_delta(0.0, 0.02) is None
    assert paper_delta(0.02, 0.01) == pytest.approx(1.0)  # both short of the reference: as before
    assert gap_closed(-0.05, -0.01) is None  # dividing by a negative base gap flips the sign
    assert gap_closed(0.02, -0.01) == pytest.approx(1.5)  # the variant went past the reference: above 100%


def test_a_delta_row_whose_arms_beat_the_reference_says_n_a_with_the_mean_objectives(tmp_path):
    # reference 4.0, lower is better: Sample 3.6, 3.7 (gap -8.75%), EoH 3.8, 3.9 (gap -3.75%): both beat the
    # reference and EoH is worse; the ratio of gaps, -0.0875 / -0.0375 - 1 = +133.3%, read "EoH far better"
    root = make_comparison(tmp_path / "cmp", ["sample", "eoh"], {
        ("sample", 0): 3.6, ("sample", 1): 3.7, ("eoh", 0): 3.8, ("eoh", 1): 3.9}, [0, 1])
    found = results(root)
    (delta,) = [r for r in found["rows"] if r["kind"] == "delta"]
    assert delta["delta"] is None and delta["gap_closed"] is None
    note = "n/a: Sample and EoH reach or beat the reference; by mean objective EoH is worse (3.8500 vs 3.6500)"
    assert delta["delta_note"] == note
    report = (root / "report.md").read_text()
    assert f"| Δ EoH vs Sample |  | {note} (cannot be told apart) |" in report
    assert "+133.3%" not in report
    (said,) = [c for c in found["conclusions"] if c.startswith("Sample vs EoH")]
    assert said.endswith(f"Δ is {note}: with a gap ≤ 0 a ratio of gaps has no sign to read, so the mean "
                         "objectives are the measure.")
    table = (root / "table.csv").read_text()
    assert "delta_note" in table.splitlines()[0] and note in table


def test_a_delta_row_whose_arms_are_short_of_the_reference_keeps_its_delta(tmp_path):
    root = make_comparison(tmp_path / "cmp", ["sample", "eoh"], {
        ("sample", 0): 4.4, ("sample", 1): 4.4, ("eoh", 0): 4.2, ("eoh", 1): 4.2}, [0, 1])
    (delta,) = [r for r in results(root)["rows"] if r["kind"] == "delta"]
    assert delta["delta"] == pytest.approx(1.0) and delta["delta_note"] is None  # gaps 10% and 5%


# ---------------------------------------------------------------- 2. a best worse than the template
def with_context(run: Path, **context) -> None:
    """A run's summary.json with the context the loop writes (what the run table reads of it)."""
    summary = json.loads((run / "summary.json").read_text())
    summary["context"] = {"phases": {}, "constrain": "off", "fingerprint": False, "parser_repairs": {},
                          "repair_requests": 0, "skill_versions": [], **context}
    atomic_write_json(run / "summary.json", summary)


def test_the_run_table_says_a_best_worse_than_the_template_is_worse(tmp_path):
    root = make_comparison(tmp_path / "cmp", ["sample"], {("sample", 0): 4.4, ("sample", 1): None}, [0, 1])
    run = root / "runs/tsp_construct/sample-b10-s0"  # its best's training objective: 5.4 (lower is better)

    def row() -> str:
        return dict(line.split("  ", 1) for line in run_table(read_summary(run / "summary.json"), run)
                    .splitlines())["beat the template"].strip()

    with_context(run, template_objective=5.0, beat_template=False)
    assert row() == "no: WORSE than the template (5.4 vs 5): the template is the better program"
    with_context(run, template_objective=5.4, beat_template=False)
    assert row() == "no (template 5.4)"  # the best scores as the template: not worse
    with_context(run, template_objective=6.0, beat_template=True)
    assert row() == "yes (template 6)"
    empty = root / "runs/tsp_construct/sample-b10-s1"  # no valid program: no best to call worse
    with_context(empty, template_objective=5.0, beat_template=False)
    assert "no (template 5)" in run_table(read_summary(empty / "summary.json"), empty)


def test_the_comparisons_runs_table_names_a_best_worse_than_the_template(tmp_path):
    root = make_comparison(tmp_path / "cmp", ["sample"], {("sample", 0): 4.4, ("sample", 1): 4.0}, [0, 1])
    baseline(root, 4.2)  # seed 0's 4.4 is worse than the template's test objective, seed 1's 4.0 better
    render_comparison(root)
    runs = [line for line in (root / "report.md").read_text().splitlines() if line.startswith("| tsp_construct |")]
    assert "| a program worse than the task template |" in runs[0]
    assert "worse than the task template" not in runs[1]


# ---------------------------------------------------------------- 3. the comparison's mean curve
def test_the_mean_best_so_far_starts_where_every_seed_with_a_program_has_one(tmp_path, monkeypatch):
    root = make_comparison(tmp_path / "cmp", ["sample"], {("sample", 0): 4.4, ("sample", 1): 4.6}, [0, 1])
    for seed, curve in ((0, [[4, 7.0]]), (1, [[9, 6.0]])):  # a late seed's first program: better than the other's
        path = root / f"runs/tsp_construct/sample-b10-s{seed}/summary.json"
        atomic_write_json(path, {**json.loads(path.read_text()), "best_so_far": curve})
    (figure, *_) = figure_of(monkeypatch, lambda: render_comparison(root))
    ax = figure.axes[0]
    (mean,) = [line for line in ax.lines if line.get_label().startswith("Sample")]
    # a mean over the seeds started so far was 7.0 from evaluation 4, then 6.5: an improvement no run made
    assert list(mean.get_xdata())[0] == 9 and set(mean.get_ydata()) == {6.5}
    assert mean.get_label() == "Sample (2 seeds), mean from 9"
    seeds = [line for line in ax.lines if line.get_linewidth() < 1]  # each seed's own curve, thin
    assert sorted(list(line.get_xdata())[0] for line in seeds) == [4, 9]


# ---------------------------------------------------------------- 4. the run's progress plot
def test_a_runs_progress_plot_has_the_template_and_the_reference(tmp_path, monkeypatch):
    root = make_comparison(tmp_path / "cmp", ["sample"], {("sample", 0): 4.4}, [0])
    run = root / "runs/tsp_construct/sample-b10-s0"  # best so far 6.4 then 5.4; training reference 5.0
    with_context(run, template_objective=5.2, beat_template=False)
    figures = figure_of(monkeypatch, lambda: render(run))
    labels = figures[0].axes[0].get_legend_handles_labels()[1]
    assert labels == ["sample", "task template (5.2)", "reference (5)"]
    levels = {tuple(line.get_ydata()) for line in figures[0].axes[0].lines}
    assert (5.2, 5.2) in levels and (5.0, 5.0) in levels


# ---------------------------------------------------------------- 5. one is not many
def test_one_seed_one_run_and_one_rule_are_singular(tmp_path, monkeypatch):
    root = make_comparison(tmp_path / "cmp", ["sample"], {("sample", 0): 4.4}, [0])
    baseline(root, 4.4)  # the run's own best scores exactly what the template scores
    (figure, *_) = figure_of(monkeypatch, lambda: render_comparison(root))
    assert figure.axes[0].get_legend_handles_labels()[1] == ["Sample (1 seed)"]
    conclusions = json.loads((root / "results.json").read_text())["conclusions"]
    assert "tsp_construct test20: 1 more run's best scores exactly what the template scores (4.4000)." in conclusions
    start = {"name": "hints", "rules": 1, "source": "a.md", "path": "skills/start.md"}
    assert dict(context_rows({"phases": {}, "constrain": "off", "fingerprint": False, "parser_repairs": {},
                              "repair_requests": 0, "skill_versions": [], "skill_start": start}, None))[
        "starting skill"] == "hints (1 rule) from a.md, kept as skills/start.md"


# ---------------------------------------------------------------- 6. a mean over fewer seeds
def test_the_conclusions_say_when_an_arms_mean_is_over_fewer_seeds_than_planned(tmp_path):
    root = make_comparison(tmp_path / "cmp", ["sample", "eoh"], {
        ("sample", 0): 4.4, ("sample", 1): 4.6, ("eoh", 0): 4.2, ("eoh", 1): None}, [0, 1])
    conclusions = results(root)["conclusions"]
    assert ("tsp_construct at budget 10: EoH: 1 of 2 seeds produced a valid program; its mean is that one "
            "seed's.") in conclusions
    assert not [c for c in conclusions if "Sample:" in c and "produced a valid program" in c]  # 2 of 2
    none = make_comparison(tmp_path / "none", ["sample", "eoh"], {
        ("sample", 0): 4.4, ("sample", 1): 4.6, ("eoh", 0): None, ("eoh", 1): None}, [0, 1])
    assert ("tsp_construct at budget 10: EoH: 0 of 2 seeds produced a valid program; it has no mean to "
            "compare.") in results(none)["conclusions"]
