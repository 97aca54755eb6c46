"""The tests two commits share, timed side by side in one run.

"Is the suite slower than at REV?" cannot be answered from two CI times: the
suite gains tests between commits, and these 2-core machines vary by a third
from one hour to the next (the same suite: 1918 s and 2451 s on one machine,
one day apart). This runs only the tests both commits collect (same node id,
the same marker selection), in pytest processes that alternate between the two
trees (base, head, head, base, ...), so drift over the run falls on both sides
alike, and prints each pass's seconds and the ratio of the medians.

    python benchmarks/suite_side_by_side.py --base 2ee4c3c~1
    python benchmarks/suite_side_by_side.py --base REV --marker engine --rounds 1 tests/test_run_e2e.py

The base tree is a detached `git worktree` of REV in a temporary folder (removed
at the end); both trees run with this interpreter and its packages, each tree
first on PYTHONPATH. A test that fails on one side only is listed: a ratio is
only worth reading when both sides passed the same tests. Run it alone on the
machine (engine tests under the machine-wide lock, as every benchmark here).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pytest(tree: Path, *args: str, timeout: float = 7200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=timeout)


def collected(tree: Path, marker: str, paths: list[str]) -> list[str]:
    done = pytest(tree, "--collect-only", "-q", "-m", marker, *paths)
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    if not ids:
        sys.exit(f"no tests collected in {tree}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return ids


def outcome(output: str) -> dict[str, int]:
    """pytest's last summary line as counts: {"passed": 410, "failed": 1, ...}."""
    tail = output.strip().splitlines()[-1] if output.strip() else ""
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", tail)}


def failures(output: str) -> set[str]:
    return set(re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare with (any git revision)")
    parser.add_argument("--marker", default="not engine and not server", help="pytest -m selection, both sides")
    parser.add_argument("--rounds", type=int, default=2, help="passes per side; sides alternate")
    parser.add_argument("paths", nargs="*", help="test files or folders to collect from (default: all)")
    options = parser.parse_args()
    # a stopped benchmark still removes its worktree
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))

    with tempfile.TemporaryDirectory(prefix="side-by-side-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(base), options.base], cwd=ROOT,
                       check=True)
        try:
            # in the head's collection order: a module's tests may depend on the ones before them
            # (test_distributed.py's pool loses an engine in one test), and sorted ids reorder them
            in_base = set(collected(base, options.marker, options.paths))
            shared = [test for test in collected(ROOT, options.marker, options.paths) if test in in_base]
            ids_file = Path(scratch) / "ids.txt"
            ids_file.write_text("\n".join(shared) + "\n")
            print(f"{len(shared)} tests collected by both {options.base} and the head (-m {options.marker!r})",
                  flush=True)
            seconds: dict[str, list[float]] = {"base": [], "head": []}
            failed: dict[str, set[str]] = {"base": set(), "head": set()}
            order = [side for r in range(options.rounds) for side in (("base", "head") if r % 2 == 0
                                                                      else ("head", "base"))]
            for i, side in enumerate(order, 1):
                tree = base if side == "base" else ROOT
                start = time.perf_counter()
                done = pytest(tree, "-q", "-rfE", f"@{ids_file}")
                seconds[side].append(time.perf_counter() - start)
                failed[side] |= failures(done.stdout)
                print(f"pass {i}: {side:4s} {seconds[side][-1]:7.1f} s  {outcome(done.stdout)}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    b, h = statistics.median(seconds["base"]), statistics.median(seconds["head"])
    print(f"median: base {b:.1f} s, head {h:.1f} s, head / base = {h / b:.3f}")
    for side, other in (("base", "head"), ("head", "base")):
        for test in sorted(failed[side] - failed[other]):
            print(f"failed on {side} only: {test}")


if __name__ == "__main__":
    main()
