"""Operator prompts (EoH's i1, e1, e2, m1, m2, m3, in our own words, and
`repair`, which hands a failed candidate and its error back for a fix).

Kept short on purpose: the embedded 135M model loses the thread in long
prompts, and most of its failures are prose with no code. Every prompt asks
for the same answer shape: the idea in one sentence inside braces, then the
complete function in a single fenced python block.

`Context` is what the run has learnt so far: the Trace2Skill skill (appended
to the system prompt), recent failures (fenced: a candidate's text is data,
never instructions), what each parent's evaluation said besides its score,
and the exact signature the answer must keep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence

from coevolve.base.errors import UsageError
from coevolve.base.untrusted import fence
from coevolve.codeparse import NO_CODE, NO_CODE_CUT_OFF
from coevolve.engine.base import Message
from coevolve.search import operators
from coevolve.search.edits import DIVIDER, REPLACE, SEARCH

SYSTEM = ("You are an expert in algorithm design. You answer with one sentence describing your idea "
          "inside braces, then the complete Python function in one ```python code block. No other text.")

ANSWER_SHAPE = ("Answer format: {{your idea in one sentence}}, then the complete function {name} "
                "in one ```python block, with the same signature.")
# the `diff` operator's answer (coevolve/search/edits.py): blocks on the one parent shown
EDIT_SYSTEM = ("You are an expert in algorithm design. You answer with one sentence describing your idea "
               "inside braces, then edit blocks that change the heuristic you are shown. No other text.")
EDIT_SHAPE = ("Answer format: {{your idea in one sentence}}, then one or more edit blocks, each exactly:\n"
              f"{SEARCH}\nlines copied exactly from the heuristic above\n{DIVIDER}\nthe lines that replace them\n"
              f"{REPLACE}\nEach SEARCH must match one place in the heuristic; keep the function {{name}} and its "
              "signature.")


def instructions(function_name: str) -> tuple[str, ...]:
    """Every instruction the prompts give, as sent for `function_name`: what a reply's idea must not
    merely echo back (coevolve.codeparse.echoes)."""
    return (SYSTEM, EDIT_SYSTEM, ANSWER_SHAPE.format(name=function_name), EDIT_SHAPE.format(name=function_name),
            *(operators.get(name).instruction for name in operators.proposal_names()))


class Parent(Protocol):
    code: str | None
    idea: str | None
    objective: float | None


class Failed(Parent, Protocol):
    failure: str | None
    message: str


def _fenced(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def _evaluation(notes: Sequence[str], i: int) -> str:
    return f"Evaluation: {notes[i]}\n" if i < len(notes) and notes[i] else ""


def _describe(parents: Sequence[Parent], direction: str, show_scores: bool = True, notes: Sequence[str] = ()) -> str:
    better = "lower" if direction == "min" else "higher"
    if len(parents) == 1:
        p = parents[0]
        score = f" (score {p.objective:.4g}, {better} is better)" if show_scores else ""
        return f"Current heuristic{score}. Idea: {{{p.idea or 'none'}}}\n{_evaluation(notes, 0)}{_fenced(p.code or '')}"
    blocks = [f"Heuristic {i + 1}{f' (score {p.objective:.4g})' if show_scores else ''}. "
              f"Idea: {{{p.idea or 'none'}}}\n{_evaluation(notes, i)}{_fenced(p.code or '')}"
              for i, p in enumerate(parents)]
    heading = f"{len(parents)} heuristics ({better} score is better):" if show_scores else f"{len(parents)} heuristics:"
    return heading + "\n\n" + "\n\n".join(blocks)


@dataclass(frozen=True)
class Context:
    """What a prompt carries besides the operator's parents (all optional)."""

    skill: str = ""  # the rendered SKILL.md body; appended to the system prompt
    failures: tuple[str, ...] = ()  # failure reports (see `failure_report`), shown under the task
    signature: str = ""  # e.g. "def f(a, b):", stated in the answer-shape line
    # one per parent, in order ("" for none): what its evaluation said besides the score
    # (coevolve.search.feedback.parent_note), shown under the parent's idea
    notes: tuple[str, ...] = ()


_MARKERS = re.compile(r"\s*[~^]+[~^\s]*")  # what a traceback prints under the expression that failed


def _unquoted(message: str, line: str) -> str:
    """`message` without the traceback's quotes of `line` and the ~^ markers under them: the report
    states the failing line once, not twice."""
    kept: list[str] = []
    dropped = False
    for text in message.splitlines():
        dropped = text.strip() == line or (dropped and _MARKERS.fullmatch(text) is not None)
        if not dropped:
            kept.append(text)
    return "\n".join(kept)


def failure_report(kind: str, message: str, line: str, limit: int) -> str:
    """One failure as the proposer sees it: kind, the message's last lines and
    the failing source line (once), fenced and cut to about `limit` characters."""
    line = line.strip()
    text = (_unquoted(message, line) if line else message).strip() or kind
    if line:
        text = f"{text}\nfailing line: {line}"
    return f"{kind}:\n{fence(text, limit=limit)}"


_CANDIDATE_LINE = re.compile(r'(?:File "<candidate>", line |line )(\d+)')


def failing_line(candidate: Failed) -> str:
    """The candidate's source line its error points at (the last one the traceback names)."""
    numbers = _CANDIDATE_LINE.findall(candidate.message or "")
    lines = (candidate.code or "").splitlines()
    if numbers and 1 <= int(numbers[-1]) <= len(lines):
        return lines[int(numbers[-1]) - 1]
    return ""


def describe_failure(candidate: Failed, limit: int) -> str:
    """A failed candidate's report for a prompt: kind, message, failing line."""
    if candidate.failure == "parse":  # an edit that did not apply says why; a reply with no code, this
        message = ("the answer ran out of room before its ```python block ended; write a shorter one"
                   if candidate.message == NO_CODE_CUT_OFF
                   else candidate.message if candidate.message and candidate.message != NO_CODE
                   else "the answer had no ```python block with the function")
    else:
        lines = (candidate.message or "").strip().splitlines()
        message = "\n".join(lines[-3:])  # a traceback's end says what went wrong
    return failure_report(candidate.failure or "invalid", message, failing_line(candidate), limit)


def _failed(parent: Parent, report: str) -> str:
    return (f"Heuristic that failed; do not return it unchanged. Idea: {{{parent.idea or 'none'}}}\n"
            f"{_fenced(parent.code or '')}\n"
            f"Its error ({report})")


def operator_messages(operator: str, description: str, template: str, function_name: str,
                      direction: str, parents: Sequence[Parent] = (), show_scores: bool = True,
                      context: Context = Context()) -> list[Message]:
    """The chat for one request of `operator`; i1 takes no parents, m* and
    repair one (repair's: the failed candidate, its report first in
    `context.failures`), e* several. `show_scores`: whether parents' scores
    appear (EoH's own prompts leave them out)."""
    try:
        op = operators.get(operator)
    except UsageError:
        raise ValueError(f"unknown operator {operator!r} (known: {', '.join(operators.proposal_names())})") from None
    if op.parentless and parents:
        raise ValueError(f"operator {operator} takes no parents")
    if not op.parentless and not parents:
        raise ValueError(f"operator {operator} needs at least one parent")
    if op.failed_parent and not context.failures:
        raise ValueError(f"operator {operator} needs the parent's failure report in context.failures")
    parts = [description.strip()]
    failures = list(context.failures)
    if op.parentless:
        parts.append("Template:\n" + _fenced(template))
    elif op.failed_parent:
        parts.append(_failed(parents[0], failures.pop(0)))
    else:
        parts.append(_describe(parents, direction, show_scores, context.notes))
    if failures:
        parts.append("Recent attempts that failed; do not repeat their mistakes or copy their failing lines:\n"
                     + "\n".join(failures))
    parts.append(op.instruction)
    edit = op.answer == "blocks"
    shape = (EDIT_SHAPE if edit else ANSWER_SHAPE).format(name=function_name)
    if context.signature and not edit:  # an edit keeps the parent's def line unless a block changes it
        shape += f" The function must start with exactly: {context.signature}"
    parts.append(shape)
    system = EDIT_SYSTEM if edit else SYSTEM
    if context.skill:
        system += f"\n\nSkill for this problem (learnt from earlier attempts):\n{context.skill.strip()}"
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]
