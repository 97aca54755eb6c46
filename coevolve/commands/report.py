"""`coevolve report DIR`: rebuild the tables and plots of a comparison or of
one run from the files in DIR, without running or scoring anything."""

from __future__ import annotations

import argparse

from coevolve.report import render


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="re-render a comparison's or a run's report from its files",
                              description=__doc__)
    p.add_argument("directory", help="a comparison directory (with compare.toml) or a run directory")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    for name, path in render(args.directory).items():
        print(f"{name}: {path}")
    return 0
