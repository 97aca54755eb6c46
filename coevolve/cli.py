"""coevolve: improve an LLM agent's context (evolved heuristics, prompts,
skills) and its weights (Agentic ESOpt) under one evaluation budget."""

# Each subcommand lives in coevolve/commands/<name>.py (dashes as underscores:
# check-task -> check_task.py) and exposes `register(subparsers)`; the handler
# it sets returns an exit code.

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

from coevolve.base.durable import refused_write
from coevolve.base.errors import UsageError, did_you_mean


def _own_tasks_package() -> None:
    """Import coevolve's own `tasks` package (the one next to `coevolve`) when
    sys.path would find another first: `python -m coevolve` puts the working
    directory first, where a project's tasks.py (invoke's convention) or
    tasks/ folder would stand in for it and every command fail. Only the name
    `tasks` is settled; sys.path keeps the working directory, so the user's
    other modules there still import (a `module:Class` task spec)."""
    if "tasks" in sys.modules:
        return
    ours = Path(__file__).resolve().parents[1] / "tasks" / "__init__.py"
    found = importlib.util.find_spec("tasks")
    if not ours.is_file() or (found is not None and found.origin and Path(found.origin).resolve() == ours):
        return
    spec = importlib.util.spec_from_file_location("tasks", ours)  # an __init__.py: a package, its folder its path
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tasks"] = module
    spec.loader.exec_module(module)


_own_tasks_package()  # before the first `tasks` import below

from tasks.loader import TaskExited, exited  # noqa: E402

START = """start here:
  coevolve run examples/tsp_eoh_esopt.toml     a small TSP co-evolution on the embedded model
  coevolve new-task my_problem                 your own problem as a file (docs/own_problem.md)
  coevolve compare examples/compare_quick.toml a budget-matched comparison with tables and plots
  coevolve dashboard                           watch runs/ in the browser
  coevolve COMMAND --help                      each command's options"""

COMMANDS = ["run", "eval", "tasks", "check-task", "check-method", "new-task", "models", "compare", "report", "distill", "dashboard", "mirror"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coevolve", description=__doc__, epilog=START,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"coevolve.commands.{name.replace('-', '_')}").register(sub)
    parser.set_defaults(command_parsers=sub.choices)  # each command's own parser, by name (main's refusals)
    return parser


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a `kill` (a scheduler's preemption) stops a run as Ctrl-C does: the resume line


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the command's own parser: its usage, and the option it may mean
        command = args.command_parsers[args.command]
        options = [o for action in command._actions for o in action.option_strings if o.startswith("--")]
        hint = did_you_mean(extra[0].split("=")[0], options) if extra[0].startswith("--") else ""
        command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None
    try:
        return int(args.handler(args) or 0)
    except UsageError as exc:  # CorruptFileError and ConfigError included
        print(f"coevolve {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except TaskExited as exc:
        # the user's task, run here (guarded at the call, which named it), tried to end the process: one
        # line and the status of a user error, as for a task that raised (a run's finished steps are kept)
        print(f"coevolve {args.command}: error: {exited(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader left (`coevolve tasks | head`): no traceback, and no second error when Python
        # flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # durable: /dev/null, not a file
        return 141
    except OSError as exc:
        # a full or read-only file system (or a folder not the user's to write) is the machine's state, not
        # a bug: one line naming the file. Any other OSError keeps its traceback, a bug's report.
        line = refused_write(exc)
        if line is None:
            raise
        print(f"coevolve {args.command}: error: {line}", file=sys.stderr)
        return 1
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
