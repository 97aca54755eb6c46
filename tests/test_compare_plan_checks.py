"""`coevolve compare --plan` refuses and warns as the comparison itself does, through the same checks:
an EoH budget too small for a generation (refused under eoh.m_multiplier = 0, before a line of the plan
is printed; warned of when it ends within the initial population), an output folder with a file in its
way (refused before any other check); and the plan and the comparison build each run's config, and
read each run's config.toml, once."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve import compare as compare_module
from coevolve import plan as plan_module
from coevolve.base.config import as_dict, dump_toml
from coevolve.cli import main
from coevolve.engine import pool
from coevolve.plan import RunSpec, compare_config, planned_runs, run_config

# EoH's m1/m2 scaled to the budget over 3 generations: budget 5 leaves no m1/m2 candidate, so no generation
TOO_SMALL = ('[compare]\nmethods = ["sample", "eoh"]\ntasks = ["tsp_construct"]\nbudgets = [100, 5]\nseeds = [0]\n'
             '[test]\nsizes = [50]\nlimit = 8\n[sample]\nbatch = 4\n[eoh]\nm_multiplier = 0\ngenerations = 3\n')
# the default EoH (10 initial candidates) at budget 5: the run does its initial population only
WITHIN_INIT = ('[compare]\nmethods = ["sample", "eoh"]\ntasks = ["tsp_construct"]\nbudgets = [5]\nseeds = [0]\n'
               '[test]\nsizes = [50]\nlimit = 8\n[sample]\nbatch = 4\n')


def _files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def _no_engine(monkeypatch) -> None:
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: pytest.fail("a refused comparison started its engine"))


def _refused(capsys, args: list[str]) -> str:
    """`coevolve ARGS`: exit 2, one stderr line without a traceback, nothing on stdout; the line."""
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, (code, captured.out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert captured.out == "", captured.out
    return err


# ------------------------------------------------------------ an EoH budget too small for a generation
def test_a_budget_the_run_refuses_is_refused_by_the_plan_before_it_prints_a_line(tmp_path, capsys, monkeypatch):
    """budgets [100, 5] with eoh.m_multiplier = 0: the comparison refuses budget 5 (no m1/m2 candidate
    in any generation) before anything is written; --plan refused it only after printing the plans of
    budget 100. Now both refuse with the one line, nothing printed or written."""
    _no_engine(monkeypatch)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(TOO_SMALL)
    before = _files(tmp_path)
    planned = _refused(capsys, ["compare", str(path), "--plan"])
    assert planned == ("coevolve compare: error: config error: eoh.m_multiplier = 0 scales m1/m2 to the budget, but "
                       "budget 5 leaves no m1/m2 candidates over 3 generations of 20 e1/e2 candidates; raise the "
                       "budget or set eoh.m_multiplier (arm eoh)")
    assert _refused(capsys, ["compare", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == planned
    assert _files(tmp_path) == before  # nothing written, neither --out nor runs/compare-<time>


def test_the_plan_prints_the_warnings_the_comparison_logs_before_it_runs(tmp_path, capsys, monkeypatch):
    """An EoH budget within its initial population is run (no candidate builds on another) with a warning
    logged before the first run; --plan prints the same lines, from the same plans."""
    from search_fakes import FakeEngine

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the comparison's first write: every warning has been logged by now
        raise Stop

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(WITHIN_INIT)
    assert main(["compare", str(path), "--plan"]) == 0
    # in the arm's plan, where the comparison's log names the task and arm
    planned = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("warning: ")]

    logged: list[str] = []
    monkeypatch.setattr(compare_module, "begin", stop)
    with pytest.raises(Stop):
        compare_module.run_comparison(compare_module.load_compare_config(path), tmp_path / "out",
                                      engine=FakeEngine(), log=logged.append)
    warnings = [line for line in logged if line.startswith("warning: ")]
    assert warnings == ["warning: tsp_construct eoh: every step in run.budget = 5 writes from the template alone: no "
                        "candidate builds on another (the first step that does would need run.budget >= 11)"]
    assert planned == [w.replace("tsp_construct eoh: ", "") for w in warnings]


# ------------------------------------------------------------ an output folder with a file in its way
@pytest.mark.parametrize("out, blocker", [("taken", "taken"), ("taken/sub", "taken")])
@pytest.mark.parametrize("where", ["--out", "compare.out"])
def test_an_out_with_a_file_in_its_way_is_refused_first_by_the_plan_and_the_run(tmp_path, capsys, monkeypatch,
                                                                                 out, blocker, where):
    """--out (or compare.out) naming a regular file, or a folder under one: --plan accepted it and the
    comparison refused it only when it made the folder, after every other check; now both refuse it
    first, with one line naming the path and the file in the way. Nothing written, the file kept."""
    from coevolve.commands import compare as command

    _no_engine(monkeypatch)
    monkeypatch.setattr(command, "check_tasks", lambda *a, **k: pytest.fail("checked the tasks before the folder"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("a file\n")
    path = tmp_path / "c.toml"
    path.write_text(WITHIN_INIT.replace("seeds = [0]\n", f'seeds = [0]\nout = "{out}"\n') if where == "compare.out"
                    else WITHIN_INIT)
    flags = ["--out", out] if where == "--out" else []
    before = _files(tmp_path)
    expected = (f"coevolve compare: error: the comparison directory (compare.out, --out): cannot make the directory "
                f"{out}: a file is in the way ({blocker})")
    assert _refused(capsys, ["compare", str(path), "--plan", *flags]) == expected
    assert _refused(capsys, ["compare", str(path), "--no-progress", *flags]) == expected
    assert _files(tmp_path) == before and (tmp_path / "taken").read_text() == "a file\n"


def test_an_existing_folder_or_a_new_one_passes_the_out_check(tmp_path):
    from coevolve.compare import check_root

    (tmp_path / "there").mkdir()
    for out in (tmp_path / "there", tmp_path / "there" / "new" / "deeper", tmp_path / "new"):
        check_root(out)
    assert _files(tmp_path) == {tmp_path / "there"}  # the check makes nothing


# ------------------------------------------------------------ each run config built once, read once
def test_the_plan_builds_each_arms_run_config_once(tmp_path, capsys, monkeypatch):
    """--plan checks every arm against its task, checks the model each run loads and plans each arm at
    each budget: one run config per arm, task and budget serves all three."""
    built: list[tuple] = []

    def counted(config, spec, directory):
        built.append((spec.task, spec.method, spec.budget))  # any seed: a plan is the same for every seed
        return run_config(config, spec, directory)

    monkeypatch.setattr(plan_module, "run_config", counted)
    path = tmp_path / "c.toml"
    path.write_text(WITHIN_INIT.replace("budgets = [5]", "budgets = [5, 12]").replace("seeds = [0]", "seeds = [3, 4]"))
    assert main(["compare", str(path), "--plan"]) == 0, capsys.readouterr().err
    assert len(built) == len(set(built)) == 4, built  # 2 arms x 2 budgets, each once


def test_a_rerun_reads_each_runs_config_toml_once(tmp_path, monkeypatch):
    """The comparison reads a run's config.toml when it checks that the run's settings are the
    comparison's, and runs (here: skips, as finished) under what it read: once per run."""
    config = compare_config({"compare": {"methods": ["sample", "eoh"], "tasks": ["tsp_construct"], "budgets": [5],
                                         "seeds": [0]}, "sample": {"batch": 4}})
    root = tmp_path / "cmp"
    for spec in planned_runs(config):
        directory = spec.directory(root)
        directory.mkdir(parents=True)
        (directory / "config.toml").write_text(dump_toml(as_dict(run_config(config, spec, directory))))
        (directory / "events.jsonl").write_text('{"type": "start"}\n{"type": "end"}\n')
        (directory / "summary.json").write_text("{}")
    read: list[Path] = []
    real = compare_module.read_toml

    def counted(path):
        read.append(Path(path))
        return real(path)

    monkeypatch.setattr(compare_module, "read_toml", counted)
    monkeypatch.setattr(compare_module, "score_comparison", lambda *a, **k: None)  # scoring is not what is counted
    lines: list[str] = []
    compare_module.run_comparison(config, root, engine=object(), log=lines.append)
    assert sum("finished earlier, skipped" in line for line in lines) == 2
    configs = [p for p in read if p.name == "config.toml"]
    assert sorted(configs) == sorted(RunSpec("tsp_construct", m, 5, 0).directory(root) / "config.toml"
                                     for m in ("sample", "eoh"))


UNMATCHED = ('[compare]\nmethods = ["sample", "sample+esopt"]\ntasks = ["tsp_construct"]\nbudgets = [40]\n'
             'seeds = [0]\n[es]\npopulation = 4\n')


def test_a_plan_the_comparison_refuses_as_unmatched_exits_2_after_showing_why(tmp_path, capsys, monkeypatch):
    """--plan of structurally unmatched arms printed "NOT matched" and exited 0, while the comparison
    refuses them: a script gating on the plan passed. It now shows the plans and differences, then
    refuses with the comparison's line; --allow-unmatched plans them (exit 0)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.toml"
    path.write_text(UNMATCHED)
    assert main(["compare", str(path), "--plan"]) == 2
    captured = capsys.readouterr()
    assert "structural check: NOT matched\n  tsp_construct budget 40: sample and sample+esopt differ" in captured.out
    assert "error: the +ESOpt arms are not structurally matched to their base methods" in captured.err
    assert main(["compare", str(path), "--plan", "--allow-unmatched"]) == 0
    assert "structural check: NOT matched (allowed)" in capsys.readouterr().out


# ------------------------------------------------------------ what the plan says of every arm
def test_the_plan_gives_sigmas_schedule_only_when_an_arm_uses_es(tmp_path, capsys, monkeypatch):
    """Sample vs EoH: no arm perturbs weights, so no `sigma:` (it printed `sigma: cosine 0.001 -> 0.0001,
    one step per update` all the same); with an +ESOpt arm, the schedule it follows."""
    _no_engine(monkeypatch)
    path = tmp_path / "c.toml"
    path.write_text(WITHIN_INIT.replace("budgets = [5]", "budgets = [12]"))
    assert main(["compare", str(path), "--plan"]) == 0
    shared = next(line for line in capsys.readouterr().out.splitlines() if "free re-asks" in line)
    assert shared.startswith("free re-asks: ") and "sigma" not in shared, shared
    path.write_text(WITHIN_INIT.replace("budgets = [5]", "budgets = [12]").replace('"eoh"]', '"sample+esopt"]'))
    assert main(["compare", str(path), "--plan"]) == 0
    shared = next(line for line in capsys.readouterr().out.splitlines() if "free re-asks" in line)
    assert shared.startswith("sigma: cosine ") and "one step per " in shared, shared


# ------------------------------------------------------------ the engine the arms share
def test_a_comparisons_plan_shows_the_engine_it_would_load_and_an_unreachable_ray_address(tmp_path, capsys,
                                                                                          monkeypatch):
    """As `coevolve run --plan` does (tests/test_run_cli_nits.py): the one engine the arms share, from the
    comparison's [distributed], and a warning for a ray:// address that takes no TCP connection, before
    any engine or Ray loads; a heuristic and an agent comparison alike."""
    from conftest_server import free_port

    _no_engine(monkeypatch)
    port = free_port()  # nothing listens there
    address = f'[distributed]\naddress = "ray://127.0.0.1:{port}"\n'
    agent = (Path(__file__).parent.parent / "examples" / "agents_compare.toml").read_text()
    for kind, text in {"heuristic": WITHIN_INIT + address, "agent": agent + address}.items():
        path = tmp_path / f"{kind}.toml"
        path.write_text(text)
        capsys.readouterr()
        assert main(["compare", str(path), "--plan"]) == 0, kind
        lines = capsys.readouterr().out.splitlines()
        assert (f"engine: 1 vLLM engine as Ray actors on the Ray cluster at ray://127.0.0.1:{port}; "
                "tensor_parallel_size 1 each; device: the cluster's GPUs where it has them, else one CPU process "
                "per engine") in lines, (kind, lines)
        assert any(line.startswith(f"warning: distributed.address ray://127.0.0.1:{port} is unreachable: a TCP "
                                   f"connect to 127.0.0.1:{port} failed") for line in lines), (kind, lines)
