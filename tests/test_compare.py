"""`coevolve compare`: config checks, test scoring (shared with `coevolve eval`),
cut test sets, and a small real comparison on the embedded model."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import coevolve_here
from coevolve.base.errors import UsageError
from coevolve.commands.compare import compare_and_report as run_comparison
from coevolve.compare import CompareConfig, LimitedTask, limits_apply, load_compare_config, planned_runs, score_files
from coevolve.base.config import build_config
from coevolve.plan import compare_config
from tasks.base import evaluate_in_process

ROOT = Path(__file__).resolve().parents[1]


def coevolve(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "coevolve"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def eval_objective(path: Path, task: str, split: str, size: int, in_process: bool = False) -> str:
    """The objective `coevolve eval` prints for one set, as printed (`in_process`: coevolve_here)."""
    run = coevolve_here if in_process else coevolve
    done = run("eval", str(path), "--task", task, "--split", split, "--size", str(size), "--no-reference")
    match = re.search(rf"^\s*{size}\s+(-?[0-9.]+)\s", done.stdout, re.M)
    assert match, done.stdout + done.stderr
    return match.group(1)


@pytest.mark.parametrize("raw,field", [
    ({"compare": {"methods": ["sample", "random"]}}, "compare.methods"),
    ({"compare": {"tasks": ["tsp_construct", "nope"]}}, "compare.tasks[1]"),
    ({"compare": {"tasks": ["sudoku"]}}, "compare.tasks[0]"),
    ({"compare": {"budgets": []}}, "compare.budgets"),
    ({"compare": {"seeds": [0, 0]}}, "compare.seeds"),
    ({"test": {"sizes": [7]}}, "test.sizes"),
    ({"test": {"split": "dev"}}, "test.split"),
    ({"test": {"limit": -1}}, "test.limit"),
    ({"es": {"sigma": -1.0}}, "es.sigma"),
    ({"compare": {"budget": [8]}}, "compare.budget"),
    ({"caps": {"target": 6.5}}, "caps.target stops a run on its own results"),
    ({"caps": {"patience": 3}}, "caps.patience stops a run on its own results"),
    ({"skill": {"start": "/nonexistent/skill"}}, "skill.start is not a valid skill"),
])
def test_bad_config_names_the_field(raw, field):
    # validation, then the tasks built (each must have the test sets asked for)
    with pytest.raises(UsageError, match=re.escape(field)):
        compare_config(raw)


def test_examples_load_and_default_to_the_paper_sets(tmp_path):
    examples = sorted((ROOT / "examples").glob("compare_*.toml"))
    assert examples
    for path in examples:
        config = load_compare_config(path, out=str(tmp_path))
        assert config.compare.out == str(tmp_path) and planned_runs(config)
    from coevolve.compare import scored_sets
    from tasks.registry import get_task

    default = build_config(CompareConfig, {})
    assert default.test.limit == 0  # every instance unless asked otherwise
    assert scored_sets(default, get_task("tsp_construct")) == [("test", 20), ("test", 50)]  # Table 5's columns
    assert scored_sets(default, get_task("kp_construct")) == [("test", 50), ("test", 100)]


def test_cli_bad_config_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[compare]\nmethods = ["sample"]\n[test]\nsizes = [7]\n')
    done = coevolve("compare", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "test.sizes" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()  # nothing started
    done = coevolve("report", str(tmp_path))
    assert done.returncode == 2 and "is neither a comparison directory (no compare.toml) nor a run directory" in done.stderr


def test_ctrl_c_during_a_comparison_names_the_rerun_with_its_folder(tmp_path, capsys, monkeypatch):
    """A comparison without --out gets a fresh folder; after Ctrl-C the line to continue names it."""
    from coevolve.cli import main
    from coevolve.commands import compare as command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "compare_and_report", interrupted)
    monkeypatch.chdir(tmp_path)
    config = ROOT / "examples" / "compare_quick.toml"
    assert main(["compare", str(config)]) == 130
    err = capsys.readouterr().err
    assert re.search(rf"every finished run is in (runs/compare-[0-9-]+): continue with `coevolve compare "
                     rf"{re.escape(str(config))} --out \1`", err), err
    assert "Traceback" not in err


def test_run_directories_are_distinct_and_seed_major():
    config = build_config(CompareConfig, {"compare": {"methods": ["eoh", "eoh+esopt"], "budgets": [10, 20],
                                                      "seeds": [3, 4]}})
    runs = planned_runs(config)
    assert len(runs) == 8 == len({r.directory(Path("x")) for r in runs})
    assert [r.seed for r in runs] == [3] * 4 + [4] * 4


def test_scores_equal_what_coevolve_eval_prints(tmp_path):
    """Same file, same set: the comparison's test score and `coevolve eval`'s print agree."""
    from coevolve.sandbox import Sandbox
    from tasks.registry import get_task

    task = get_task("tsp_construct")
    path = tmp_path / "best.py"
    path.write_text(task.template.replace("np.argmin(distances)", "np.argmin(distances + 0.01 * unvisited_nodes)"))
    with Sandbox(workers=1, timeout_s=120) as sandbox:
        (score,) = score_files([(path.read_text(), "tsp_construct", "test", 20)], 0, sandbox)
    assert score.failure is None and score.instances == 1000 and score.limit == 0
    assert f"{score.objective:.4f}" == eval_objective(path, "tsp_construct", "test", 20)
    assert score.reference < score.objective and score.gap > 0


def test_limited_sets_score_and_reference_the_first_instances():
    from coevolve.sandbox import Sandbox
    from tasks.references import lkh_tour_length
    from tasks.registry import get_task

    task = get_task("tsp_construct")
    namespace: dict = {}
    exec(task.template, namespace)
    first = task.instances("test", 20)[:12]
    expected = evaluate_in_process(task, namespace["select_next_node"], first)
    with Sandbox(workers=1, timeout_s=60) as sandbox:
        (score,) = score_files([(task.template, "tsp_construct", "test", 20)], 12, sandbox)
    assert score.instances == 12 and score.limit == 12
    assert score.objective == pytest.approx(expected, rel=1e-12)
    assert score.reference == pytest.approx(np.mean([lkh_tour_length(c) for c in first]), rel=1e-9)
    limited = LimitedTask("tsp_construct", 12)
    assert limited.name != task.name and len(limited.instances("test", 20)) == 12
    assert not limits_apply("asp") and limits_apply("kp_construct")


TINY = {
    "compare": {"methods": ["sample", "sample+esopt"], "tasks": ["tsp_construct"], "budgets": [6], "seeds": [0, 1]},
    "test": {"sizes": [20], "timeout_s": 120, "workers": 2},
    "sample": {"batch": 4, "population": 3},
    "es": {"population": 2, "proposals_per_member": 2, "sigma": 2e-3, "sigma_end": 1e-3, "alpha": 1e-3},
    "sampling": {"max_tokens": 192},
    "sandbox": {"timeout_s": 20, "workers": 2},
    # As in test_run_e2e: with the context on, the embedded model's tiny runs echo the template (rejected as
    # clones); the context is tested in test_search_context_engine.py. The template seeded into each run's
    # archive: every run has a best.py to score (the template where no proposal beat it), whatever the
    # model writes on this machine, so the table's aggregates are never over nothing.
    "context": {"failures": False, "constrain": False, "fingerprint": False, "seed_template": True},
}


def non_blank(path: Path) -> None:
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3]
    ink = (pixels < 0.95).any(axis=-1).mean()
    colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert ink > 0.02 and colours > 8, (path, ink, colours)


@pytest.mark.engine
def test_small_real_comparison(tmp_path, engine):
    from coevolve.base.records import read_summary
    from coevolve.runstore import read_jsonl
    from tasks.registry import get_task
    from test_run_e2e import check_finished_run

    # a budget of 4: one batch of Sample's 4, one perturbed batch of Sample+ESOpt's 2 members x 2
    # proposals (its one ES update); TINY's budget of 6 only adds a batch of 2 to each run, unperturbed
    # in Sample+ESOpt's (no second update)
    raw = json.loads(json.dumps(TINY))
    raw["compare"]["budgets"] = [4]
    config = build_config(CompareConfig, raw)
    before = engine.checksum()
    root = run_comparison(config, tmp_path / "cmp", engine=engine, log=lambda line: None)
    assert engine.checksum() == before  # ES runs leave the shared engine as they found it

    results = json.loads((root / "results.json").read_text())
    methods = [r for r in results["rows"] if r["kind"] == "method"]
    deltas = [r for r in results["rows"] if r["kind"] == "delta"]
    assert [(r["method"], r["budget"], r["split"], r["size"], r["runs"], r["finished"]) for r in methods] == [
        ("sample", 4, "test", 20, 2, 2), ("sample+esopt", 4, "test", 20, 2, 2)]
    assert [(d["base"], d["variant"]) for d in deltas] == [("sample", "sample+esopt")]
    gaps = {}
    for row in methods:
        dirs = [root / r["dir"] for r in results["runs"] if r["method"] == row["method"]]
        for d in dirs:  # what every finished run holds (each run started from the engine's weights before)
            check_finished_run(d, read_summary(d / "summary.json"), 4, read_jsonl(d / "history.jsonl"), before, engine)
        summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
        assert all(s["evaluations"] == 4 == s["ledger"]["used"] for s in summaries)
        assert row["train_valid_rate"]["mean"] == pytest.approx(statistics.mean(s["valid_rate"] for s in summaries))
        scores = [json.loads((d / "test.json").read_text())["scores"] for d in dirs]
        objectives = [s[0]["objective"] for s in scores if s and s[0]["objective"] is not None]
        assert row["with_heuristic"] == 2 == sum((d / "best.py").exists() for d in dirs)  # the seed at least
        assert row["objective"]["n"] == len(objectives)
        if objectives:
            assert row["objective"]["mean"] == pytest.approx(statistics.mean(objectives))
        gaps[row["method"]] = row["gap"]["mean"]
        for d in dirs:  # the report's test score is what `coevolve eval` prints for the same file
            if (d / "best.py").exists():
                (score,) = json.loads((d / "test.json").read_text())["scores"]
                if score["objective"] is not None:
                    printed = eval_objective(d / "best.py", "tsp_construct", "test", 20, in_process=True)
                    assert f"{score['objective']:.4f}" == printed
    # Δ recomputed independently: from each run's test objective and the set's own LKH
    # reference, not from the report's aggregates, over the runs that produced a heuristic.
    # Here every run has one (the check fails, rather than passes vacuously, if not).
    from tasks.base import gap
    from tasks.references import lkh_tour_length

    task = get_task("tsp_construct")
    reference = float(np.mean([lkh_tour_length(c) for c in task.instances("test", 20)]))
    mean_gap = {}
    for method in ("sample", "sample+esopt"):
        scored = [json.loads((root / r["dir"] / "test.json").read_text())["scores"]
                  for r in results["runs"] if r["method"] == method]
        objectives = [s[0]["objective"] for s in scored if s and s[0]["objective"] is not None]
        assert objectives, (method, scored)
        mean_gap[method] = statistics.mean(gap(o, reference, "min") for o in objectives)
    assert gaps == pytest.approx(mean_gap, rel=1e-9)
    assert deltas[0]["delta"] is not None
    assert deltas[0]["delta"] == pytest.approx(mean_gap["sample"] / mean_gap["sample+esopt"] - 1)  # the paper's Δ

    report = (root / "report.md").read_text()
    assert "budget of 4 evaluations" in report and "| Sample |" in report and "| Sample+ESOpt |" in report
    assert "| Δ Sample+ESOpt vs Sample |" in report
    assert len((root / "table.csv").read_text().splitlines()) == 1 + 3
    assert len((root / "runs.csv").read_text().splitlines()) == 1 + 4
    for name in ["progress-tsp_construct-b4.png", "test-tsp_construct-test20.png"]:
        non_blank(root / "plots" / name)

    # resumable: a second call reruns and rescores nothing
    events = {p: p.stat().st_mtime_ns for p in root.glob("runs/*/*/events.jsonl")}
    tests = {p: p.stat().st_mtime_ns for p in root.glob("runs/*/*/test.json")}
    lines: list[str] = []
    run_comparison(config, root, engine=engine, log=lines.append)
    assert sum("skipped" in line for line in lines) == 4 and not any("scoring" in line for line in lines)
    assert {p: p.stat().st_mtime_ns for p in events} == events and {p: p.stat().st_mtime_ns for p in tests} == tests

    # `coevolve report DIR` re-renders the same report from the files alone: the command in this process
    # (what it renders is read from DIR; the resolved tasks this process holds are forgotten first, as a
    # fresh process starts without them)
    from tasks.loader import clear_cache

    (root / "report.md").unlink()
    for png in (root / "plots").glob("*.png"):
        png.unlink()
    clear_cache()
    done = coevolve_here("report", str(root))
    assert done.returncode == 0, done.stderr
    assert (root / "report.md").read_text() == report
    non_blank(root / "plots" / "progress-tsp_construct-b4.png")
    run_dir = next(root.glob("runs/*/*"))
    done = coevolve_here("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert "evaluations" in (run_dir / "report.md").read_text()


def test_finished_runs_are_skipped_then_scored_and_reported(tmp_path):
    """No engine is started when every run is finished; each best.py is scored once."""
    from coevolve.compare import run_config
    from coevolve.base.config import as_dict, dump_toml
    from coevolve.runstore import atomic_write_json, atomic_write_text
    from tasks.registry import get_task

    config = build_config(CompareConfig, {"compare": {"methods": ["eoh", "eoh+esopt"], "budgets": [5],
                                                      "seeds": [0]}, "test": {"sizes": [20], "limit": 30}})
    root = tmp_path / "cmp"
    task = get_task("tsp_construct")
    for spec in planned_runs(config):
        d = spec.directory(root)
        atomic_write_text(d / "config.toml", dump_toml(as_dict(run_config(config, spec, d))))
        atomic_write_text(d / "events.jsonl", '{"type": "start"}\n{"type": "end"}\n')
        atomic_write_json(d / "summary.json", {  # every field the loop has always written
            "method": spec.method, "task": spec.task, "seed": spec.seed, "budget": spec.budget, "evaluations": 5,
            "valid": 1, "valid_rate": 0.2, "failures": {}, "best_so_far": [[3, 7.0]], "population": [3], "es": None,
            "train": {"split": "train", "size": 50, "direction": "min", "reference": None},
            "best": {"id": 3, "objective": 7.0, "operator": "i1", "step": 0, "model_state": {"kind": "base"}},
            "ledger": {"budget": 5, "used": 5, "outcomes": {"evaluated": 5}, "llm_requests": 5}})
        atomic_write_text(d / "best.py", task.template)
    lines: list[str] = []
    run_comparison(config, root, engine=None, log=lines.append)
    assert sum("skipped" in line for line in lines) == 2 and sum("scoring" in line for line in lines) == 1
    # a budget of 5 ends within EoH's initial population: each arm's plan warning, said once per arm
    assert any(line.startswith("warning: tsp_construct eoh+esopt: no ES update fits in run.budget = 5: eoh+esopt "
                               "moves no weights here (the first needs run.budget >= ") for line in lines), lines
    assert sum(line.startswith("warning: tsp_construct eoh: every step in run.budget = 5 writes from the "
                               "template alone") for line in lines) == 1
    namespace: dict = {}
    exec(task.template, namespace)
    expected = evaluate_in_process(task, namespace["select_next_node"], task.instances("test", 20)[:30])
    rows = json.loads((root / "results.json").read_text())["rows"]
    assert [r["objective"]["mean"] for r in rows[:2]] == pytest.approx([expected, expected], rel=1e-12)
    assert rows[2]["delta"] == pytest.approx(0.0)
    lines.clear()
    run_comparison(config, root, engine=None, log=lines.append)
    assert not any("scoring" in line for line in lines)  # scores reused: same file, same settings
    # scored again under more seeds of the programs' generators ([test] seeds): the template draws nothing
    config.test.seeds = 2
    lines.clear()
    run_comparison(config, root, engine=None, log=lines.append)
    assert sum("scoring" in line for line in lines) == 1
    rows = json.loads((root / "results.json").read_text())["rows"]
    assert [r["objective"]["mean"] for r in rows[:2]] == pytest.approx([expected, expected], rel=1e-12)
    report = (root / "report.md").read_text()
    assert "test objective is its mean under 2 seeds of its random generators (test.seeds)" in report
    assert "sandbox.seeds" not in report  # the runs scored each program once


def test_a_hanging_best_heuristic_fails_fast_with_a_typed_timeout():
    """Test scoring takes the task's per-instance limit: a best.py that never
    returns is a typed timeout naming the instance, not a 1800 s wait."""
    from coevolve.plan import HoldoutSection
    from coevolve.sandbox import Sandbox

    hang = ("def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):\n"
            "    while True:\n        pass\n")
    with Sandbox.from_section(HoldoutSection(workers=1)) as sandbox:
        (score,) = score_files([(hang, "tsp_construct", "test", 50)], 5, sandbox)
    assert score.failure == "timeout" and score.objective is None
    assert "instance 1 of 5 (test50) exceeded the per-instance time limit" in score.message
