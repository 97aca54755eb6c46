"""`coevolve compare CONFIG.toml [--out DIR]`: run a budget-matched comparison
(methods × tasks × budgets × seeds), score each run's best heuristic on the
test sets and write the report. Rerunning it continues where it stopped."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="budget-matched method comparison with test scores, tables and plots",
                              description=__doc__)
    p.add_argument("config", help="comparison TOML (see examples/compare_*.toml and docs/compare.md)")
    p.add_argument("--out", help="comparison directory (default: compare.out, else runs/compare-<time>)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from coevolve.compare import load_compare_config, run_comparison

    config = load_compare_config(args.config, args.out)
    out = config.compare.out or str(Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    config.compare.out = out
    root = run_comparison(config, out)
    print(f"report: {root / 'report.md'}")
    return 0
