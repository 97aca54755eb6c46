"""`coevolve report DIR`: rebuild the tables and plots of a comparison or of
one run from the files in DIR, without running or scoring anything. A task
or method file edited since the run is read from the run's copy, with a note
on stderr."""

from __future__ import annotations

import argparse
import sys

from coevolve.report import render
from tasks.loader import copy_notes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="re-render a comparison's or a run's report from its files",
                              description=__doc__)
    p.add_argument("directory", help="a comparison directory (with compare.toml) or a run directory")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    written = render(args.directory)
    for note in copy_notes():  # read as the run used them, not as edited since
        print(f"note: {note}", file=sys.stderr)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0
