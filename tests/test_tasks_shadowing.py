"""A project folder with its own tasks.py (invoke's convention) or tasks/ folder
does not stand in for coevolve's `tasks` package: `python -m coevolve` (which
puts the working directory first on sys.path) and the console script (whose
sandbox workers were started with `-m` from that folder) check a scaffolded
task and score candidates in the real sandbox, from real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coevolve.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = Path(sys.executable).with_name("coevolve")

# The user's own `tasks`, in the three shapes Python imports: a module, a package,
# and a folder without __init__.py (a namespace package); the folders hold a
# base.py, as an invoke collection may, which the scaffold's `from tasks.base import` would reach.
SHADOWS = {
    "module": {"tasks.py": "def build():\n    pass\n"},
    "package": {"tasks/__init__.py": "", "tasks/base.py": "def build():\n    pass\n"},
    "namespace": {"tasks/base.py": "def build():\n    pass\n"},
}


def project(tmp_path: Path, shadow: str) -> Path:
    """A project folder holding the user's `tasks` and a scaffolded task, mwis/problem.py."""
    folder = tmp_path / "project"
    for name, text in SHADOWS[shadow].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    assert main(["new-task", "mwis", "--dir", str(folder)]) == 0
    return folder


def run(argv: list[str], cwd: Path, pythonpath: bool = True) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = str(ROOT)  # this tree, whatever is installed
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600, env=env)


def installed_tasks(cwd: Path) -> str:
    """The file an interpreter without PYTHONPATH imports `tasks` from (its working directory kept off sys.path)."""
    done = run([sys.executable, "-P", "-c", "import tasks; print(tasks.__file__)"], cwd, pythonpath=False)
    return done.stdout.strip()


def assert_checked(done: subprocess.CompletedProcess, name: str = "mwis") -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sandbox: the template scores" in done.stdout  # the real sandbox's workers started and scored
    assert f"{name}: passed every check" in done.stdout


@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_python_m_coevolve_beside_a_tasks_of_its_own(tmp_path, capsys, shadow):
    folder = project(tmp_path, shadow)
    assert_checked(run([sys.executable, "-m", "coevolve", "check-task", "mwis/problem.py"], folder))


def test_python_m_coevolve_cli_beside_a_tasks_py(tmp_path, capsys):
    folder = project(tmp_path, "module")
    assert_checked(run([sys.executable, "-m", "coevolve.cli", "check-task", "mwis/problem.py"], folder))


@pytest.mark.skipif(not CONSOLE_SCRIPT.is_file(), reason="the console script is not installed beside this Python")
@pytest.mark.parametrize("shadow", sorted(SHADOWS))
def test_console_script_beside_a_tasks_of_its_own(tmp_path, capsys, shadow):
    folder = project(tmp_path, shadow)
    assert_checked(run([str(CONSOLE_SCRIPT), "check-task", "mwis/problem.py"], folder))


def test_an_editable_install_beside_a_tasks_folder_without_init(tmp_path, capsys):
    """A tasks/ folder without __init__.py hides only a `tasks` that no sys.path entry holds: an
    editable install's, found by its finder after every sys.path entry (a regular install's package,
    later on sys.path, wins over the folder; the parametrized tests above run that way)."""
    if installed_tasks(tmp_path) != str(ROOT / "tasks" / "__init__.py"):
        pytest.skip("this tree is not the installed coevolve (an editable install of it)")
    folder = project(tmp_path, "namespace")
    assert_checked(run([sys.executable, "-m", "coevolve", "check-task", "mwis/problem.py"], folder, pythonpath=False))
    if CONSOLE_SCRIPT.is_file():
        assert_checked(run([str(CONSOLE_SCRIPT), "check-task", "mwis/problem.py"], folder, pythonpath=False))


def test_the_working_directory_still_imports_under_python_m(tmp_path, capsys):
    """Only the name `tasks` is settled: a `module:Class` spec for a module in the
    working directory still loads, in the command and in the sandbox's workers."""
    folder = project(tmp_path, "module")
    (folder / "my_balancing.py").write_text((folder / "mwis" / "problem.py").read_text())
    assert_checked(run([sys.executable, "-m", "coevolve", "check-task", "my_balancing:Mwis"], folder))


def test_a_task_file_imports_a_module_next_to_it(tmp_path, capsys):
    """The task file's folder reaches the workers, which start without the working directory."""
    folder = project(tmp_path, "module")
    problem = folder / "mwis" / "problem.py"
    (folder / "mwis" / "machine_count.py").write_text("MACHINES_HERE = 5\n")
    sibling = "\nimport numpy as np\nfrom machine_count import MACHINES_HERE\n"
    problem.write_text(problem.read_text().replace("\nimport numpy as np\n", sibling, 1))
    assert "from machine_count import" in problem.read_text()
    assert_checked(run([sys.executable, "-m", "coevolve", "check-task", "mwis/problem.py"], folder))


SCORE = """
import json, sys
from coevolve.sandbox import Sandbox
from tasks.loader import resolve

task = resolve(sys.argv[1]).build()
last = "def choose_machine(job, loads):\\n    return len(loads) - 1\\n"
with Sandbox(workers=1, timeout_s=60) as sandbox:
    results = sandbox.evaluate_many([(task.template, task, None, None), (last, task, None, None)])
print(json.dumps([[r.objective, r.failure and r.failure.value, r.message[-500:]] for r in results]))
"""


def test_sandbox_workers_start_beside_a_tasks_py(tmp_path, capsys):
    """The Sandbox in a caller whose own sys.path is clean (`-P`): its workers, started
    from the project folder, import coevolve's tasks and score both candidates."""
    folder = project(tmp_path, "module")
    done = run([sys.executable, "-P", "-c", SCORE, "mwis/problem.py"], folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (template, template_failure, _), (last, last_failure, _) = json.loads(done.stdout.splitlines()[-1])
    assert template_failure is None and last_failure is None
    assert 1.0 <= template < last  # every job on one machine: a worse makespan than the template's
