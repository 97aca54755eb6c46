"""`coevolve dashboard [DIR ...]`: watch runs and comparisons in a browser.

A local, read-only web app over run directories (heuristic or agent),
comparison directories and folders holding them (default: runs/). Pages
follow runs while they are written. Loopback only by default; to look from
another machine, forward the port over SSH (docs/dashboard.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coevolve.base.errors import UsageError
from coevolve.dashboard.app import serve
from coevolve.dashboard.reader import Registry


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dashboard", help="watch runs and comparisons live in the browser (read-only)",
                              description=__doc__)
    p.add_argument("directories", nargs="*", metavar="DIR",
                   help="run, comparison or a folder of them (default: runs)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between the page's updates (default 2)")
    p.add_argument("--stale-after", type=float, default=600.0,
                   help="an unfinished run without a writer lock file (written before runs had one) not "
                        "written for this many seconds shows as stopped (default 600); one with a lock file is "
                        "running while its writer holds it, stopped at once after")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, got {args.port}")
    if args.refresh <= 0 or args.stale_after <= 0:
        raise UsageError("--refresh and --stale-after must be positive")
    if not args.directories and not Path("runs").is_dir():
        raise UsageError(f"no runs/ folder in {Path.cwd()} (where runs go by default): start one (`coevolve run "
                         "examples/tsp_eoh_esopt.toml`), or give the run, comparison or folder of runs to watch")
    registry = Registry.open(args.directories or ["runs"], stale_after=args.stale_after)
    serve(registry, args.host, args.port, args.refresh, announce=lambda line: print(line, flush=True))
    print("coevolve dashboard: stopped", file=sys.stderr)
    return 0
