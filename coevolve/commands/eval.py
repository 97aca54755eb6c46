"""`coevolve eval FILE.py --task T [--split S] [--size N]`: score one program
in the sandbox on a task's instance sets and compare with the reference.
`coevolve eval --run DIR [--split S]`: the run's best.py on the run's own
task (a file task is re-found from the run directory alone; one edited since
the run is read from the run's copy, with a note on stderr).

Without --size every size of the split is scored, one row each. Exit code 0
when every set scored, 1 when any failed (the typed failure is printed), 2
for usage errors (unknown task, split or size, missing file)."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from coevolve.base.config import read_toml
from coevolve.base.errors import UsageError
from coevolve.base.records import SearchSummary, read_summary
from coevolve.base.untrusted import FENCE, fence
from coevolve.commands import agent_eval
from coevolve.report.collecting import task_of_run as run_task
from coevolve.runstore import RunStore
from coevolve.sandbox import Sandbox
from coevolve.sandbox.pool import MAX_SEEDS, MIN_MEMORY_MB
from tasks.base import Reference, gap
from tasks.check import checked_reference
from tasks.loader import TaskExited, absolute_spec, copy_notes, exited, guarded
from tasks.registry import UnknownTask, heuristic_task, is_agent_task, list_tasks

_QUOTE = " " * 8 + FENCE
# the heuristic flags with no default, which eval of an agent refuses when given
HEURISTIC_FLAGS = ("split", "size", "workers", "no_reference")


def no_best(store: RunStore) -> str:
    """Why a heuristic run has no best.py (written when the run ends, of its best valid candidate): none
    of its candidates was valid, it has not ended, or it has not finished a step."""
    summary = read_summary(store.path("summary.json"))
    if isinstance(summary, SearchSummary) and summary.valid == 0:
        return (f"{store.dir} produced no valid heuristic (0 of {summary.evaluations} valid): "
                "nothing to evaluate")
    writer = store.writer()
    if writer:  # resuming it would make two writers (refused)
        return f"{store.dir} has no best.py yet (the run is still running: {writer})"
    if any(e.get("type") == "step" for e in store.events()):
        return (f"{store.dir} has no best.py yet (the run has not finished: `coevolve run --resume "
                f"{store.dir}` finishes it)")
    return f"{store.dir} has no best.py yet (the run has not finished a step)"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="score a heuristic program on a task's instance sets, or an agent "
                              "(base, ES-tuned, skill, both) by held-out Mean@k / Pass@k",
                              description=__doc__ + "\n\n" + agent_eval.__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", help="heuristic tasks: Python file defining the task's function (e.g. a run's best.py)")
    p.add_argument("--task", help="task: a name (see `coevolve tasks`), path/to/problem.py[:Class] or "
                                  "package.module:Class; with --run: the run's task")
    p.add_argument("--split", help="instance split (default: the task's training split)")
    p.add_argument("--size", type=int, help="instance size (default: every size of the split)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per instance set (default 1800), the outer bound: a program that hangs "
                        "fails sooner, at the task's per-instance limit")
    p.add_argument("--memory-mb", type=int, default=4096, help="memory limit of the program (default 4096)")
    p.add_argument("--workers", type=int, help="sets scored in parallel (default: one per core)")
    p.add_argument("--seeds", type=int, help="score the program this many times, its random generators seeded "
                   "0..N-1, and report the mean (a randomised heuristic; default: --run's [sandbox] seeds, else 1)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the reference and gap (computing LKH references for large sets takes long)")
    agent_eval.add_arguments(p)
    p.set_defaults(handler=handle)


def resolve(task_name: str, split: str | None, size: int | None) -> tuple[Any, str, list[int]]:
    """The task object, the split and the sizes to score, or a UsageError."""
    if is_agent_task(task_name):
        raise UsageError(f"task {task_name!r} is an agent task; eval scores heuristic programs "
                         f"(heuristic tasks: {', '.join(list_tasks('heuristic'))})")
    try:
        task = heuristic_task(task_name)
    except UnknownTask as exc:
        raise UsageError(str(exc)) from None
    with guarded():  # the task's own code in this process: an exit is one line (coevolve.cli)
        splits = task.splits()
    split = split or task.train[0]
    if split not in splits:
        raise UsageError(f"task {task_name!r} has no split {split!r} (splits: {', '.join(splits)})")
    if size is None:
        return task, split, list(splits[split])
    if size not in splits[split]:
        raise UsageError(f"--size {size}: split {split!r} of {task_name!r} has sizes "
                         f"{', '.join(map(str, splits[split]))}")
    return task, split, [size]


def task_of_run(args: argparse.Namespace) -> None:
    """--run DIR without --task: the run's own task (its file task re-found
    from DIR, as `coevolve report` finds it), and for a heuristic run its
    best.py as the program."""
    store = RunStore.open(args.run)
    config = read_toml(store.config_path)  # once: the task here and, below, the seeds the run scored with
    if not isinstance(config.get("run", {}), dict):  # a hand-edited config.toml
        raise UsageError(f"{store.config_path}: config error: run must be a table (got {config['run']!r})")
    task = run_task(store, config)  # a changed file: score on the source the run used, and say so
    for note in copy_notes():
        print(f"note: {note}", file=sys.stderr)
    if task is None:
        raise UsageError(f"{store.config_path}: no run.task")
    args.task = task
    if not is_agent_task(task) and not args.file:
        if not store.path("best.py").is_file():
            raise UsageError(no_best(store))
        args.file = str(store.path("best.py"))
    if not is_agent_task(task) and args.seeds is None:  # scored as the run scored it
        sandbox = config.get("sandbox")
        seeds = sandbox.get("seeds", 1) if isinstance(sandbox, dict) else 1
        if not isinstance(seeds, int) or isinstance(seeds, bool):  # a hand-edited config.toml
            raise UsageError(f"{store.config_path}: sandbox.seeds must be an integer (got {seeds!r}); "
                             "or give --seeds")
        args.seeds = seeds


def flag_words(args: argparse.Namespace, dests: list[str]) -> str:
    """The flags given (their argparse dests), as the user wrote them with their values: `--k 2, --free`."""
    words = []
    for dest in dests:
        value, flag = getattr(args, dest), "--" + dest.replace("_", "-")
        values = value if isinstance(value, list) else [] if value is True else [value]
        words += [f"{flag} {v}" for v in values] or [flag]
    return ", ".join(words)


def handle(args: argparse.Namespace) -> int:
    if args.task is None:
        if not args.run:
            raise UsageError("give --task (a task name or path/to/problem.py) or --run RUN_DIR")
        task_of_run(args)
    else:
        args.task = absolute_spec(args.task)

    if is_agent_task(args.task):
        if args.file:
            raise UsageError(f"task {args.task!r} is an agent task: eval takes no program file for it "
                             "(give --run RUN_DIR, --history, --skill)")
        if args.seeds is not None:
            raise UsageError("--seeds is for heuristic tasks (a program's random generators); agent episodes "
                             "are sampled by the model")
        given = [flag for flag in HEURISTIC_FLAGS if getattr(args, flag) not in (None, False)]
        if given:
            raise UsageError(f"{flag_words(args, given)}: for heuristic tasks (a program scored on instance sets); "
                             f"{args.task!r} is an agent task, evaluated on held-out problems (--problems, --k)")
        return agent_eval.handle(args)
    # an agent evaluation's flags (but --run, which names a heuristic run too), refused rather than ignored
    given = [flag for flag in agent_eval.FLAGS if flag != "run" and getattr(args, flag) not in (None, False, [])]
    if given:
        raise UsageError(f"{flag_words(args, given)}: for agent tasks (held-out Mean@k / Pass@k); {args.task!r} is "
                         "a heuristic task, whose program eval scores on its instance sets")
    if not args.file:
        raise UsageError("heuristic tasks: give the Python file to score")
    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    try:
        code = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    task, split, sizes = resolve(args.task, args.split, args.size)
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    if args.memory_mb < MIN_MEMORY_MB:
        raise UsageError(f"--memory-mb must be >= {MIN_MEMORY_MB} (megabytes), got {args.memory_mb}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    args.seeds = 1 if args.seeds is None else args.seeds
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds must be in 1..{MAX_SEEDS}, got {args.seeds}")

    print(f"{task.name}: {task.function_name} from {path}, split {split}, "
          f"{'lower' if task.direction == 'min' else 'higher'} is better"
          f"{f', the mean over {args.seeds} seeds of its random generators' if args.seeds > 1 else ''}", flush=True)
    began = time.monotonic()
    workers = min(len(sizes) * args.seeds, args.workers) if args.workers else None
    with Sandbox(workers=workers, timeout_s=args.timeout, memory_mb=args.memory_mb, seeds=args.seeds) as sandbox:
        results = sandbox.evaluate_many([(code, task, split, size) for size in sizes])

    header = f"{'size':>6}  {'objective':>12}  {'reference':>12}  {'gap':>8}  {'valid':>11}  {'seconds':>8}"
    print(header)
    failed = 0
    references: dict[int, Any] = {}  # each size's, asked once: a reference() that gives none warns once
    for size, result in zip(sizes, results):
        if not result.ok:
            failed += 1
            kind = result.failure.value if result.failure else "invalid"
            # the message (a traceback, the candidate's own words) and output are quoted line by
            # line behind a bar: no escape sequence reaches the terminal, no line passes for a row
            print(f"{size:>6}  FAILED [{kind}]:")
            print(fence(result.message.strip() or "(none)", 2000, prefix=_QUOTE))
            if result.output.strip():
                print("        its output:")
                print(fence(result.output.strip(), 500, prefix=_QUOTE))
            continue
        reference_text, gap_text = "-", "-"
        if not args.no_reference:
            reference = references[size] = _reference(task, split, size)
            if reference is not None:
                reference_text = f"{reference.value:.4f}"
                if reference.value != 0:
                    gap_text = f"{100 * gap(result.objective, reference.value, task.direction):.2f}%"
        valid = f"{result.instances}/{result.instances}"
        print(f"{size:>6}  {result.objective:>12.4f}  {reference_text:>12}  {gap_text:>8}  {valid:>11}  "
              f"{result.seconds:>8.2f}", flush=True)
        if result.seed_objectives:  # the draws behind the mean: how far one seed could be from it
            spread = result.seed_objectives
            print(f"        seeds 0..{len(spread) - 1}: min {min(spread):.4f}, max {max(spread):.4f}, "
                  f"std {statistics.stdev(spread):.4f}")
        if result.feedback:  # the task's note on the training set: what the proposer reads under this program
            print(fence(f"the task's note: {result.feedback}", prefix=_QUOTE))
    if not args.no_reference:
        # what each size's reference is, once: sizes share their kind and source, not their value
        given = [r for r in references.values() if r is not None]
        for kind, source in sorted({(r.kind, r.source) for r in given}, key=lambda k: k[1]):
            print(f"reference: {kind}, {source}")
    print(f"total {time.monotonic() - began:.1f} s")
    if failed:
        print(f"{failed} of {len(sizes)} sets failed", file=sys.stderr)
    return 1 if failed else 0


def _reference(task: Any, split: str, size: int) -> Reference | None:
    """The task's reference, its own code run here: one that exits the process is one line (exit status 2);
    one that raises or returns no Reference is none, with a warning naming its line (checked_reference):
    the program's scores stand without it."""
    try:
        reference, problem = checked_reference(task, split, size)
    except TaskExited as exc:
        raise UsageError(exited(exc, f"reference({split!r}, {size})")) from None
    if problem:
        print(f"warning: {problem}; no reference or gap for size {size}", file=sys.stderr, flush=True)
    return reference
