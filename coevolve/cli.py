"""`coevolve` command line. Each subcommand lives in coevolve/commands/<name>.py
(dashes as underscores: check-task -> check_task.py) and exposes
`register(subparsers)`; the handler it sets returns an exit code."""

from __future__ import annotations

import argparse
import importlib
import sys

from coevolve.base.errors import UsageError

COMMANDS = ["run", "eval", "tasks", "check-task", "new-task", "models", "compare", "report", "distill", "dashboard", "mirror"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coevolve", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"coevolve.commands.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UsageError as exc:  # CorruptFileError and ConfigError included
        print(f"coevolve {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
