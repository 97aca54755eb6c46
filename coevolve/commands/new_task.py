"""`coevolve new-task NAME [--dir DIR]`: write a working, commented starting
point for your own problem: DIR/NAME/problem.py (the task: description,
function name and signature, template, seeded instance sets per split,
decide, score, instance_seconds, a computed reference), config.toml (a small
`coevolve run` of it) and test_problem.py (pytest: the task passes
`coevolve check-task`). Unchanged, it passes check-task and runs; then
replace the placeholder problem with yours (docs/own_problem.md).
`--agent`: a multi-turn environment for an agent run instead: DIR/NAME/env.py
(cases, reset, step, reward, metrics, an action pattern), config.toml (a small
ES + Trace2Skill run of it) and test_env.py."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from coevolve.base.durable import atomic_write_text, make_directory
from coevolve.base.errors import UsageError

CONFIG = '''# A small run of {name}: `coevolve run config.toml` (from any folder: the task
# path below is relative to this file). Raise run.budget for a real search.
[run]
# or "eoh", "islands", "map_elites", "pareto", a method file (docs/search.md);
# "+esopt" co-evolves the model's weights too ("eoh+esopt": raise run.budget
# until `coevolve run config.toml --plan` shows ES updates)
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

# Programs of equal objective told apart, in order (docs/search.md, "Equal
# objectives"): "min lines" keeps the shorter; "min seconds" the faster; "max X"
# or "min X" a decision descriptor X your task declares (decision_descriptors):
# [eoh]
# tie_break = ["min lines"]

# What you know about the problem, shown in every prompt: a folder holding a
# SKILL.md of "- rule" bullets (docs/own_problem.md; `coevolve distill` writes one
# from a finished run):
# [skill]
# start = "hints"
'''

AGENT_CONFIG = '''# A small agent run on {name}: `coevolve run config.toml` (from any folder: the
# task and skill paths below are relative to this file). Raise run.budget for
# a real run.
[run]
method = "esopt+trace2skill"   # or "esopt" (weights only), "trace2skill" (skills only)
task = "env.py"
budget = 32   # training episodes: 2 rounds of agent.population x agent.batch
seed = 0

[task]   # the environment's constructor keywords
extra_turns = 1

[agent]
population = 4        # ES members per generation
batch = 4             # training cases per member
eval_cases = 8        # held-out cases, scored before training and after each round
distill = "online"    # a skill distilled from the episodes during the run (default: once at the end)
skill_every = 1
skill_name = "{skill}-hints"
shaping = 0.5         # fitness = reward + 0.5 x metrics["progress"]

[sampling]   # training episodes; held-out ones decode greedily (agent.eval_temperature)
temperature = 1.0
max_tokens = 8

[es]
sigma = 3e-3
sigma_end = 1e-3
alpha = 1.5e-3

# What you know about the environment, in the system prompt from the first
# episode: folders each holding a SKILL.md, relative to this file (docs/agents.md;
# a finished run's distilled skill is one, in RUN_DIR/skills/):
# [skills]
# paths = ["hints"]
'''

AGENT_TEST = '''"""{name} passes `coevolve check-task` (run: pytest test_env.py)."""

from pathlib import Path

from coevolve.cli import main


def test_environment_passes_check_task():
    assert main(["check-task", str(Path(__file__).with_name("env.py"))]) == 0
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
    p.add_argument("--agent", action="store_true", help="a multi-turn environment for an agent run instead "
                                                         "(env.py, config.toml, test_env.py)")
    p.set_defaults(handler=handle)


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) or "Task"


# what each kind writes: (scaffold source, task file, config, test file, test)
KINDS = {"heuristic": ("problem.py", "problem.py", CONFIG, "test_problem.py", TEST),
         "agent": ("environment.py", "env.py", AGENT_CONFIG, "test_env.py", AGENT_TEST)}


def scaffold(name: str, parent: str | Path, agent: bool = False) -> Path:
    """Write the three files into parent/name; refuses an existing folder that is not empty."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UsageError(f"task name {name!r}: use lowercase letters, digits and underscores, starting with a letter")
    folder = Path(parent) / name
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"{folder} already exists and is not empty; choose another name or --dir")
    source, task_file, config, test_file, test = KINDS["agent" if agent else "heuristic"]
    text = (Path(__file__).with_name("scaffold") / source).read_text(encoding="utf-8")
    make_directory(folder, "new-task --dir")
    atomic_write_text(folder / task_file, text.replace("__NAME__", name).replace("__CLASS__", class_name(name)))
    # a skill's name takes hyphens where a task name has underscores (the Agent Skills format)
    atomic_write_text(folder / "config.toml", config.format(name=name, skill=name.replace("_", "-")))
    atomic_write_text(folder / test_file, test.format(name=name))
    return folder


def handle(args: argparse.Namespace) -> int:
    folder = scaffold(args.name, args.dir, args.agent)
    _, task_file, _, test_file, _ = KINDS["agent" if args.agent else "heuristic"]
    print(f"wrote {folder}/{task_file}, config.toml, {test_file}\n"
          f"next: coevolve check-task {folder}/{task_file}   then   coevolve run {folder}/config.toml")
    return 0
