"""`coevolve report DIR`: rebuild the tables and plots of a comparison or of
one run from the files in DIR, without running or scoring anything. A task
or method file edited since the run is read from the run's copy, with a note
on stderr."""

from __future__ import annotations

import argparse
import sys

from coevolve.base.durable import FULL, refused_write
from coevolve.report import render
from tasks.loader import copy_notes


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="re-render a comparison's or a run's report from its files",
                              description=__doc__)
    p.add_argument("directory", help="a comparison directory (with compare.toml) or a run directory")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        written = render(args.directory)
    except OSError as exc:
        line = refused_write(exc)
        if line is None:
            raise  # a bug's: its traceback
        # report writes its files (report.md, plots) into the directory and has no other place to write
        # them: a read-only run (a colleague's, an archive) is reported from a copy
        more = "" if exc.errno in FULL else (f"; report writes its files into {args.directory}: report a copy of "
                                              "it in a writable place")
        print(f"coevolve report: error: {line}{more}", file=sys.stderr)
        return 1
    for note in copy_notes():  # read as the run used them, not as edited since
        print(f"note: {note}", file=sys.stderr)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0
