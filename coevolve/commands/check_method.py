"""`coevolve check-method FILE`: try a search method (a method file, path/to/method.py[:Class],
or any method name) in seconds, with no engine and no endpoint.

The method is loaded and its config validated as `coevolve run --method FILE` does (the same
one-line errors, exit status 2), and the plan printed as `coevolve run --plan` prints it. Then
the real search loop runs that plan twice in a temporary folder, with a proposer that needs no
model: each reply is the task's template with its float constants scaled by a factor drawn from
the request's seed, scored in the real sandbox. The task is a probe whose objective follows that
constant, so the archive fills (--task T: a task of yours; a template without a float constant
then gives one program and its duplicates). The method's own hooks are called exactly as a run
calls them (pick, parents through it, admit, seed, snapshot, ...).

PASS, with each step's requests, the parents each request was shown and the archive's size after
the step; or one line and exit status 1: the first hook that raised (the file and line, the
hook, the exception), a hook still running after --hook-timeout seconds (the file and line it was
on), a hook that drew from Python's global `random` or numpy's global generator (a resume would pick
other parents), or the two runs with the same seed picking differently.
+esopt and +trace2skill are planned as given; the hooks are driven on the method alone (the
weights and the skill are not the method's)."""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import tokenize
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from coevolve.base.config import as_dict, dump_toml
from coevolve.base.durable import atomic_write_text
from coevolve.base.errors import UsageError
from coevolve.commands.check_task import MAX_SECONDS
from coevolve.commands.run import CHECK_SECONDS, load_run_config
from coevolve.engine.base import Completion, check_requests
from coevolve.runstore import RunStore
from coevolve.sandbox import Sandbox
from coevolve.search.loop import MethodError, SearchLoop, method_named
from coevolve.search.methods import BUILTIN, StepSpec, absolute_method, format_plan, parse_name, run_plan
from coevolve.search.runconfig import RunConfig
from tasks.check import StillRunning, overdue, time_limit
from tasks.registry import heuristic_task

PROBE = str(Path(__file__).with_name("check_method_task.py")) + ":MethodProbe"
BUDGET = 24  # a few steps of most plans (EoH's default generation is 10 requests)
HOOK_TIMEOUT = 10.0  # seconds: a hook on this small archive takes milliseconds; a loop that never ends, forever
LONGER = "--hook-timeout S gives each hook longer"
METHOD_CODE = "a method's code"  # a hook that calls sys.exit is told so in these words, not a task's


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check-method", help="try a search method (a method file) in seconds: its plan, "
                                                   "then its hooks driven by the real loop with no model",
                              description=__doc__)
    p.add_argument("method", metavar="FILE", help="path/to/method.py[:Class] (docs/search.md), or any method name")
    p.add_argument("--config", metavar="CONFIG.toml", help="a run config whose sections the method reads "
                                                           "(its [run] method, task, budget and out are not used)")
    p.add_argument("--task", help="the task the hooks are driven on (default: a probe task scored in "
                                  "milliseconds, whose objective follows the template's constant)")
    p.add_argument("--budget", type=int, default=BUDGET, help=f"run.budget of the plan driven (default {BUDGET})")
    p.add_argument("--seed", type=int, help="run.seed (default: the config's, else 0)")
    p.add_argument("--hook-timeout", type=float, default=HOOK_TIMEOUT, metavar="SECONDS",
                   help=f"fail a hook call of the method still running after this long (default {HOOK_TIMEOUT:g})")
    p.set_defaults(handler=handle)


def varied(template: str, seed: int) -> str:
    """`template` with every float literal scaled by a factor in [0.5, 1.5) drawn from `seed`;
    the rest of the text as it is."""
    rng = np.random.default_rng(seed)
    lines = template.splitlines(keepends=True)
    floats = [t for t in tokenize.generate_tokens(StringIO(template).readline) if t.type == tokenize.NUMBER
              and not t.string.lower().startswith("0x") and not t.string.lower().endswith("j")
              and any(c in t.string.lower() for c in ".e")]
    for token in reversed(floats):  # from the end: earlier positions stay where they are
        (row, start), (_, end) = token.start, token.end
        value = float(token.string.replace("_", "")) * float(rng.uniform(0.5, 1.5))
        lines[row - 1] = lines[row - 1][:start] + repr(round(value, 6)) + lines[row - 1][end:]
    return "".join(lines)


@dataclass
class TemplateVariants:
    """A generator (engine.base.Generator) that needs no model: each reply is the template varied by
    the request's seed (`varied`), so a run with the same seed gets the same replies."""

    template: str

    def chat(self, conversations: Sequence[Sequence[dict]], sampling: Any, seeds: Sequence[int] | None = None,
             constraints: Sequence[str | None] | None = None) -> list[Completion]:
        check_requests(conversations, seeds, constraints)
        seeds = list(seeds) if seeds is not None else list(range(len(conversations)))
        return [Completion(f"{{variant {seed}}}\n```python\n{varied(self.template, seed)}```") for seed in seeds]


def hook_limit(method: str, seconds: float) -> float:
    """The time limit for `method`'s code: `seconds` for a user's method, 0 (none) for a built-in (ours; the
    loop's hook wrapper does not treat its exceptions as the user's either)."""
    return 0.0 if parse_name(method).base in BUILTIN else seconds


@dataclass
class SizedLoop(SearchLoop):
    """The search loop, keeping the archive's size (the method's members()) after each step, with each call
    of a user's method's code (the loop's `_hook` and `_plan`, where its exceptions and global draws are
    caught) under a time limit: tasks.check.time_limit raises StillRunning naming the hook and step."""

    sizes: list[int] = field(default_factory=list)
    hook_seconds: float = HOOK_TIMEOUT

    def _hook(self, hook: str, step: int | None, *args: Any) -> Any:
        out = self._timed(hook, step, *args)
        if hook == "snapshot":  # the loop's last call of a step
            self.sizes.append(len(self._timed("members", step)))
        return out

    def _timed(self, hook: str, step: int | None, *args: Any) -> Any:
        with self._limit(hook, step):
            return super()._hook(hook, step, *args)

    def _plan(self) -> Iterator[StepSpec]:
        plan, end, step = super()._plan(), object(), 0
        while True:
            with self._limit("steps", step):
                spec = next(plan, end)
            if spec is end:
                return
            yield spec
            step += 1

    def _limit(self, hook: str, step: int | None) -> AbstractContextManager[None]:
        # A SIGALRM timer (time_limit) rather than a thread: a hook is plain Python in this process, which
        # only a signal interrupts, and check-method is a CLI on Unix whose loop runs in the main thread.
        # The timer is armed only while the method's code runs, so the sandbox's scoring (subprocesses with
        # their own timers; a fork does not inherit this one) never runs under it; it is cleared and the
        # previous SIGALRM handler restored however the call ends.
        at = f" in step {step}" if step is not None else ""
        return time_limit(hook_limit(self.config.run.method, self.hook_seconds),
                          f"{method_named(self.config.run.method)}: {self._written_hook(hook)}(){at}", METHOD_CODE)


def drive(config: RunConfig, directory: Path, sandbox: Any,
          hook_seconds: float = HOOK_TIMEOUT) -> tuple[list[dict], list[int], str | None]:
    """The plan of `config` run by the real loop in `directory`: its step events, the archive's
    size after each step, and the loop's line on the method's first draw from a global generator
    (None: none). A hook call still running after `hook_seconds` raises StillRunning."""
    config = config.model_copy(deep=True)
    config.run.out = str(directory)
    task = heuristic_task(config.run.task)
    with RunStore.create(config.run.out, dump_toml(as_dict(config))) as store:
        loop = SizedLoop(config, store, TemplateVariants(task.template), sandbox, task, on_note=lambda line: None,
                         hook_seconds=hook_seconds)
        loop.run()
        drew = loop.global_draw["note"] if loop.global_draw is not None else None
        return [e for e in store.events() if e.get("type") == "step"], loop.sizes, drew


def picked(events: list[dict]) -> list[tuple[int, int, str, list[int]]]:
    """(step, slot, operator, parent ids) of every request."""
    return [(e["step"], r["slot"], r["operator"], r["parents"]) for e in events for r in e["requests"]]


def difference(first: list[tuple], second: list[tuple]) -> str | None:
    """Where the second run's requests first differ from the first's; None when they are the same."""
    for a, b in zip(first, second):
        if a != b:
            return (f"step {a[0]} request {a[1]}: {a[2]} with parents {a[3]}, then {b[2]} with parents {b[3]}")
    if len(first) != len(second):
        return f"{len(first)} requests, then {len(second)}"
    return None


def failed(line: str) -> int:
    """The method's first fault, one line; exit status 1 (2 is the loader's and the config's)."""
    print(f"coevolve check-method: error: {line}", file=sys.stderr)
    return 1


def step_line(event: dict, size: int) -> str:
    shown = ", ".join("+".join(map(str, r["parents"])) or "-" for r in event["requests"])
    return (f"  step {event['step']:>2} {event['operator']:<6} {len(event['requests']):>2} requests  "
            f"archive {size:>2}  parents: {shown}")


def handle(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.hook_timeout) and 0 < args.hook_timeout <= MAX_SECONDS):
        raise UsageError(f"--hook-timeout must be a number of seconds in (0, {MAX_SECONDS:.0f}] "
                         f"(got {args.hook_timeout:g})")
    try:  # named as the user gave it (load_run_config would name a flag, --method)
        method = absolute_method(args.method)
    except UsageError as exc:
        raise UsageError(f"{args.method}: {exc}") from None
    run = {"method": method, "task": args.task or PROBE, "budget": args.budget,
           **({"seed": args.seed} if args.seed is not None else {})}
    with tempfile.TemporaryDirectory(prefix="coevolve-check-method-") as folder:
        path = Path(args.config) if args.config else Path(folder) / "empty.toml"
        if not args.config:
            atomic_write_text(path, "")  # flags alone fill an empty config: every other section its defaults
        # checked as `coevolve run` checks it: the task's shape, the method's check() and check_task()
        config = load_run_config(path, {"run": run}, seconds=CHECK_SECONDS)
        if not isinstance(config, RunConfig):
            raise UsageError(f"{config.run.task} is an agent task: methods search heuristic tasks")
        seconds = args.hook_timeout
        try:
            # run_plan calls the method's own code (steps(), plan_lines(), ...): timed as its hooks are
            with time_limit(hook_limit(config.run.method, seconds), f"{method_named(config.run.method)}: its plan",
                            METHOD_CODE):
                plan = run_plan(config)
            print(format_plan(plan), flush=True)
            driven = config.model_copy(deep=True)
            driven.run.method = parse_name(config.run.method).base
            with Sandbox.from_section(config.sandbox) as sandbox:
                events, sizes, drew = drive(driven, Path(folder) / "first", sandbox, seconds)
                again = drive(driven, Path(folder) / "second", sandbox, seconds)[0] if drew is None else events
        except MethodError as exc:  # its second line says how a run goes on: not this check's
            return failed(str(exc).splitlines()[0])
        except StillRunning as exc:  # a hook past --hook-timeout, or one that tried to exit (Exited)
            return failed(overdue(exc, LONGER))
    if drew is not None:
        return failed(drew)
    changed = difference(picked(events), picked(again))
    if changed is not None:
        return failed(f"{method_named(config.run.method)}: not deterministic: two runs with seed "
                      f"{config.run.seed} picked differently at {changed}; every choice must come from the "
                      "`rng` argument or the logged steps")
    for event, size in zip(events, sizes):
        print(step_line(event, size))
    requests = sum(len(e["requests"]) for e in events)
    print(f"PASS  {len(events)} steps, {requests} requests, hooks driven twice with seed {config.run.seed}: "
          "the same parents, no draw from a global generator")
    return 0
