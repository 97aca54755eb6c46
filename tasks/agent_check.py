"""Checks of an agent task's contract (tasks/base.py AgentTask), for `coevolve
check-task` and, before the engine starts, `coevolve run` of a user's task.

Checked, in order: the attributes (name, system_prompt, stop, an optional
action_pattern that compiles, an optional case_key) and the methods; the
cases of both splits drawn twice and equal, with string ids, unique, and no
held-out (eval) case the same problem as a training one (tasks.base.case_content);
then one episode per split played with an action no environment can read, as
a weak model writes many, and, when the task declares an action_pattern, one
more per split with random moves of that form (tasks/regex_moves.py), and one
with long ones where the pattern lets a reply run on: reset
gives the same first observation twice, step answers (observation, done)
instead of raising, the episode ends within max_turns, reward is a number in
[0, 1] and metrics a table of numbers (its "progress" in [0, 1]). The task's code runs in this process (it is trusted,
unlike a model's actions), each check under the caller's time limit. Each
problem is one line naming the attribute or method and what was expected.
What each method's answer must be (`answer_problem`, `turns_problem`,
`reward_problem`, `metrics_problem`) is also what every rollout holds the task
to, turn by turn (coevolve/agents/rollout.py).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np

from tasks.base import case_content
from tasks.check import LONGER, StillRunning, overdue, shown, time_limit
from tasks.loader import AGENT_METHODS, user_frame
from tasks.regex_moves import EXTRA, LONG, NotDrawable, draw_move, lengthens, undecodable

SPLITS = ("train", "eval")
CASES = 4  # per split: enough to see ids repeat or a draw change, cheap for any environment
UNREADABLE = "(no move)"  # the probe action: no environment's move, so its answer must say so, not crash


def agent_problems(task: Any, factory: Callable[[], Any], log: Callable[[str], None] | None = None,
                   stage_seconds: float = 0, longer: str = LONGER) -> list[str]:
    """Every check of the module docstring; [] when the task passes. `factory` builds a second
    instance (the draws and first observations must not depend on one instance's state); `log`
    gets one line per passed stage; `stage_seconds` > 0 limits each check of the task's code, and a
    check past it says `longer` (how the command that ran it gives more)."""
    say = log or (lambda line: None)
    try:
        return _problems(task, factory, say, stage_seconds)
    except StillRunning as exc:
        return [overdue(exc, longer)]


def _problems(task: Any, factory: Callable[[], Any], say: Callable[[str], None], seconds: float) -> list[str]:
    with time_limit(seconds, "the task's attributes"):
        found = shape_problems(task)
    if found:
        return found
    pattern = getattr(task, "action_pattern", None)
    construct = undecodable(pattern) if pattern is not None else None
    say("shape: name, system_prompt, stop, " + ", ".join(f"{m}()" for m in AGENT_METHODS)
        + (f", action_pattern {shown(pattern)} compiles" if pattern is not None else "")
        + (f" (but it uses {construct}, which constrained decoding cannot enforce: with agent.constrained = true, "
           "the default, a run stops before its first episode; write it without, or decode freely: "
           "agent.constrained = false, [eval] constrained = false in a comparison, --free for coevolve eval)"
           if construct else ""))
    with time_limit(seconds, f"cases() of {' and '.join(SPLITS)}, drawn twice"):
        cases, found = case_problems(task, factory)
    if found:
        return found
    say(f"cases: {CASES} per split ({', '.join(SPLITS)}) drawn twice and equal, string ids, unique, no eval case "
        "a training problem")
    for split in SPLITS:
        case = cases[split][0]
        with time_limit(seconds, f"an episode of case {case.id}"):
            line, found = episode_problems(task, factory, case)
        if found:
            return found
        say(f"episode: {line}")
    if pattern is None:
        return []
    try:
        draw_move(pattern, np.random.default_rng(0))
    except NotDrawable as exc:
        say(f"episode: no moves drawn from action_pattern ({exc}); the unreadable action only")
        return []
    # short moves on each split's second case; long ones (a reply that runs on) on its third, where
    # the pattern lets a reply run on
    kinds = [("moves", 1, EXTRA)] + ([("long moves", 2, LONG)] if lengthens(pattern) else [])
    for kind, at, extra in kinds:
        for index, split in enumerate(SPLITS):
            case, rng = cases[split][at], np.random.default_rng((at - 1) * len(SPLITS) + index)
            with time_limit(seconds, f"an episode of case {case.id} with {kind} drawn from action_pattern"):
                line, found = episode_problems(task, factory, case, lambda: draw_move(pattern, rng, extra=extra), kind)
            if found:
                return found
            say(f"episode: {line}")
    return []


def shape_problems(task: Any) -> list[str]:
    found = []
    for attribute in ("name", "system_prompt"):
        value = getattr(task, attribute, None)
        if not isinstance(value, str) or not value.strip():
            found.append(f"{attribute}: expected a non-empty str, got {shown(value)}")
    stop = getattr(task, "stop", ())
    if not isinstance(stop, (tuple, list)) or not all(isinstance(s, str) and s for s in stop):
        found.append(f"stop: expected a tuple of non-empty strings (the texts that end one action), got {shown(stop)}")
    found += [f"{name}(): missing or not a method (tasks/base.py AgentTask)" for name in AGENT_METHODS
              if not callable(getattr(task, name, None))]
    pattern = getattr(task, "action_pattern", None)
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            found.append(f"action_pattern: expected a regular expression (str) every action must match under "
                         f"agent.constrained, got {shown(pattern)}")
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                found.append(f"action_pattern: {pattern!r} is not a regular expression: {exc}")
    key = getattr(task, "case_key", None)
    if key is not None and not callable(key):
        found.append(f"case_key: expected a method case_key(case), got {shown(key)}")
    return found


def case_problems(task: Any, factory: Callable[[], Any]) -> tuple[dict[str, list[Any]], list[str]]:
    """The first CASES cases of each split, drawn by `task` and by a fresh instance, compared."""
    cases: dict[str, list[Any]] = {}
    other = None
    for split in SPLITS:
        call = f"cases({split!r}, {CASES}, seed=0)"
        try:
            drawn = list(task.cases(split, CASES, 0))
            other = other or factory()
            again = list(other.cases(split, CASES, 0))
        except Exception as exc:
            return {}, [f"cases(): {call} raised {user_frame(exc)}"]
        if len(drawn) != CASES:
            return {}, [f"cases(): {call} gave {len(drawn)} cases, expected {CASES}"]
        ids = [getattr(c, "id", None) for c in drawn]
        bad = next((i for i in ids if not isinstance(i, str) or not i), "ok")
        if bad != "ok":
            return {}, [f"cases(): every case needs a non-empty string `id` (the logs and reports name cases by "
                        f"it); {call} gave one with id {shown(bad)}"]
        if len(set(ids)) != len(ids):
            return {}, [f"cases(): {call} repeats ids ({', '.join(sorted({i for i in ids if ids.count(i) > 1}))})"]
        try:
            same = ([getattr(c, "id", None) for c in again] == ids
                    and [case_content(task, c) for c in drawn] == [case_content(task, c) for c in again])
        except Exception as exc:
            return {}, [f"case_key(): raised {user_frame(exc)}"]
        if not same:
            return {}, [f"cases(): not deterministic: {call} drawn by two instances gave different cases (draw "
                        "them from a random generator seeded by split, seed and index, never from global state)"]
        cases[split] = drawn
    train = {case_content(task, c): c.id for c in cases["train"]}
    shared = [(c.id, train[case_content(task, c)]) for c in cases["eval"] if case_content(task, c) in train]
    if shared:
        pairs = ", ".join(f"{held} = {seen}" for held, seen in shared)
        return {}, [f"cases(): eval cases are training problems ({pairs}; compared by "
                    f"{'case_key()' if callable(getattr(task, 'case_key', None)) else 'their fields other than id'}): "
                    "held-out scores would measure training problems; draw the splits apart"]
    return cases, []


def episode_problems(task: Any, factory: Callable[[], Any], case: Any,
                     move: Callable[[], str] | None = None, kind: str = "moves") -> tuple[str, list[str]]:
    """One episode of `case` with the unreadable action every turn, or with `move()`'s (`kind`: what
    they are, for the lines)."""
    try:
        state, first = task.reset(case)
    except Exception as exc:
        return "", [f"reset(): on case {case.id} raised {user_frame(exc)}"]
    if not isinstance(first, str) or not first.strip():
        return "", [f"reset(): expected (state, first observation: a non-empty str), got an observation "
                    f"{shown(first)} on case {case.id}"]
    try:
        _, again = factory().reset(case)
    except Exception as exc:
        return "", [f"reset(): on case {case.id}, in a second instance, raised {user_frame(exc)}"]
    if again != first:
        return "", [f"reset(): not deterministic: case {case.id}'s first observation differs between two resets"]
    def asked(method: str, of: Any, check: Callable[[Any], str], when: str) -> tuple[Any, str]:
        """The environment's `method(of)`, or the line saying how it raised or what was wrong with it."""
        try:
            value = getattr(task, method)(of)
        except Exception as exc:
            return None, f"{method}(): {when} raised {user_frame(exc)}"
        problem = check(value)
        return value, f"{method}(): {problem} on case {case.id}" if problem else ""

    turns, problem = asked("max_turns", case, turns_problem, f"on case {case.id}")
    if problem:
        return "", [problem]
    played, done, first_move = 0, False, None
    while not done and played < turns:
        action = move() if move else UNREADABLE
        first_move = action if first_move is None else first_move
        try:
            answer = task.step(state, action)
        except Exception as exc:
            if move is None:
                return "", [f"step(): with an action it cannot read ({UNREADABLE!r}) raised {user_frame(exc)} on "
                            f"case {case.id}, turn {played + 1}; answer such an action with an observation that "
                            "says so (a weak model writes many)"]
            return "", [f"step(): with the move {cut(action)} (of action_pattern's form) raised {user_frame(exc)} on "
                        f"case {case.id}, turn {played + 1}; answer a move of the declared form with an observation "
                        "(a move out of range or against the rules is the model's mistake, not a crash)"]
        problem = answer_problem(answer)
        if problem:
            return "", [f"step(): {problem} on case {case.id}"]
        played, done = played + 1, bool(answer[1])
    reward, problem = asked("reward", state, reward_problem, f"after an episode of case {case.id}")
    if not problem:
        metrics, problem = asked("metrics", state, metrics_problem, f"after an episode of case {case.id}")
    if problem:
        return "", [problem]
    end = "done" if done else f"its turn budget of {turns}"
    acted = f"{kind} drawn from action_pattern (the first {cut(first_move)})" if move else "an unreadable action"
    return (f"case {case.id}: {played} turn{'s' * (played != 1)} of {acted} until {end}, reward "
            f"{float(reward):g}, metrics {', '.join(metrics) or 'none'}"), []


# What each of the task's answers must be: "" when it is, else what was expected and what came. check-task's
# episodes and every rollout (coevolve/agents/rollout.py, once per turn or episode) hold the task to these.


def answer_problem(answer: Any) -> str:
    """step()'s answer: (observation str, done bool)."""
    if (isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], str)
            and isinstance(answer[1], (bool, np.bool_))):
        return ""
    return f"expected (observation str, done bool), got {shown(answer)}"


def turns_problem(turns: Any) -> str:
    """max_turns()'s answer: an int >= 1."""
    if isinstance(turns, (int, np.integer)) and not isinstance(turns, bool) and turns >= 1:
        return ""
    return f"expected an int >= 1, got {shown(turns)}"


def reward_problem(reward: Any) -> str:
    """reward()'s answer: a finite number in [0, 1] (a bool is not one: it says so, as `True` reads like 1)."""
    if _number(reward) and 0 <= reward <= 1:
        return ""
    return f"expected a number in [0, 1], got {shown(reward)}" + (" (a bool: return 1.0 or 0.0)"
                                                                 if isinstance(reward, bool) else "")


def metrics_problem(metrics: Any) -> str:
    """metrics()'s answer: names to finite numbers, its "progress" (when given) in [0, 1]; the first entry
    that is not one is named, as a long dict is cut when shown."""
    if not isinstance(metrics, dict):
        return f"expected a dict of names to finite numbers, got {shown(metrics)}"
    for key, value in metrics.items():
        if not (isinstance(key, str) and _number(value)):
            return (f"expected a dict of names to finite numbers; its entry {key!r} is {shown(value)}"
                    + (" (a bool: give 1.0 or 0.0)" if isinstance(value, bool) else ""))
    if "progress" in metrics and not 0 <= metrics["progress"] <= 1:
        return f"progress must be in [0, 1] (agent.shaping adds it to the reward), got {metrics['progress']!r}"
    return ""


def cut(move: str, most: int = 40) -> str:
    """A move as the lines show it: quoted, a long one cut with its length."""
    return repr(move) if len(move) <= most else f"{move[:most]!r}... ({len(move)} characters)"


def _number(value: Any) -> bool:
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            and math.isfinite(value))
