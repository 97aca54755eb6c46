"""`coevolve new-task NAME [--dir DIR]`: write a working, commented starting
point for your own problem: DIR/NAME/problem.py (the task: description,
function name and signature, template, seeded instance sets per split,
decide, score, instance_seconds, a computed reference), config.toml (a small
`coevolve run` of it) and test_problem.py (pytest: the task passes
`coevolve check-task`). Unchanged, it passes check-task and runs; then
replace the placeholder problem with yours (docs/own_problem.md)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from coevolve.base.durable import atomic_write_text, make_directory
from coevolve.base.errors import UsageError

CONFIG = '''# A small run of {name}: `coevolve run config.toml` (from any folder: the task
# path below is relative to this file). Raise run.budget for a real search.
[run]
method = "sample"
task = "problem.py"
budget = 20
seed = 0

[sampling]
temperature = 0.7
max_tokens = 384

[sample]
batch = 10
population = 5

[sandbox]
timeout_s = 30

# Stop early when the best train objective is good enough, or when that many
# steps found nothing better (docs/search.md, "Caps"):
# [caps]
# target = 1.02
# patience = 4

# What you know about the problem, shown in every prompt: a folder holding a
# SKILL.md of "- rule" bullets (docs/own_problem.md; `coevolve distill` writes one
# from a finished run):
# [skill]
# start = "hints"
'''

TEST = '''"""{name} passes `coevolve check-task` (run: pytest test_problem.py)."""

from pathlib import Path

from coevolve.cli import main


def test_problem_passes_check_task():
    assert main(["check-task", str(Path(__file__).with_name("problem.py"))]) == 0
'''


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("new-task", help="write a starting point for your own problem "
                                               "(problem.py, config.toml, test_problem.py)", description=__doc__)
    p.add_argument("name", help="task name: lowercase letters, digits and underscores, e.g. my_problem")
    p.add_argument("--dir", default=".", help="parent folder (default: the working directory); "
                                              "the files go to DIR/NAME/")
    p.set_defaults(handler=handle)


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) or "Task"


def scaffold(name: str, parent: str | Path) -> Path:
    """Write the three files into parent/name; refuses an existing folder that is not empty."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UsageError(f"task name {name!r}: use lowercase letters, digits and underscores, starting with a letter")
    folder = Path(parent) / name
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} already exists and is not empty; choose another name or --dir")
    source = (Path(__file__).with_name("scaffold") / "problem.py").read_text(encoding="utf-8")
    problem = source.replace("__NAME__", name).replace("__CLASS__", class_name(name))
    make_directory(folder, "new-task --dir")
    atomic_write_text(folder / "problem.py", problem)
    atomic_write_text(folder / "config.toml", CONFIG.format(name=name))
    atomic_write_text(folder / "test_problem.py", TEST.format(name=name))
    return folder


def handle(args: argparse.Namespace) -> int:
    folder = scaffold(args.name, args.dir)
    print(f"wrote {folder}/problem.py, config.toml, test_problem.py\n"
          f"next: coevolve check-task {folder}/problem.py   then   coevolve run {folder}/config.toml")
    return 0
