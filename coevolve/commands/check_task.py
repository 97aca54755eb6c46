"""`coevolve check-task SPEC`: check a task before any engine starts.

SPEC is a task name, path/to/problem.py[:Class] or package.module:Class.
Checked, in order: the attributes and their types, each method's signature
takes the call the framework makes (score(decisions, instances), ...), the template defines
function_name, the splits and instance_seconds are sane (all cheap: `run`
and `compare` check these too before loading the LLM); every split's
smallest set is drawn twice and equal by content (objects without __eq__ by
their attributes); the template's decide() yields data
the sandbox wire carries; score() of the same decisions gives the same
finite number twice, the mean of instance_scores() where the task has them
(with score_is_instance_mean, what that declares: the sandbox then scores by
that mean without calling score()), each value a real number (not a bool, a
string or an array; a nan among instance_scores() named by its index); a task
file's reference() on the training set and every split's smallest set gives a
Reference or None (a built-in's may run a solver: its tests check it); and the
template scores that number on the training set through the real sandbox.
A task that declares an evaluation cascade
(cascade_stage, cascade_margin, cascade_against) has it checked too: well
formed, its first stage one of splits(), drawn twice and equal, and scored by
the template in this process and in the sandbox. A task that declares
decision descriptors (decision_descriptors, describe_decisions) has them
checked on the template's decisions: each declared name a finite number; one
that writes notes (feedback) has the template's note shown, and a feedback()
that raises or returns no string named.
An agent task (tasks/base.py AgentTask) is built with --option KEY=VALUE (a
run config's [task] options; its constructor's defaults otherwise) and
checked by tasks/agent_check.py: attributes (with a warning for an
action_pattern constrained decoding cannot enforce), both splits' cases
drawn twice (ids, determinism, no eval case a training problem), one
episode per split played with an action it cannot read and, with an
action_pattern, one with random moves of its form.
Each failure is one line naming the attribute or function; exit status 2 on any.
The task's own code runs in this process, each check under a time limit
(--stage-seconds): one that never returns is named with the line it was on,
as is one that exits (sys.exit, os._exit, its own KeyboardInterrupt)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np

from coevolve.agents.tools import SandboxTool
from coevolve.base.errors import UsageError
from coevolve.base.untrusted import clean
from coevolve.commands.agent_eval import parse_options
from coevolve.sandbox import Sandbox, wire
from tasks.agent_check import agent_problems
from tasks.base import (InvalidSolution, declared_behaviour, declared_cascade, instance_count, template_decisions,
                        template_function)
from tasks.check import (LONGER, BadReturn, StillRunning, checked_reference, declared_instance_mean,
                         determinism_problems, instance_values, non_finite, overdue, real_number, shape_problems,
                         time_limit)
from tasks.loader import absolute_spec, raised_in, user_frame
from tasks.registry import TaskOptionError, UnknownTask, agent_task, heuristic_task, kind


STAGE_SECONDS = 120.0
# the longest limit a check may be given: an alarm further off than this is past what the timer takes
MAX_SECONDS = 1_000_000.0


def check_seconds(flag: str, seconds: float) -> None:
    """A check's time limit given by `flag` (--stage-seconds, --check-seconds): seconds in
    0..MAX_SECONDS, 0 for none; a negative one, nan or inf is refused with one line."""
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SECONDS):
        raise UsageError(f"{flag} must be a number of seconds in 0..{MAX_SECONDS:.0f} (0: no limit) (got {seconds:g})")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check-task", help="validate a task (a name, path/to/problem.py[:Class] or "
                                                 "module:Class) before running it", description=__doc__)
    p.add_argument("spec", help="task name, path/to/problem.py[:Class] or package.module:Class")
    p.add_argument("--no-sandbox", action="store_true", help="skip the scoring through the real sandbox")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="agent tasks: a constructor keyword (a run config's [task] option), e.g. extra_turns=2; "
                        "repeatable (default: the constructor's defaults)")
    p.add_argument("--stage-seconds", type=float, default=STAGE_SECONDS, metavar="S",
                   help=f"wall seconds each check of the task's own code may take (default {STAGE_SECONDS:g}; "
                        "0: no limit); the sandbox check has the task's own limits")
    p.set_defaults(handler=handle)


def load(spec: str, stage_seconds: float = STAGE_SECONDS, tool: Any = None,
         options: dict[str, Any] | None = None) -> Any:
    """The task `spec` names (a file spec relative to the working directory), of
    either kind (an agent task built with `options`, its constructor's defaults
    otherwise, given `tool` where it takes one); UsageError with one line otherwise."""
    try:
        with time_limit(stage_seconds, f"loading {spec} (importing it, building the task)"):
            spec = absolute_spec(spec)
            if kind(spec) == "agent":
                try:
                    return agent_task(spec, options, tool=tool)
                except TaskOptionError as exc:
                    raise UsageError(f"--option {exc.option}: {exc.problem}") from None
                except (TypeError, ValueError) as exc:
                    given = f"with --option {', '.join(f'{k}={v}' for k, v in options.items())}" if options \
                        else "with its defaults (--option KEY=VALUE gives a [task] option)"
                    raise UsageError(f"{spec}: building it {given} raised {user_frame(exc)}") from None
            if options:
                raise UsageError(f"--option: {spec} is a heuristic task; heuristic tasks take no options")
            return heuristic_task(spec)
    except UnknownTask as exc:
        raise UsageError(str(exc)) from None
    except StillRunning as exc:
        raise UsageError(overdue(exc)) from None


def problems(task: Any, factory: Any, *, sandbox: bool = True, log: Any = None,
             stage_seconds: float = 0, longer: str = LONGER, references: bool = False) -> list[str]:
    """Every check of the module docstring; [] when the task passes. `log`
    gets one line per passed stage. `stage_seconds` > 0 limits each check of the
    task's own code (check-task's --stage-seconds, run's and compare's --check-seconds),
    and a check past it says `longer` (how the command that ran it gives more).
    `references`: reference() asked too (check-task's, of a task file: a run asks it only as it ends,
    and may not pay for a solver twice)."""
    try:
        return _problems(task, factory, sandbox, log or (lambda line: None), stage_seconds, references)
    except StillRunning as exc:
        return [overdue(exc, longer)]


def _problems(task: Any, factory: Any, sandbox: bool, say: Any, seconds: float, references: bool) -> list[str]:
    with time_limit(seconds, "splits(), instance_seconds() and the template's shape"):
        found = shape_problems(task)
    if found:
        return found
    say(f"shape: attributes, method signatures, template defines {task.function_name}(), splits, "
        "instance_seconds")
    split, size = task.train
    cascade = declared_cascade(task)
    stages = [(split, size)] + ([cascade.stage] if cascade is not None else [])
    sets = dict.fromkeys([(name, min(sizes)) for name, sizes in task.splits().items()] + stages)
    for set_split, set_size in sets:
        with time_limit(seconds, f"instances({set_split!r}, {set_size}), drawn twice"):
            found += determinism_problems(factory, set_split, set_size)
    if found:
        return found
    say("instances: drawn twice, equal (the smallest set of every split, the training set"
        + (" and the cascade's first stage)" if cascade is not None else ")"))
    with time_limit(seconds, f"the template's decide() and score() on {split} {size}"):
        value, found = template_value(task)
    if found:
        return found
    mean = ", the mean of instance_scores() as score_is_instance_mean declares" if declared_instance_mean(task) else ""
    say(f"template: decide() yields wire data, score() = {value!r} twice{mean}")
    if declared_behaviour(task):  # template_value checked them on the same decisions
        say(f"descriptors: describe_decisions() gives a finite {', '.join(declared_behaviour(task))} for the "
            "template's decisions (decision_descriptors: MAP-Elites' grid, [eoh] tie_break)")
    with time_limit(seconds, f"feedback() on the template's decisions on {split} {size}"):
        note, found = template_note(task)
    if found:
        return found
    if note:
        say(f"feedback: the template's note: {note[:200]}")
    staged = None
    if cascade is not None:
        with time_limit(seconds, f"the template's decide() and score() on {cascade.stage[0]} {cascade.stage[1]}"):
            staged, found = template_value(task, *cascade.stage)
        if found:
            return [f"cascade_stage {cascade.stage}: {line}" for line in found]
        say(f"cascade: the template scores {staged!r} on its first stage {cascade.stage[0]} {cascade.stage[1]}, "
            f"then must be within {cascade.margin:.0%} of the archive's {cascade.against}")
    if references:
        found = reference_problems(task, say, seconds)
        if found:
            return found
    if sandbox:
        found = sandbox_problems(task, value)
        if not found:
            say(f"sandbox: the template scores {value!r} on {split} {size} in the real sandbox")
        if not found and cascade is not None:
            found = sandbox_problems(task, staged, cascade.stage)
            if not found:
                say(f"sandbox: the template scores {staged!r} on its first stage in the real sandbox")
    return found


def template_value(task: Any, split: str | None = None, size: int | None = None) -> tuple[float | None, list[str]]:
    """The template's objective on (split, size), the training set by default,
    in this process, with decisions round-tripped through the sandbox wire as
    a worker sees them."""
    if split is None or size is None:
        split, size = task.train
    instances = task.instances(split, size)
    try:
        function = template_function(task)
    except Exception as exc:
        return None, [f"template: loading it raised {user_frame(exc)}"]
    try:
        decisions = list(task.decide(function, instances))
    except InvalidSolution as exc:
        return None, [f"template: fails its own evaluation on {split} {size}: decide() found an invalid "
                      f"solution: {raised_in(exc, 'decide()')}"]
    except Exception as exc:
        return None, [f"decide(): with the template on {split} {size} raised {raised_in(exc, 'decide()')}"]
    count = instance_count(instances)
    if len(decisions) != count:
        return None, [f"decide(): yielded {len(decisions)} decisions for {count} instances (expected one per instance)"]
    try:
        carried = wire.decode(wire.encode({"decisions": decisions}))["decisions"]
    except (TypeError, ValueError) as exc:
        shown = next((type(d).__name__ for d in decisions), "nothing")
        return None, [f"decide(): yielded {shown} data the sandbox wire refuses ({exc}); yield numbers, strings, "
                      "lists, dicts or int64/float64/bool numpy arrays"]
    values = []
    for _ in range(2):
        try:
            values.append(real_number(task.score(wire.decode(wire.encode({"d": carried}))["d"], instances),
                                      task.score, "score()"))
        except InvalidSolution as exc:
            return None, [f"template: fails its own evaluation on {split} {size}: score() rejected its decisions: "
                          f"{raised_in(exc, 'score()')}"]
        except BadReturn as exc:  # the sandbox's worker says the same of a candidate's
            return None, [f"{exc} (with the template's decisions on {split} {size})"]
        except Exception as exc:
            return None, [f"score(): with the template's decisions raised {raised_in(exc, 'score()')}"]
    per_instance = getattr(task, "instance_scores", None)
    profile = None
    if callable(per_instance):  # the per-instance profile the search compares programs by: its mean must be score()
        try:
            profile = instance_values(per_instance(carried, instances), per_instance)
        except BadReturn as exc:
            return None, [f"{exc} (with the template's decisions on {split} {size})"]
        except Exception as exc:
            return None, [f"instance_scores(): with the template's decisions raised "
                          f"{raised_in(exc, 'instance_scores()')}"]
        # before score()'s own check: a mean over a nan is nan, and the instance is what to name
        odd = non_finite(profile, per_instance)
        if odd is not None:
            return None, [f"{odd} (with the template's decisions on {split} {size})"]
    if not math.isfinite(values[0]):
        return None, [f"score(): the template's objective is {values[0]}, expected a finite number"]
    if values[0] != values[1]:
        return None, [f"score(): not deterministic, the same decisions scored {values[0]!r} then {values[1]!r}"]
    if profile is not None:
        mean = float(np.mean(profile)) if profile else math.nan
        if len(profile) != count or mean != values[0]:
            why = ("score_is_instance_mean = True declares score() their mean, and the sandbox then scores every "
                   "program by that mean without calling score(): make score() their mean, or drop the declaration"
                   if declared_instance_mean(task) else
                   "score() must be their mean (the sandbox's objective is score(), and the search compares "
                   "programs instance by instance by these values)")
            return None, [f"instance_scores(): the template's {len(profile)} values for {count} instances average "
                          f"{mean!r}, but score() is {values[0]!r}; {why}"]
    named = declared_behaviour(task)  # shape_problems vouched for the declaration
    if named:  # the worker describes every program's decisions as it does the template's here
        try:
            described = dict(task.describe_decisions(carried, instances))
        except Exception as exc:
            return None, [f"describe_decisions(): with the template's decisions raised "
                          f"{raised_in(exc, 'describe_decisions()')}"]
        missing = [name for name in named if not isinstance(described.get(name), (int, float))
                   or isinstance(described.get(name), bool) or not math.isfinite(described[name])]
        if missing:
            return None, [f"describe_decisions(): gave no finite number for {', '.join(missing)} with the "
                          f"template's decisions (got {', '.join(f'{k}={v!r:.20}' for k, v in described.items())})"]
    return values[0], []


def reference_problems(task: Any, say: Any, seconds: float) -> list[str]:
    """reference() on the training set (what every run asks as it ends) and on every split's smallest set
    (those a comparison and `coevolve eval` ask are among its sizes), each under `seconds`: the first raise
    or value other than a Reference or None is the one line (checked_reference; one fault is mostly every
    set's); a run would go on without a reference, and should not have to."""
    sets = dict.fromkeys([tuple(task.train)] + [(name, min(sizes)) for name, sizes in task.splits().items()])
    given = []
    for split, size in sets:
        with time_limit(seconds, f"reference({split!r}, {size})"):
            reference, problem = checked_reference(task, split, size)
        if problem:
            return [problem]
        given.append(f"{split} {size}: " + ("none" if reference is None else
                                            f"{reference.value:.6g} ({reference.kind}, {reference.source})"))
    say(f"reference: a Reference or None ({'; '.join(given)})")
    return []


def template_note(task: Any) -> tuple[str, list[str]]:
    """The task's note (`feedback`) on the template's training decisions, as the sandbox's worker
    asks for one on every valid program's: ("", []) for a task without it."""
    if not callable(getattr(task, "feedback", None)):
        return "", []  # shape_problems named a `feedback` that is not a method
    decisions, instances = template_decisions(task)
    try:
        note = task.feedback(wire.decode(wire.encode({"d": decisions}))["d"], instances)
    except Exception as exc:
        return "", [f"feedback(): with the template's decisions raised "
                    f"{raised_in(exc, 'feedback()')}"]
    if not isinstance(note, str):
        return "", [f"feedback(): returned {type(note).__name__}, expected a str (\"\" for no note)"]
    return clean(note).strip(), []


def sandbox_problems(task: Any, expected: float, stage: tuple[str, int] | None = None) -> list[str]:
    """The template scored on `stage` (the training set by default) through the real sandbox."""
    split, size = stage or task.train
    instances = task.instances(split, size)
    count = instance_count(instances)
    timeout = 30.0 + count * float(task.instance_seconds(size))
    with Sandbox(workers=1, timeout_s=timeout) as sandbox:
        result = sandbox.evaluate(task.template, task, split, size)
    if not result.ok:
        failure = result.failure.value if result.failure else "failure"
        return [f"template: fails its own evaluation in the sandbox on {split} {size} [{failure}]: "
                f"{result.message.strip().splitlines()[-1] if result.message.strip() else ''}"]
    if result.objective is None or not math.isfinite(result.objective):
        return [f"template: the sandbox scored {result.objective!r}, expected a finite number"]
    if abs(result.objective - expected) > 1e-9 * max(1.0, abs(expected)):
        return [f"score(): the sandbox scored the template {result.objective!r} but this process {expected!r}; "
                "decide() or score() depends on something other than the instances (global state, time)"]
    return []


def fail(found: list[str], command: str) -> None:
    """Print all problems but the last, raise the last (the CLI prints it and exits 2)."""
    for line in found[:-1]:
        print(f"coevolve {command}: error: {line}", file=sys.stderr)
    raise UsageError(found[-1])


def passed(line: str) -> None:
    print(f"ok  {line}", flush=True)


def handle(args: argparse.Namespace) -> int:
    check_seconds("--stage-seconds", args.stage_seconds)
    tool = SandboxTool()  # an agent task that runs Python gets the real tool (started on first use only)
    try:
        options = parse_options(args.option)
        task = load(args.spec, args.stage_seconds, tool, options)
        spec = getattr(task, "__coevolve_spec__", args.spec)
        if kind(spec) == "agent":
            found = agent_problems(task, lambda: agent_task(spec, options, tool=tool), passed, args.stage_seconds)
        else:
            # a built-in's references are its tests' to check: some run a solver for minutes
            found = problems(task, lambda: heuristic_task(spec), sandbox=not args.no_sandbox, log=passed,
                             stage_seconds=args.stage_seconds, references=hasattr(task, "__coevolve_spec__"))
    finally:
        tool.close()
    if found:
        fail(found, "check-task")
    print(f"{task.name}: passed every check")
    return 0
