"""coevolve.report on a hand-made comparison directory whose numbers are known."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from coevolve.base.errors import UsageError
from coevolve.base.records import read_summary
from coevolve.compare import CompareConfig, planned_runs, run_config
from coevolve.base.config import as_dict, build_config, dump_toml
from coevolve.report import render, render_comparison, run_table
from coevolve.runstore import atomic_write_json, atomic_write_text

REFERENCE = 4.0
# objective on test20 per (method, seed); None: the run found no valid heuristic
OBJECTIVES = {("sample", 0): 4.4, ("sample", 1): 4.6, ("sample", 2): 4.8,
              ("sample+esopt", 0): 4.2, ("sample+esopt", 1): 4.4, ("sample+esopt", 2): None}


def fake_run(directory: Path, config, objective: float | None) -> None:
    """A finished run's files, as the loop and the scorer leave them."""
    atomic_write_text(directory / "config.toml", dump_toml(as_dict(config)))
    atomic_write_text(directory / "events.jsonl", '{"type": "start"}\n{"type": "end", "evaluations": 10}\n')
    run = config.run
    valid = 0 if objective is None else 4
    best = None if objective is None else {"id": 3, "objective": objective + 1.0, "gap": 0.3, "operator": "i1",
                                           "step": 0, "idea": "x", "model_state": {"kind": "base"}}
    curve = [] if objective is None else [[2, objective + 2.0], [7, objective + 1.0]]
    atomic_write_json(directory / "summary.json", {
        "method": run.method, "task": run.task, "seed": run.seed, "budget": run.budget, "evaluations": 10,
        "ledger": {"budget": 10, "used": 10, "outcomes": {"evaluated": 4, "parse": 6},
                   "llm_requests": 10, "prompt_tokens": 100, "completion_tokens": 500},
        "valid": valid, "valid_rate": valid / 10, "failures": {"parse": 6},
        "distinct_valid": 0 if objective is None else run.seed + 1,  # the other valid ones repeat earlier code
        "train": {"split": "train", "size": 50, "direction": "min", "reference": 5.0},
        "best": best, "best_so_far": curve, "population": [], "es": None})
    if objective is not None:
        atomic_write_text(directory / "best.py", "def select_next_node(a, b, c, d):\n    return c[0]\n")
    scores = [] if objective is None else [{
        "split": "test", "size": 20, "limit": 0, "objective": objective, "failure": None, "message": "",
        "instances": 1000, "seconds": 1.0, "reference": REFERENCE, "reference_kind": "best-known",
        "gap": (objective - REFERENCE) / REFERENCE}]
    atomic_write_json(directory / "test.json", {"file": "best.py" if objective else None, "scores": scores})


@pytest.fixture
def comparison(tmp_path) -> Path:
    config = build_config(CompareConfig, {
        "compare": {"methods": ["sample", "sample+esopt"], "tasks": ["tsp_construct"], "budgets": [10],
                    "seeds": [0, 1, 2]},
        "test": {"sizes": [20]}})
    root = tmp_path / "cmp"
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    for spec in planned_runs(config):
        directory = spec.directory(root)
        fake_run(directory, run_config(config, spec, directory), OBJECTIVES[(spec.method, spec.seed)])
    return root


def test_table_numbers(comparison):
    render_comparison(comparison)
    rows = json.loads((comparison / "results.json").read_text())["rows"]
    sample, variant, delta = rows
    assert sample["objective"] == {"n": 3, "mean": pytest.approx(4.6), "std": pytest.approx(0.2)}
    assert sample["gap"]["mean"] == pytest.approx(0.15) and sample["gap"]["std"] == pytest.approx(0.05)
    assert variant["objective"]["n"] == 2 and variant["gap"]["mean"] == pytest.approx(0.075)
    assert variant["with_heuristic"] == 2 and variant["runs"] == 3
    assert variant["train_valid_rate"]["mean"] == pytest.approx(0.8 / 3)
    # gaps 15% and 7.5%: the paper's Δ = 0.15 / 0.075 − 1 = 100%; half the gap closed
    assert delta["kind"] == "delta" and delta["delta"] == pytest.approx(1.0)
    assert delta["gap_closed"] == pytest.approx(0.5)

    report = (comparison / "report.md").read_text()
    # distinct valid programs per run: seeds 0, 1, 2 -> 1, 2, 3 (sample); 1, 2 and none (sample+esopt)
    assert "| Sample | 4.6000 ± 0.2000 | 15.00% ± 5.00% | 40.00% ± 0.00% | 2 ± 1 | 3/3 |" in report
    assert variant["distinct_valid"] == {"n": 3, "mean": pytest.approx(1.0), "std": pytest.approx(1.0)}
    assert "| Sample+ESOpt | 4.3000 ± 0.1414 | 7.50% ± 3.54% | 26.67% ± 23.09% | 1 ± 1 | 2/3 |" in report
    # Welch by hand: shares 0.2²/3 = 0.01333 and 0.1414²/2 = 0.01, se 0.1528, df = 0.02333² / (0.01333²/2 +
    # 0.01²/1) = 2.88 -> t(2) = 4.303, half-width 0.657: -0.3 ± 0.657 includes 0. Seeds per arm for 80% power:
    # 0.3 / sqrt(0.06 / n) >= t(1.8 (n - 1)) + 0.8416 first holds at n = 7 (3.24 >= 3.07; n = 6: 3.00 < 3.10)
    assert delta["distinct"] is False and delta["interval"] == [pytest.approx(-0.957, abs=1e-3),
                                                                 pytest.approx(0.357, abs=1e-3)]
    assert delta["seeds_needed"] == 7
    assert "| Δ Sample+ESOpt vs Sample |  | +100.0% (cannot be told apart) |  |  |" in report
    assert ("Welch's 95% interval for the difference, [-0.9573, 0.3573] over 3 and 2 seeds, includes 0; about 7 "
            "seeds per arm would tell a true difference this size apart (80% power)") in report
    assert "budget of 10 evaluations" in report and "test20 = 4.0000 (best-known)" in report
    assert "| Sample | 3 | 30 | 12 | 0 | 18 | 30 | 1500 |" in report  # what the budget bought

    with open(comparison / "table.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [r["kind"] for r in table] == ["method", "method", "delta"]
    assert float(table[0]["objective_mean"]) == pytest.approx(4.6) and float(table[2]["delta"]) == pytest.approx(1.0)
    assert float(table[2]["interval_low"]) == pytest.approx(-0.957, abs=1e-3) and table[2]["seeds_needed"] == "7"
    with open(comparison / "runs.csv") as handle:
        runs = list(csv.DictReader(handle))
    assert len(runs) == 6 and sorted(float(r["objective"]) for r in runs if r["objective"]) == [4.2, 4.4, 4.4, 4.6, 4.8]


def test_plots_are_drawn(comparison):
    import matplotlib.image

    from coevolve.report.plots import difference_points

    written = render_comparison(comparison)
    # the Δ row's Welch interval (test_table_numbers: [-0.957, 0.357]) in % of Sample's mean 4.6: the
    # difference -0.3 is -6.52%, the interval [-20.81%, 7.76%]: grey, it crosses 0
    rows = json.loads((comparison / "results.json").read_text())["rows"]
    ((name, middle, low, high, apart),) = difference_points(rows, "tsp_construct")
    assert name == "Sample+ESOpt vs Sample, b10, test20" and not apart
    assert (middle, low, high) == (pytest.approx(-6.522, abs=1e-3), pytest.approx(-20.81, abs=0.01),
                                   pytest.approx(7.767, abs=0.01))
    assert "![differences](plots/differences-tsp_construct.png)" in (comparison / "report.md").read_text()
    for name in ["plots/progress-tsp_construct-b10.png", "plots/test-tsp_construct-test20.png",
                 "plots/differences-tsp_construct.png"]:
        pixels = matplotlib.image.imread(written[name])[..., :3]
        ink = (pixels < 0.95).any(axis=-1).mean()
        colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
        assert ink > 0.02 and colours > 8, (name, ink, colours)


def test_unfinished_runs_are_reported_not_invented(comparison):
    victim = next(comparison.glob("runs/tsp_construct/sample-b10-s1"))
    atomic_write_text(victim / "events.jsonl", '{"type": "start"}\n')  # killed before its end
    render_comparison(comparison)
    sample = json.loads((comparison / "results.json").read_text())["rows"][0]
    assert (sample["runs"], sample["finished"], sample["objective"]["n"]) == (3, 2, 2)
    assert sample["objective"]["mean"] == pytest.approx(4.6)  # (4.4 + 4.8) / 2
    assert "| partial |" in (comparison / "report.md").read_text()


def test_render_a_single_run_and_bad_directories(comparison, tmp_path):
    run = comparison / "runs/tsp_construct/sample-b10-s0"
    written = render(run)
    text = written["report.md"].read_text()
    assert "| test20 | 1000 | 4.4000 | 4.0000 | 10.00% |  |" in text and "progress.png" in text
    assert "This run's budget is 10 evaluations, counted by one ledger" in text and "Every run" not in text
    with pytest.raises(UsageError, match="not found"):
        render(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"is neither a comparison directory \(no compare.toml\) nor a run directory \(no config.toml\)"):
        render(tmp_path / "empty")


def test_report_of_a_run_whose_task_file_changed_reads_the_runs_copy_and_says_so(comparison, tmp_path, capsys):
    """`coevolve report RUN` after the run's task file was edited: the run's task_files/ copy is
    read (the source the run used), and one note on stderr says so."""
    from coevolve.base.config import read_toml
    from coevolve.cli import main
    from tasks.loader import absolute_spec, clear_cache, copy_notes, record_tasks

    run = comparison / "runs/tsp_construct/sample-b10-s0"
    mine = tmp_path / "mine.py"
    mine.write_text("from tasks.tsp_construct import TSPConstruct\n\n\nclass Mine(TSPConstruct):\n    pass\n")
    spec = absolute_spec(f"{mine}:Mine")
    record_tasks(run, [spec])
    config = read_toml(run / "config.toml")
    config["run"]["task"] = spec
    atomic_write_text(run / "config.toml", dump_toml(config))
    clear_cache()
    assert main(["report", str(run)]) == 0
    assert "note:" not in capsys.readouterr().err  # unchanged: nothing to say
    mine.write_text(mine.read_text() + "# edited since the run\n")
    clear_cache()
    assert main(["report", str(run)]) == 0
    captured = capsys.readouterr()
    (copy,) = (run / "task_files").glob("*.py")
    assert captured.err.splitlines() == [f"note: task file {mine.resolve()} changed since the run; using the run's copy "
                                         f"({copy})"], captured.err
    assert "report.md" in captured.out and copy_notes() == []  # said once


def test_report_says_when_runs_return_the_template_and_arms_cannot_be_told_apart(tmp_path):
    """The committed eoh vs eoh+esopt result's shape: every run's best is the task
    template, so every test score equals the template's and the arms tie."""
    from tasks.registry import get_task

    config = build_config(CompareConfig, {
        "compare": {"methods": ["eoh", "eoh+esopt"], "tasks": ["tsp_construct"], "budgets": [36],
                    "seeds": [0, 1, 2]}, "test": {"sizes": [20]}})
    root = tmp_path / "cmp"
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    template = get_task("tsp_construct").template
    renamed = template.replace("distances", "d").replace('"""Choose', '"""Pick')  # same behaviour, other AST
    for spec in planned_runs(config):
        directory = spec.directory(root)
        fake_run(directory, run_config(config, spec, directory), 6.9542)
        atomic_write_text(directory / "best.py", "# best of ...\n" + (renamed if spec.seed == 2 else template))
    baseline = root / "baselines" / "tsp_construct"
    atomic_write_json(baseline / "test.json", {"file": "template", "scores": [{
        "split": "test", "size": 20, "objective": 6.9542, "failure": None, "instances": 1000,
        "reference": REFERENCE, "reference_kind": "best-known", "gap": (6.9542 - REFERENCE) / REFERENCE}]})
    render_comparison(root)
    report = (root / "report.md").read_text()
    assert "4 of 6 finished runs returned the task template itself" in report
    assert "2 more runs' best scores exactly what the template scores (6.9542)" in report
    # the Runs table says so of those two too, where their "best is" was blank (read as a better program)
    runs = [line for line in report.splitlines() if line.startswith("| tsp_construct |")]
    assert [line.split(" | ")[7] for line in runs if "-s2/" in line] == ["a program scoring as the task template"] * 2
    assert all(line.split(" | ")[7] == "the task template" for line in runs if "-s2/" not in line), runs
    assert "EoH vs EoH+ESOpt on tsp_construct test20 at budget 36: cannot be told apart" in report
    assert "| Task template (starting point) | 6.9542 |" in report
    assert "+0.0% (cannot be told apart)" in report
    assert "cannot be told apart: every seed of both arms scored 6.9542" in report
    # every table row links to its runs
    assert "[s0](runs/tsp_construct/eoh-b36-s0/) [s1](runs/tsp_construct/eoh-b36-s1/)" in report
    assert "| 3/3 | [s0](runs/tsp_construct/eoh_esopt-b36-s0/)" in report
    results = json.loads((root / "results.json").read_text())
    (delta,) = [r for r in results["rows"] if r["kind"] == "delta"]
    assert delta["distinct"] is False and results["structurally_matched"]
    # `coevolve report RUN_DIR` says it too, for one run
    render(root / "runs" / "tsp_construct" / "eoh-b36-s0")
    assert "best heuristic is the task template itself" in (root / "runs/tsp_construct/eoh-b36-s0/report.md").read_text()
    render(root / "runs" / "tsp_construct" / "eoh-b36-s2")  # the renamed copy: not literally the template
    assert "task template itself" not in (root / "runs/tsp_construct/eoh-b36-s2/report.md").read_text()
    # and so does the table `coevolve run` prints when a run ends, with the same check
    for seed, says in ((0, True), (2, False)):
        run_dir = root / "runs" / "tsp_construct" / f"eoh-b36-s{seed}"
        table = run_table(read_summary(run_dir / "summary.json"), run_dir)
        assert ("best is" in table and "the task template itself" in table) is says, table


def test_report_says_when_the_arms_were_not_structurally_matched(comparison):
    from coevolve.base.config import read_toml

    config = build_config(CompareConfig, read_toml(comparison / "compare.toml"))
    config.es.population, config.compare.allow_unmatched = 3, True
    atomic_write_text(comparison / "compare.toml", dump_toml(as_dict(config)))
    render_comparison(comparison)
    report = (comparison / "report.md").read_text()
    assert "NOT structurally matched" in report and "sample asks 10 i1 candidates, sample+esopt 3 i1" in report


def test_the_report_shows_what_the_skills_requests_did(comparison):
    """A comparison whose Sample runs showed a judged skill (hand-made candidates and trials): the
    report's table sums each side over the seeds; the runs that showed none have no row, nor does a run
    whose log does not name each request's version (written before it did)."""
    from coevolve.report.collecting import skill_use

    def line(cid, objective, version=None, parents=()):
        return {"id": cid, "step": 3, "operator": "m1" if parents else "i1", "parents": list(parents),
                "model_state": {"kind": "base"}, "code": "x", "objective": objective,
                **({"skill_version": version} if version is not None else {})}

    trials = [{"step": 4, "since": 2, "incumbent": None, "challenger": 1, "kept": 1, "distinct": False,
               "children": {}, "interval": [-0.5, 0.6]},
              {"step": 6, "since": 4, "incumbent": 1, "challenger": 2, "kept": 1, "distinct": False,
               "children": {}, "interval": None, "final": True}]
    for seed in (0, 1, 2):
        run = comparison / "runs" / "tsp_construct" / f"sample-b10-s{seed}"
        summary = json.loads((run / "summary.json").read_text())
        summary["context"] = {"skill_versions": [{"version": 1, "step": 2}, {"version": 2, "step": 4}],
                              "skill_start": None, "skill_trials": trials}
        atomic_write_json(run / "summary.json", summary)
        # no skill: 1 scored (no parent: a success), 4 failed; v001: 2 beat parent 1 (5.0 < 6.0), 3 failed
        atomic_write_text(run / "candidates.jsonl", "".join(json.dumps(c) + "\n" for c in [
            line(1, 6.0), line(2, 5.0, 1, [1]), line(3, None, 1, [1]), line(4, None)]))
        # the log names each request's version (a run written before it did is not counted: seed 2's copy)
        step = {"type": "step", "step": 3, "requests": [{"slot": i, "skill": v} for i, v in enumerate([None, 1, 1, None])]}
        events = (run / "events.jsonl").read_text().splitlines()
        if seed < 2:
            atomic_write_text(run / "events.jsonl", "\n".join([events[0], json.dumps(step), *events[1:]]) + "\n")
    use = skill_use(comparison / "runs" / "tsp_construct" / "sample-b10-s0",
                    read_summary(comparison / "runs" / "tsp_construct" / "sample-b10-s0" / "summary.json"))
    counts = {"candidates": 2, "valid": 1, "improved": 1}
    assert use == {"skill": counts, "none": counts, "before": {"candidates": 0, "valid": 0, "improved": 0},
                   "since": 2, "versions": [(None, counts), (1, counts)],
                   "judged": 1, "kept": 1, "distinct": 0, "ahead": [1]}
    render_comparison(comparison)
    report = (comparison / "report.md").read_text()
    assert "## What the skill's requests did" in report
    assert "| tsp_construct | Sample | 10 | 2 | – | 2 / 2 of 4 | 2 / 2 of 4 | 2 | 2 | 0 | v001, v001 |" in report
    assert "Sample+ESOpt | 10 |" not in report.split("## What the skill's requests did")[1].split("## Runs")[0]
    (row,) = json.loads((comparison / "results.json").read_text())["skill"]
    assert (row["method"], row["runs"], row["skill"], row["judged"], row["ahead"]) == (
        "sample", 2, {"candidates": 4, "valid": 2, "improved": 2}, 2, [1, 1])
    assert skill_use(comparison / "runs" / "tsp_construct" / "sample-b10-s2",
                     read_summary(comparison / "runs" / "tsp_construct" / "sample-b10-s2" / "summary.json")) is None


def test_an_agent_runs_held_out_change_is_paired_per_problem(tmp_path):
    """heldout_change reads the two rounds' episodes (attempts of a problem averaged) and pairs them by
    problem; the sign test speaks only when enough problems moved one way."""
    from coevolve.report.collecting import heldout_change
    from coevolve.report.rendering import change_line

    def write(index: int, rewards: dict[str, list[float]]) -> None:
        lines = [json.dumps({"case_id": case, "reward": r}) for case, attempts in rewards.items() for r in attempts]
        path = tmp_path / "trajectories" / f"eval_{index:03d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(lines) + "\n")

    # 7 problems: 6 solved after but not before, one solved before and half after; one only in round 0
    write(0, {**{f"p{i}": [0.0, 0.0] for i in range(6)}, "p6": [1.0, 1.0], "gone": [1.0, 1.0]})
    write(3, {**{f"p{i}": [1.0, 1.0] for i in range(6)}, "p6": [1.0, 0.0]})
    change = heldout_change(tmp_path, 0, 3)
    assert change == {"cases": 7, "better": 6, "worse": 1, "change": pytest.approx((6 - 0.5) / 7),
                      "p": pytest.approx(2 * 8 / 128)}  # 2 * P(X <= 1), X ~ Bin(7, 1/2)
    assert change_line(change) == "+0.786: 6 of 7 problems better, 1 worse; cannot be told apart (sign test p = 0.12)"
    write(3, {**{f"p{i}": [1.0] for i in range(7)}})
    assert change_line(heldout_change(tmp_path, 0, 3)) == ("+0.857: 6 of 7 problems better, 0 worse; told apart "
                                                           "(sign test p = 0.031)")
    assert heldout_change(tmp_path, 0, 5) is None  # a round not on disk: no row


def test_the_commonest_failures_are_named_by_what_went_wrong(tmp_path):
    """A traceback counts by its last line; causes that differ only in numbers are one cause; a repeat
    of failed code counts again (as in the failures row); an empty message is its kind."""
    from coevolve.report.collecting import commonest_failures

    def record(cid, failure=None, message="", duplicate_of=None):
        return {"id": cid, "step": 0, "operator": "i1", "parents": [], "model_state": {"kind": "base"},
                "code": "def f(): pass", "objective": None if failure else 1.0, "failure": failure,
                "message": message, "duplicate_of": duplicate_of}

    trace = ('Traceback (most recent call last):\n  File "<candidate>", line 4, in f\n    return distances[0]\n'
             "NameError: name 'distances' is not defined\n")
    records = [record(1, "exception", trace), record(2, "exception", trace, duplicate_of=1),
               record(3, "invalid", "invalid solution: node index -1 is out of range 0..49"),
               record(4, "invalid", "invalid solution: node index 50 is out of range 0..49"),
               record(5, "exception", trace.replace("line 4", "line 9")), record(6), record(7, "timeout", ""),
               record(8, "syntax", "SyntaxError: line 3: " + "x" * 200)]
    (tmp_path / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert commonest_failures(tmp_path) == [("NameError: name 'distances' is not defined", 3),
                                            ("invalid solution: node index -1 is out of range 0..49", 2),
                                            ("timeout", 1)]
    cut = commonest_failures(tmp_path, most=4)[-1]
    assert cut[0].startswith("SyntaxError: line 3: xxx") and len(cut[0]) == 90 and cut[0].endswith("…")


def test_report_of_a_folder_that_is_neither_says_what_it_looked_for(tmp_path, capsys):
    from coevolve.cli import main

    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "report.md").write_text("# a copied report\n")
    (tmp_path / "file.txt").write_text("x")
    cases = [(tmp_path / "outputs", "is neither a comparison directory (no compare.toml) nor a run directory "
                                    "(no config.toml)"),
             (tmp_path / "file.txt", "is a file; give the run's or comparison's directory"),
             (tmp_path / "missing", "directory not found")]
    for path, message in cases:
        assert main(["report", str(path)]) == 2
        assert message in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["report.md"]  # nothing written


def test_report_of_a_folder_of_runs_names_the_ones_it_takes(comparison, capsys):
    """`coevolve report runs` on a folder of runs (which the dashboard takes) said only that it is neither
    kind: it names the run or comparison folders below it (a comparison's, not its runs), up to four."""
    from coevolve.cli import main

    runs = comparison / "runs"
    assert main(["report", str(runs)]) == 2
    err = capsys.readouterr().err
    listed = ", ".join(str(runs / "tsp_construct" / name) for name in
                       ("sample-b10-s0", "sample-b10-s1", "sample-b10-s2", "sample_esopt-b10-s0"))
    assert (f"{runs} is neither a comparison directory (no compare.toml) nor a run directory (no config.toml); "
            f"below it: {listed} and more: give one of them") in err, err
    assert main(["report", str(comparison.parent)]) == 2  # the folder that holds the comparison: just it
    assert f"; below it: {comparison}: give one of them" in capsys.readouterr().err
    assert not (runs / "report.md").exists()


def test_the_comparison_says_why_each_arms_candidates_failed(comparison):
    """Per arm, over its finished runs: how many candidates failed and the commonest causes, as text
    (a candidate's message is cleaned: no escape sequence, no table-breaking bar)."""
    def lines(cid, failure, message):
        return json.dumps({"id": cid, "step": 0, "operator": "i1", "parents": [], "model_state": {"kind": "base"},
                           "code": "x", "objective": None if failure else 5.0, "failure": failure,
                           "message": message}) + "\n"

    def log(count):  # the log the candidates agree with: one step that scored them all
        step = {"type": "step", "step": 0, "results": [{"id": i} for i in range(1, count + 1)]}
        return "".join(json.dumps(e) + "\n" for e in ({"type": "start"}, step, {"type": "end", "evaluations": 10}))

    trace = "Traceback (most recent call last):\n  File \"<candidate>\", line 3\nNameError: name 'd' is not defined"
    for seed in (0, 1, 2):
        run = comparison / "runs" / "tsp_construct" / f"sample-b10-s{seed}"
        (run / "candidates.jsonl").write_text(lines(1, "exception", trace) + lines(2, None, "")
                                              + lines(3, "invalid", f"tour visits city {seed} twice"))
        (run / "events.jsonl").write_text(log(3))
        esopt = comparison / "runs" / "tsp_construct" / f"sample_esopt-b10-s{seed}"
        (esopt / "candidates.jsonl").write_text(lines(1, "exception", "ValueError: a|b \x1b[31mred\x1b[0m"))
        (esopt / "events.jsonl").write_text(log(1))
    render_comparison(comparison)
    report = (comparison / "report.md").read_text()
    section = report.split("## Why candidates failed")[1].split("##")[0]
    assert "edited or damaged" not in section, section  # runs whose files agree get no damage note
    rows = [line for line in section.splitlines() if line.startswith("| tsp_construct")]
    assert rows[0] == ("| tsp_construct | Sample | 10 | 6 of 9 | `NameError: name 'd' is not defined` (3); "
                       "`tour visits city 0 twice` (3) |"), rows
    assert rows[1] == "| tsp_construct | Sample+ESOpt | 10 | 3 of 3 | `ValueError: a/b red` (3) |", rows
    assert "\x1b" not in report
    saved = json.loads((comparison / "results.json").read_text())["failures"]  # what the dashboard shows
    assert [(f["method"], f["failed"], f["candidates"], f["causes"][0]) for f in saved] == [
        ("sample", 6, 9, ["NameError: name 'd' is not defined", 3]), ("sample+esopt", 3, 3, ["ValueError: a|b red", 3])]


def test_report_says_when_a_runs_best_is_one_of_its_starting_programs(tmp_path):
    """[start] programs: a run whose best is one of them (a negative id in summary.json) found nothing
    better than where it began, and the report says so."""
    config = build_config(CompareConfig, {"compare": {"methods": ["eoh"], "tasks": ["tsp_construct"],
                                                      "budgets": [36], "seeds": [0]}, "test": {"sizes": [20]}})
    root = tmp_path / "cmp"
    atomic_write_text(root / "compare.toml", dump_toml(as_dict(config)))
    (spec,) = planned_runs(config)
    directory = spec.directory(root)
    fake_run(directory, run_config(config, spec, directory), 6.5)
    summary = json.loads((directory / "summary.json").read_text())
    summary["best"].update(id=-1, operator="start", model_state={"kind": "start", "path": "/x/mine.py"})
    atomic_write_json(directory / "summary.json", summary)
    render_comparison(root)
    report = (root / "report.md").read_text()
    assert "tsp_construct: 1 of 1 finished runs returned one of their starting programs ([start] programs) as " \
           "their best: they found nothing better than where they began." in report
    assert "| a starting program ([start] programs) |" in report


def baseline(root: Path, objective: float) -> None:
    """The task template's test score, as `coevolve compare` leaves it under baselines/."""
    atomic_write_json(root / "baselines" / "tsp_construct" / "test.json", {"file": "template", "scores": [{
        "split": "test", "size": 20, "objective": objective, "failure": None, "instances": 1000,
        "reference": REFERENCE, "reference_kind": "best-known", "gap": (objective - REFERENCE) / REFERENCE}]})


def test_the_conclusions_name_an_arm_that_ended_worse_than_the_template(comparison):
    """An arm whose mean test objective is worse than the starting-point row (lower is better here) gets
    a line: "every seed" only when every seed's best is worse, else the mean and how many seeds."""
    def lines() -> list[str]:
        render_comparison(comparison)
        return [c for c in json.loads((comparison / "results.json").read_text())["conclusions"]
                if "worse than the task template" in c]

    baseline(comparison, 4.5)  # Sample 4.4, 4.6, 4.8 (mean 4.6): worse on average; Sample+ESOpt (4.3) better
    assert lines() == ["tsp_construct test20 at budget 10: Sample's mean test objective is worse than the task "
                       "template's (mean 4.6000 vs 4.5000; 2 of 3 scored seeds worse): on average its best heuristic "
                       "is worse than the program its runs started from."]
    baseline(comparison, 4.1)  # now every seed of both; Sample+ESOpt's third run has no heuristic
    sample, variant = lines()
    assert sample == ("tsp_construct test20 at budget 10: every seed of Sample ended worse than the task template "
                      "(mean 4.6000 vs 4.1000): its best heuristics are worse than the program its runs started from.")
    assert variant.startswith("tsp_construct test20 at budget 10: Sample+ESOpt's mean test objective is worse") \
        and "(mean 4.3000 vs 4.1000; 2 of 2 scored seeds worse)" in variant
    assert f"- {sample}" in (comparison / "report.md").read_text()
    baseline(comparison, 4.9)  # both arms better than the template: no such line
    assert lines() == []
