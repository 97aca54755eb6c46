"""What the benchmarks over heuristic-search runs share (proposal_efficiency.py,
search_efficiency.py): their common options, the run directories (a finished
one read back, an unfinished one resumed), the machine-wide lock taken per
run, --stop-at, and the markdown table they print.

The cells run seeds outermost (every task and arm of seed 0, then seed 1, ...),
so a benchmark stopped early leaves balanced partial results. One engine and
one sandbox serve every run; the lock (fcntl, the one `flock(1)` takes) is held
while the engine loads and during each cell's work and released in between, so
other engine jobs interleave between runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from coevolve.base.records import SearchSummary, read_summary


class Cell(NamedTuple):
    task: str
    arm: str  # the arm or method compared
    seed: int
    directory: Path  # the run directory


def make_parser(doc: str | None, tasks: list[str], out: str, flag: str, choices: list[str]) -> argparse.ArgumentParser:
    """A search benchmark's parser: the shared options, and its arms (`flag`, e.g. --methods)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(parser, tasks, out)
    parser.add_argument(flag, nargs="+", default=list(choices), choices=list(choices))
    return parser


def add_options(parser: argparse.ArgumentParser, tasks: list[str], out: str) -> None:
    """The options every search benchmark takes (the caller adds its arms)."""
    parser.add_argument("--tasks", nargs="+", default=tasks)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=96)
    parser.add_argument("--population", type=int, default=6, help="EoH population and offspring per operator")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--out", default=out)
    parser.add_argument("--model", default="", help="HF checkpoint (default: the embedded model)")
    parser.add_argument("--analyse-only", action="store_true",
                        help="start no engine: tabulate the finished runs under --out")
    parser.add_argument("--lock", default="", help="file to flock while loading the engine and during each run")
    parser.add_argument("--stop-at", default="", help="HH:MM (UTC): start no run after it")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments, with `stop` the --stop-at moment (None without one); a malformed one is a usage error."""
    args = parser.parse_args(argv)
    try:
        args.stop = stop_time(args.stop_at)
    except ValueError:
        parser.error(f"--stop-at: expected HH:MM (UTC), got {args.stop_at!r}")
    return args


def stop_time(text: str, now: datetime.datetime | None = None) -> datetime.datetime | None:
    """The `HH:MM` (UTC) nearest to `now`: a time up to 12 hours ahead is later today or just after
    midnight (23:00 with --stop-at 00:15 runs until 00:15), one up to 12 hours behind has passed.
    ValueError when malformed."""
    if not text:
        return None
    hour, minute = (int(part) for part in text.split(":"))
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stop = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if stop - now > datetime.timedelta(hours=12):
        stop -= datetime.timedelta(days=1)
    elif now - stop > datetime.timedelta(hours=12):
        stop += datetime.timedelta(days=1)
    return stop


def too_late(stop: datetime.datetime | None) -> bool:
    return stop is not None and datetime.datetime.now(datetime.timezone.utc) >= stop


@contextlib.contextmanager
def machine_lock(path: str) -> Iterator[None]:
    """An exclusive flock on `path` (the one `flock(1)` takes), or nothing when `path` is empty."""
    if not path:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cells(out: Path, tasks: list[str], arms: list[str], seeds: list[int],
          folder: Callable[[str], str] = str) -> list[Cell]:
    """Every (task, arm, seed), seeds outermost; an arm's runs live in out/<task>/<folder(arm)>/seed<N>."""
    return [Cell(task, arm, seed, out / task / folder(arm) / f"seed{seed}")
            for seed in seeds for task in tasks for arm in arms]


def search_config(method: str, task: str, seed: int, budget: int, max_tokens: int, population: int) -> dict:
    """The settings every arm shares (a benchmark adds its arm's sections)."""
    return {"run": {"method": method, "task": task, "budget": budget, "seed": seed},
            "sampling": {"temperature": 0.7, "top_p": 1.0, "max_tokens": max_tokens},
            "eoh": {"population": population, "offspring": population, "parents": 2},
            "sandbox": {"timeout_s": 30}}


def finished(directory: Path, budget: int) -> SearchSummary | None:
    """The summary of a run that spent its budget (not one a cap stopped), else None."""
    summary = read_summary(directory / "summary.json")
    if summary is not None and summary.evaluations >= budget and not summary.stopped:
        return summary
    return None


def run_one(directory: Path, raw: dict, engine: Any, sandbox: Any) -> SearchSummary:
    """The run's summary: read back when finished, else the run started or resumed."""
    from coevolve.base.config import as_dict, build_config, dump_toml
    from coevolve.runstore import RunStore
    from coevolve.search.loop import SearchLoop
    from coevolve.search.runconfig import RunConfig
    from tasks.registry import heuristic_task

    summary = finished(directory, raw["run"]["budget"])
    if summary is not None:
        return summary
    config = build_config(RunConfig, raw)
    store = RunStore.open(directory) if (directory / "config.toml").exists() else RunStore.create(
        directory, dump_toml(as_dict(config)))
    return SearchLoop(config, store, engine, sandbox, heuristic_task(raw["run"]["task"])).run()


def work_through(args: argparse.Namespace, todo: list[Cell], work: Callable[[Cell, Any, Any], str]) -> None:
    """Start the engine (under the lock) and one sandbox, then `work(cell, engine, sandbox)` on each
    cell with the lock held, printing the line it returns; none is started after --stop-at (checked
    again once the lock is taken: the wait for it may pass the time)."""
    if not todo or _stopped(args, todo[0]):
        return
    from coevolve.engine.vllm_engine import Engine
    from coevolve.sandbox import Sandbox

    with machine_lock(args.lock):
        engine = Engine(args.model or None)
    try:
        with Sandbox(timeout_s=30) as sandbox:
            for cell in todo:
                if _stopped(args, cell):
                    break
                with machine_lock(args.lock):
                    if _stopped(args, cell):
                        break
                    started = time.perf_counter()
                    line = work(cell, engine, sandbox)
                print(f"{datetime.datetime.now(datetime.timezone.utc):%H:%M} {cell.task} {cell.arm} "
                      f"seed {cell.seed}: {line}, {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        engine.close()


def _stopped(args: argparse.Namespace, cell: Cell) -> bool:
    if too_late(args.stop):
        print(f"--stop-at {args.stop_at} reached: {cell.task} {cell.arm} seed {cell.seed} and later not run",
              flush=True)
        return True
    return False


def markdown_table(head: tuple[str, ...], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def publish(out: Path, text: str, measures: dict) -> None:
    """table.md and measures.json under --out, and the table on stdout."""
    (out / "table.md").write_text(text)
    (out / "measures.json").write_text(json.dumps(measures, indent=1))
    print(text)
