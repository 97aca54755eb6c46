"""Where a user's task file is found, and what a command says of it (s52 walkthrough, findings 2, 4, 6):
`run --resume DIR --plan` finds a run's task as the resume does (the run's copy when the file is gone), a
gone file read from the copy is said as a changed one is, and a config written for the other kind of run
than its task's says so first.

Real scaffolded tasks (coevolve.commands.new_task.scaffold), the real CLI and sandbox, and the fake engine
where a run must happen (tests/search_fakes.py, as tests/test_resume_safety.py uses it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coevolve.cli import main
from coevolve.commands.new_task import scaffold
from coevolve.engine import pool
from search_fakes import FakeEngine
from tasks.loader import clear_cache, copy_notes


class ClosingFakeEngine(FakeEngine):
    """The fake engine where the CLI builds one (pool.build_engine)."""

    def close(self) -> None:
        pass


class TemplateEngine(ClosingFakeEngine):
    """Answers every request with the scaffold's own template (the fake engine's programs define
    `heuristic`, which a scaffolded task refuses): the run has a best, which `report` and `eval --run`
    read the task for."""

    def chat(self, conversations, sampling, seeds=None, constraints=None):
        from coevolve.commands.scaffold.problem import TEMPLATE
        from coevolve.engine.base import Completion

        text = f"```python\n{TEMPLATE}```"
        return [Completion(text=text, prompt_tokens=1, completion_tokens=1) for _ in conversations]


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what ran before
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def gone_run(tmp_path, monkeypatch, capsys) -> tuple[Path, Path, Path]:
    """A finished heuristic run (budget 4) of a scaffolded task, whose task folder is then moved away:
    (the run directory, the task file it names, the run's copy of it)."""
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: TemplateEngine())
    folder = scaffold("mine", tmp_path)
    config = folder / "config.toml"
    config.write_text(config.read_text().replace("budget = 20", "budget = 4").replace("batch = 10", "batch = 2")
                      .replace("population = 5", "population = 2"))
    run = tmp_path / "run"
    code, _, err = cli(capsys, "run", str(config), "--out", str(run), "--no-progress")
    assert code == 0, err
    problem = (folder / "problem.py").resolve()
    (copy,) = (run / "task_files").glob("*.py")
    folder.rename(tmp_path / "moved")
    clear_cache()  # a fresh process: nothing resolved yet
    copy_notes()
    return run, problem, copy


def test_resume_plan_of_a_run_whose_task_file_is_gone_reads_the_runs_copy_as_the_resume_does(gone_run, capsys):
    """`run --resume DIR --budget N --plan` once refused with `run.task: task file not found: ...`, while the
    same resume without --plan ran from the run's copy; both now read the copy and say so."""
    run, problem, copy = gone_run
    note = f"note: task file {problem} is gone; using the run's copy ({copy})"
    code, out, err = cli(capsys, "run", "--resume", str(run), "--budget", "6", "--plan")
    assert code == 0, err
    assert "total: 6 evaluations = T 6" in out, out
    assert err.splitlines() == [note], err
    code, out, err = cli(capsys, "run", "--resume", str(run), "--plan")  # no --budget: the run's own plan
    assert code == 0 and "total: 4 evaluations" in out and err.splitlines() == [note], out + err
    # the resume itself: a finished run is shown, from the copy, with the same note
    code, out, err = cli(capsys, "run", "--resume", str(run))
    assert code == 0 and "has finished: nothing to resume" in out, out + err
    assert err.splitlines() == [note], err


def test_report_and_eval_of_a_run_whose_task_file_is_gone_say_they_read_the_copy(gone_run, capsys):
    """As a changed file's note (`task file X changed since the run; using the run's copy (...)`), a gone
    file's is one line on stderr, said once."""
    run, problem, copy = gone_run
    note = f"note: task file {problem} is gone; using the run's copy ({copy})"
    code, out, err = cli(capsys, "report", str(run))
    assert code == 0 and "report.md" in out, err
    assert err.splitlines() == [note], err
    clear_cache()
    code, out, err = cli(capsys, "eval", "--run", str(run), "--split", "train", "--size", "50")
    assert code == 0, err
    assert note in err.splitlines(), err
    assert copy_notes() == []  # said by the command that read it, not left for a later one


def test_resume_plan_of_a_changed_task_file_is_refused_as_the_resume_is(tmp_path, monkeypatch, capsys):
    """--plan finds the task as the run does: an edited file is refused naming --task-changed (the plan once
    read the edited file without a word), and --task-changed plans with it, writing nothing."""
    monkeypatch.setattr(pool, "build_engine", lambda *a, **k: ClosingFakeEngine())
    folder = scaffold("mine", tmp_path)
    config = folder / "config.toml"
    config.write_text(config.read_text().replace("budget = 20", "budget = 4").replace("batch = 10", "batch = 2")
                      .replace("population = 5", "population = 2"))
    run = tmp_path / "run"
    assert cli(capsys, "run", str(config), "--out", str(run), "--no-progress")[0] == 0
    problem = folder / "problem.py"
    problem.write_text(problem.read_text() + "\n# edited since the run\n")
    clear_cache()
    events = (run / "events.jsonl").read_text()
    code, _, err = cli(capsys, "run", "--resume", str(run), "--budget", "6", "--plan")
    assert code == 2 and f"task file {problem.resolve()} changed since the run started" in err, err
    assert "--task-changed" in err
    code, out, err = cli(capsys, "run", "--resume", str(run), "--budget", "6", "--plan", "--task-changed")
    assert code == 0 and "total: 6 evaluations = T 6" in out, out + err
    assert (run / "events.jsonl").read_text() == events  # --plan logs no task_changed


# -- a config written for the other kind of run -------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tasks(tmp_path) -> tuple[Path, Path]:
    """(the scaffold's problem.py, the scaffold's env.py), each in a folder of its own."""
    return scaffold("mine", tmp_path) / "problem.py", scaffold("game", tmp_path, agent=True) / "env.py"


AGENT_TASK = "is an agent task: its methods are esopt, trace2skill, esopt+trace2skill; this config is for a heuristic search"
HEURISTIC_TASK = ("is a heuristic task: its methods are sample, eoh, islands, map_elites, pareto (each also +esopt, "
                  "+trace2skill) or path/to/method.py; this config is for an agent run")


def test_a_heuristic_config_given_an_agent_task_says_the_kinds_differ(tasks, tmp_path, monkeypatch, capsys):
    """examples/tsp_sample.toml --task env.py once said `sample is not a known section ...; did you mean
    'sampling'?`, and `[run] method = "sample"` with the agent task `run.method must be one of esopt, ...`."""
    _, env = tasks
    monkeypatch.chdir(env.parent)
    code, _, err = cli(capsys, "run", str(ROOT / "examples" / "tsp_sample.toml"), "--task", "env.py", "--plan")
    assert code == 2 and err.strip() == (f"coevolve run: error: config error: run.task env.py {AGENT_TASK} "
                                         "(method sample, [sample], [sandbox])"), err
    minimal = tmp_path / "min.toml"
    minimal.write_text('[run]\nmethod = "sample"\ntask = "game/env.py"\nbudget = 16\n')
    code, _, err = cli(capsys, "run", str(minimal), "--plan")
    assert code == 2 and err.strip() == (f"coevolve run: error: config error: run.task game/env.py {AGENT_TASK} "
                                         "(method sample)"), err
    minimal.write_text('[task]\nname = "game/env.py"\n[sample]\nbatch = 2\n')  # no method: its sections tell
    code, _, err = cli(capsys, "run", str(minimal), "--plan")
    assert code == 2 and err.strip() == (f"coevolve run: error: config error: task.name game/env.py {AGENT_TASK} "
                                         "([sample])"), err


def test_an_agent_config_given_a_heuristic_task_says_the_kinds_differ(tasks, tmp_path, capsys):
    """`method = "esopt"` with a heuristic task once said `... (got 'esopt'); did you mean 'eoh+esopt'?`."""
    problem, env = tasks
    minimal = tmp_path / "min.toml"
    minimal.write_text('[run]\nmethod = "esopt"\ntask = "mine/problem.py"\nbudget = 16\n')
    code, _, err = cli(capsys, "run", str(minimal), "--plan")
    assert code == 2 and err.strip() == (f"coevolve run: error: config error: run.task mine/problem.py "
                                         f"{HEURISTIC_TASK} (method esopt)"), err
    # the agent scaffold's config pointed at the heuristic task by --task
    code, _, err = cli(capsys, "run", str(env.with_name("config.toml")), "--task", str(problem), "--plan")
    assert code == 2 and err.strip() == (f"coevolve run: error: config error: run.task {problem} {HEURISTIC_TASK} "
                                         "(method esopt+trace2skill, [agent])"), err


def test_a_config_of_the_tasks_own_kind_keeps_its_own_errors(tasks, tmp_path, capsys):
    """Nothing is said of kinds when the method is the task's kind's: a misspelt section or method is
    named as before, with its "did you mean"."""
    minimal = tmp_path / "min.toml"
    minimal.write_text('[run]\nmethod = "sample"\ntask = "mine/problem.py"\nbudget = 16\n[sampel]\nbatch = 2\n')
    code, _, err = cli(capsys, "run", str(minimal), "--plan")
    assert code == 2 and "sampel is not a known section" in err and "did you mean 'sample'" in err, err
    minimal.write_text('[run]\nmethod = "esopr"\ntask = "game/env.py"\nbudget = 16\n')
    code, _, err = cli(capsys, "run", str(minimal), "--plan")
    assert code == 2 and "run.method must be one of esopt, trace2skill, esopt+trace2skill" in err, err
    assert "agent task:" not in err
