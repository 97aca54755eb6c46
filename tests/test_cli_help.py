"""What `coevolve --help` and each command's --help show a user, and how the
command line ends when its reader goes away."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from coevolve.cli import build_parser

# a dotted module path (coevolve.agents.runconfig, tasks.registry.AGENT_TASKS) is for developers
MODULE_PATH = re.compile(r"\b(coevolve|tasks)\.[a-z_]+\.[A-Za-z_]+")


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser by its command line, nested subcommands (models prepare) included."""
    found, queue = {}, [("coevolve", build_parser())]
    while queue:
        name, parser = queue.pop()
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                queue += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return found


def test_every_command_is_described_for_users():
    found = parsers()
    assert {"coevolve run", "coevolve models prepare", "coevolve check-task"} <= set(found)
    for name, parser in found.items():
        if name.count(" ") == 2:  # `models prepare`: its one-line help is its description
            continue
        assert parser.description, f"{name} --help has no description"
        assert not MODULE_PATH.search(parser.description), (name, MODULE_PATH.search(parser.description)[0])


def test_every_option_says_what_it_does():
    missing = [f"{name} {action.option_strings[0]}" for name, parser in parsers().items()
               for action in parser._actions
               if action.option_strings and action.help is None and not isinstance(action, argparse._HelpAction)]
    assert missing == []


def test_run_help_names_every_built_in_method():
    from coevolve.search.methods import BUILTIN

    text = " ".join(parsers()["coevolve run"].format_help().split())
    assert f"heuristic tasks: {' | '.join(BUILTIN)} |" in text and "pareto" in text


def test_top_level_help_says_where_to_start():
    text = build_parser().format_help()
    assert "coevolve run examples/tsp_eoh_esopt.toml" in text and "coevolve COMMAND --help" in text
    assert "register(subparsers)" not in text  # the developer's note stays in the source


def test_tasks_help_says_what_specs_do_one_way():
    """`coevolve tasks SPEC` lists every task and then the SPECs (tests/test_sandbox_cli.py); its
    description and its argument's help say that, not "those tasks" only."""
    parser = parsers()["coevolve tasks"]
    description = " ".join(parser.description.split())
    (specs,) = [action for action in parser._actions if action.dest == "specs"]
    assert "every built-in and installed plugin task" in description
    assert "are described too, after them" in description and "those tasks" not in description
    assert specs.help == "a file or module task to describe too, after the built-in and plugin ones"


def test_a_closed_pipe_ends_quietly():
    """`coevolve tasks | head -1`: the reader has left before the listing is written; no traceback,
    exit 141 as a shell reports a command its pipe's reader left."""
    child = subprocess.Popen([sys.executable, "-m", "coevolve.cli", "tasks"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()  # before the child has imported anything: its first write finds no reader
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
