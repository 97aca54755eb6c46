"""Bad inputs to `coevolve run`, `eval`, `check-task` and `compare` flags (audit items C3, C4, C5, C9, C10,
C11, B2, B6, B8, B11): each is refused through the real CLI with exit status 2 and one stderr line naming
the flag or TOML key, the value and what was expected; no traceback, nothing written. No engine is
loaded: every case stops at --plan, an argument check or a check made before the engine."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coevolve.cli import main
from coevolve.search.methods import format_plan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

HEURISTIC = '[run]\nmethod = "eoh"\ntask = "tsp_construct"\nbudget = 24\n'
AGENT_TAIL = '[agent]\npopulation = 2\nbatch = 2\n'


@pytest.fixture(autouse=True)
def no_engine(monkeypatch, tmp_path):
    """Every case runs in an empty working folder, and building an engine fails the test."""
    import coevolve.engine.vllm_engine as vllm_engine
    from coevolve.engine import pool

    def engine(*args, **kwargs):
        raise AssertionError("an engine was built although the input was bad")

    monkeypatch.setattr(vllm_engine, "Engine", engine)
    monkeypatch.setattr(pool, "build_engine", engine)
    monkeypatch.chdir(tmp_path)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def refused(capsys, argv: list[str], folder: Path | None = None, lines: int = 1) -> str:
    """The error line of `coevolve ARGV`, after checking exit status 2, `lines` stderr lines (the error
    last), no traceback and nothing written under `folder` (the working folder)."""
    folder = folder or Path.cwd()
    before = snapshot(folder)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == lines, err
    assert snapshot(folder) == before, "a refused command wrote files"
    return err.strip().splitlines()[-1]


def write(folder: Path, name: str, text: str | bytes) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


# ------------------------------------------------------------------ C5: the plan of a large budget
def test_format_plan_is_linear_in_the_steps():
    """20,000 generations of one shape fold into one line; the old per-group membership test in a list
    of generations took seconds (quadratic), the one pass milliseconds."""
    steps = [{"index": i, "generation": i, "operator": "i1", "count": 1, "perturbed": False, "directions": 0}
             for i in range(20_000)]
    plan = {"method": "sample", "task": "tsp_construct", "budget": 20_000, "outside_budget": 0, "unit": "batch",
            "steps": steps, "evaluations": 20_000, "es_updates": 0, "directions": []}
    began = time.monotonic()
    text = format_plan(plan)
    assert time.monotonic() - began < 1.0
    assert "batches 0-19999 (20000x): i1 1  [20000 evaluations]" in text


def test_a_large_budget_plans_in_seconds(tmp_path, capsys):
    config = write(tmp_path, "c.toml", HEURISTIC.replace("budget = 24", "budget = 100_000")
                   + '[endpoint]\nbase_url = "http://localhost:1/v1"\nmodel = "m"\n')
    began = time.monotonic()
    assert main(["run", config, "--plan"]) == 0
    assert time.monotonic() - began < 5.0
    assert "total: 100000 evaluations = T 100000" in capsys.readouterr().out


# ------------------------------------------------------------------ C3: eval --run of a damaged run
@pytest.mark.parametrize("text, message", [
    (b"run = 5\n", "config error: run must be a table (got 5)"),
    (b'[run]\ntask = "sudoku"\n[sampling]\nmax_tokens = "x"\n',
     "config error: sampling.max_tokens must be an integer (got 'x')"),
    (b'[run]\ntask = "sudoku"\n# caf\xe9\n', "is not UTF-8 text"),
])
def test_eval_of_a_run_with_a_damaged_config_is_one_line(tmp_path, capsys, text, message):
    run = tmp_path / "run"
    write(run, "skills/mine/SKILL.md", "---\nname: mine\ndescription: d\n---\n# m\n")
    write(run, "config.toml", text)
    for argv in (["eval", "--task", "sudoku", "--run", str(run)], ["eval", "--run", str(run)]):
        line = refused(capsys, argv)
        assert str(run / "config.toml") in line and message in line, line


def test_eval_of_a_run_names_a_run_table_that_is_none_before_its_contents(tmp_path, capsys):
    """A run directory with nothing to evaluate yet, whose config.toml has no [run] table: the config is
    named (it says which task the directory is a run of), not the missing weights."""
    run = tmp_path / "run"
    write(run, "config.toml", "run = 5\n")
    line = refused(capsys, ["eval", "--task", "sudoku", "--run", str(run)])
    assert line == f"coevolve eval: error: {run / 'config.toml'}: config error: run must be a table (got 5)"


# ------------------------------------------------------------------ C4, C9: eval of a heuristic program
def test_eval_refuses_a_memory_limit_below_the_sandboxs(tmp_path, capsys):
    program = write(tmp_path, "prog.py", "def heuristic(*args):\n    return 0\n")
    line = refused(capsys, ["eval", program, "--task", "tsp_construct", "--memory-mb", "0"])
    assert line == "coevolve eval: error: --memory-mb must be >= 16 (megabytes), got 0"


@pytest.mark.parametrize("flags, named", [
    (["--k", "2"], "--k 2"),
    (["--option", "x=1"], "--option x=1"),
    (["--max-tokens", "9", "--free"], "--free, --max-tokens 9"),
])
def test_eval_of_a_heuristic_program_refuses_the_agent_flags(tmp_path, capsys, flags, named):
    program = write(tmp_path, "prog.py", "def heuristic(*args):\n    return 0\n")
    line = refused(capsys, ["eval", program, "--task", "tsp_construct", *flags])
    assert line.startswith(f"coevolve eval: error: {named}: for agent tasks") and "'tsp_construct' is a heuristic" \
        in line, line


def test_eval_of_an_agent_refuses_the_heuristic_flags(capsys):
    line = refused(capsys, ["eval", "--task", "sudoku", "--split", "train"])
    assert line.startswith("coevolve eval: error: --split train: for heuristic tasks"), line


# ------------------------------------------------------------------ C10: numeric flags
@pytest.mark.parametrize("flags, message", [
    (["--max-tokens", "0"], "--max-tokens must be >= 1 (got 0)"),
    (["--max-tokens", "-5"], "--max-tokens must be >= 1 (got -5)"),
    (["--max-tokens", "4096"], "--max-tokens must be < 2048, the engine's context"),
    (["--seed", "-1"], "--seed must be >= 0 (got -1)"),
    (["--k", "0"], "--k must be in 1..32 (got 0)"),
    (["--problems", "0"], "--problems must be >= 1 (got 0)"),
    (["--model", "/nonexistent"], "--model: model directory '/nonexistent' does not exist"),
    (["--model", "/nonexistent "], "--model: model directory '/nonexistent ' does not exist"),  # the blank shows
])
def test_eval_of_an_agent_checks_its_numbers_and_model_before_the_engine(capsys, flags, message):
    line = refused(capsys, ["eval", "--task", "sudoku", "--option", "masked=1", "--problems", "2", *flags])
    assert message in line, line


def test_eval_names_the_runs_model_path_it_cannot_load(tmp_path, capsys):
    run = tmp_path / "run"
    write(run, "skills/mine/SKILL.md", "---\nname: mine\ndescription: d\n---\n# m\n")
    write(run, "config.toml",
          f'[run]\nmethod = "trace2skill"\ntask = "sudoku"\n\n[model]\npath = "{tmp_path / "gone"}"\n')
    line = refused(capsys, ["eval", "--task", "sudoku", "--run", str(run), "--problems", "2"])
    assert f"{run / 'config.toml'}: model.path: model directory {str(tmp_path / 'gone')!r} does not exist" in line, line


@pytest.mark.parametrize("value", ["-5", "nan", "inf", "1e12"])
def test_check_seconds_out_of_range_is_refused(tmp_path, capsys, value):
    config = write(tmp_path, "c.toml", HEURISTIC)
    expected = f"--check-seconds must be a number of seconds in 0..1000000 (0: no limit) (got {float(value):g})"
    assert refused(capsys, ["run", config, "--plan", "--check-seconds", value]).endswith(expected)
    assert refused(capsys, ["compare", str(EXAMPLES / "compare_quick.toml"), "--plan", "--check-seconds",
                            value]).endswith(expected)


def test_stage_seconds_out_of_range_is_refused(capsys):
    line = refused(capsys, ["check-task", "tsp_construct", "--stage-seconds", "-1"])
    assert line == ("coevolve check-task: error: --stage-seconds must be a number of seconds in 0..1000000 "
                    "(0: no limit) (got -1)")


# ------------------------------------------------------------------ C11: --plan refuses what the run refuses
def test_plan_refuses_a_model_the_run_would_refuse(tmp_path, capsys):
    config = write(tmp_path, "c.toml", HEURISTIC)
    line = refused(capsys, ["run", config, "--plan", "--model", "/nonexistent"])
    assert line.endswith("config error: model.path: model directory '/nonexistent' does not exist"), line
    config = write(tmp_path, "d.toml", HEURISTIC + '[model]\npath = "no_model"\n')
    line = refused(capsys, ["run", config, "--plan"])
    assert f"model.path: model directory {str(tmp_path / 'no_model')!r} does not exist" in line, line


def test_plan_of_an_endpoint_run_asks_for_no_checkpoint(tmp_path, capsys):
    """A context-only run whose [endpoint] answers every request loads no model: --plan does not check one."""
    config = write(tmp_path, "c.toml", HEURISTIC + '[model]\npath = "no_model"\n'
                   '[endpoint]\nbase_url = "http://localhost:1/v1"\nmodel = "m"\n')
    assert main(["run", config, "--plan"]) == 0, capsys.readouterr().err


def test_plan_refuses_task_changed_without_resume(tmp_path, capsys):
    config = write(tmp_path, "c.toml", HEURISTIC)
    assert refused(capsys, ["run", config, "--plan", "--task-changed"]) == \
        "coevolve run: error: --task-changed goes with --resume"


# ------------------------------------------------------------------ B2, B6: the task named where it was written
@pytest.mark.parametrize("value, message", [
    ("5", "config error: run.task must be a string (got 5)"),
    ('""', "config error: run.task must not be empty (got '')"),
    ('["x"]', "config error: run.task must be a string (got ['x'])"),
])
def test_an_agent_config_whose_run_task_is_no_name(tmp_path, capsys, value, message):
    config = write(tmp_path, "c.toml", f'[run]\nmethod = "esopt"\ntask = {value}\nbudget = 8\n[task]\nmasked = 1\n'
                   + AGENT_TAIL)
    assert refused(capsys, ["run", config, "--plan"]) == f"coevolve run: error: {message}"


@pytest.mark.parametrize("value, message", [
    ('"sudok"', "config error: task.name: unknown task 'sudok'"),
    ("5", "config error: task.name must be a string (got 5)"),
    ('""', "config error: task.name must not be empty (got '')"),
    ('"missing_env.py"', "config error: task.name: task file not found: missing_env.py (looked in "),
])
def test_a_bad_task_name_is_named_task_name(tmp_path, capsys, value, message):
    config = write(tmp_path, "c.toml", f'[run]\nmethod = "esopt"\nbudget = 8\n[task]\nname = {value}\nmasked = 1\n'
                   + AGENT_TAIL)
    line = refused(capsys, ["run", config, "--plan"])
    assert line.startswith(f"coevolve run: error: {message}"), line
    assert "run.task" not in line, line


# ------------------------------------------------------------------ B11: an agent comparison's first arm
def test_run_of_an_agent_comparison_names_no_base_arm(capsys):
    assert main(["run", str(EXAMPLES / "agents_compare.toml"), "--plan"]) == 0
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert "this is its arm esopt on sudoku" in first and "named arm" not in first, first
    assert captured.out.startswith("plan: esopt on sudoku, budget "), captured.out


# ------------------------------------------------------------------ B8: a method file that is not there
def test_a_missing_method_file_names_the_key_and_folder(tmp_path, capsys):
    config = write(tmp_path, "cfg/c.toml", HEURISTIC.replace('method = "eoh"', 'method = "nomethod.py"'))
    line = refused(capsys, ["run", config, "--plan"])
    assert line == (f"coevolve run: error: config error: run.method: method file not found: nomethod.py "
                    f"(looked in {tmp_path / 'cfg'})")


def test_a_missing_method_file_names_the_flag_and_folder(tmp_path, capsys):
    config = write(tmp_path, "cfg/c.toml", HEURISTIC)
    line = refused(capsys, ["run", config, "--plan", "--method", "nomethod.py"])
    assert line == ("coevolve run: error: --method nomethod.py: method file not found: nomethod.py "
                    f"(looked in {tmp_path})")


# ------------------------------------------------------------------ report on a folder that is no run
def test_report_on_a_task_folder_says_it_is_not_a_run(tmp_path, capsys):
    """`coevolve new-task` writes a config.toml beside the problem: report names the folder as no run,
    not as a run to finish with --resume; a run killed before its summary is still told to resume."""
    assert main(["new-task", "mine", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    line = refused(capsys, ["report", str(tmp_path / "mine")])
    assert line == (f"coevolve report: error: {tmp_path / 'mine'} is not a run directory (no events.jsonl, no "
                    "summary.json): give a run's or a comparison's directory"), line
    (tmp_path / "mine" / "events.jsonl").write_text('{"type": "start"}\n')
    assert "has no summary.json yet: finish it with `coevolve run --resume" in refused(capsys, ["report",
                                                                                             str(tmp_path / "mine")])


@pytest.mark.parametrize("command, text", [("run", ""), ("run", "# to do\n\n"), ("compare", "")])
def test_an_empty_config_is_refused_not_run_on_every_default(tmp_path, capsys, command, text):
    """A 0-byte or comments-only file (saved in the wrong place, never written) planned a 100-evaluation
    eoh+esopt run, or a 48-run comparison; flags alone may still fill an empty run config."""
    path = write(tmp_path, "empty.toml", text)
    line = refused(capsys, [command, path, "--plan"])
    assert line.startswith(f"coevolve {command}: error: config error: {path} holds no settings (empty, or only "
                           "comments): start from examples/"), line
    assert main(["run", path, "--plan", "--task", "tsp_construct", "--method", "sample", "--budget", "4"]) == 0


def test_a_misspelt_flag_is_refused_by_its_command_with_the_flag_it_may_mean(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--budgt", "4", "x.toml"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: coevolve run "), err  # the command's usage, not the top-level one
    assert err[-1] == "coevolve run: error: unrecognized arguments: --budgt x.toml; did you mean '--budget'?", err


def test_tasks_refuses_an_unknown_spec_before_listing_anything(capsys):
    assert main(["tasks", "tsp_constrcut"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("coevolve tasks: error: unknown task 'tsp_constrcut'"), (out, err)
    assert "did you mean 'tsp_construct'" in err and len(err.splitlines()) == 1, err


def test_check_task_of_an_empty_folder_says_it_is_a_folder(tmp_path, capsys):
    (tmp_path / "my_task").mkdir()
    line = refused(capsys, ["check-task", "my_task"])
    assert line.endswith("; my_task is a folder with no task file in it: give the task's .py file"), line


def test_resume_names_the_runs_config_file_it_cannot_read(tmp_path, capsys):
    from coevolve.runstore import RunStore

    run = tmp_path / "run"
    RunStore.create(run, HEURISTIC + "[bogus]\nx = 1\n").close()
    line = refused(capsys, ["run", "--resume", str(run)])
    assert line.startswith(f"coevolve run: error: {run / 'config.toml'}: config error: bogus is not a known "
                           "section"), line
