"""Operator prompts (EoH's i1, e1, e2, m1, m2, m3, in our own words).

Kept short on purpose: the embedded 135M model loses the thread in long
prompts, and most of its failures are prose with no code. Every prompt asks
for the same answer shape: the idea in one sentence inside braces, then the
complete function in a single fenced python block.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from coevolve.engine.base import Message

SYSTEM = ("You are an expert in algorithm design. You answer with one sentence describing your idea "
          "inside braces, then the complete Python function in one ```python code block. No other text.")

ANSWER_SHAPE = ("Answer format: {{your idea in one sentence}}, then the complete function {name} "
                "in one ```python block, with the same signature.")

TASKS = {
    "i1": "Write a new heuristic for this problem, starting from the template below.",
    "e1": "Write a new heuristic whose idea is clearly different from every heuristic above.",
    "e2": ("Find the idea the heuristics above share, then write a new heuristic that keeps "
           "that idea but is built differently."),
    "m1": "Write an improved variant of the heuristic above; you may change its logic.",
    "m2": "Keep the logic of the heuristic above but change its constants and weights to score better.",
    "m3": "Simplify the heuristic above: drop parts that probably do not help, so that it generalises.",
}


class Parent(Protocol):
    code: str | None
    idea: str | None
    objective: float | None


def _fenced(code: str) -> str:
    return f"```python\n{code.strip()}\n```"


def _describe(parents: Sequence[Parent], direction: str, show_scores: bool = True) -> str:
    better = "lower" if direction == "min" else "higher"
    if len(parents) == 1:
        p = parents[0]
        score = f" (score {p.objective:.4g}, {better} is better)" if show_scores else ""
        return f"Current heuristic{score}. Idea: {{{p.idea or 'none'}}}\n{_fenced(p.code or '')}"
    blocks = [f"Heuristic {i}{f' (score {p.objective:.4g})' if show_scores else ''}. "
              f"Idea: {{{p.idea or 'none'}}}\n{_fenced(p.code or '')}"
              for i, p in enumerate(parents, start=1)]
    heading = f"{len(parents)} heuristics ({better} score is better):" if show_scores else f"{len(parents)} heuristics:"
    return heading + "\n\n" + "\n\n".join(blocks)


def operator_messages(operator: str, description: str, template: str, function_name: str,
                      direction: str, parents: Sequence[Parent] = (), show_scores: bool = True) -> list[Message]:
    """The chat for one request of `operator`; i1 takes no parents, m* one, e* several.
    `show_scores`: whether parents' scores appear (EoH's own prompts leave them out)."""
    if operator not in TASKS:
        raise ValueError(f"unknown operator {operator!r} (known: {', '.join(TASKS)})")
    if operator == "i1" and parents:
        raise ValueError("operator i1 takes no parents")
    if operator != "i1" and not parents:
        raise ValueError(f"operator {operator} needs at least one parent")
    parts = [description.strip()]
    if operator == "i1":
        parts.append("Template:\n" + _fenced(template))
    else:
        parts.append(_describe(parents, direction, show_scores))
    parts.append(TASKS[operator])
    parts.append(ANSWER_SHAPE.format(name=function_name))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]
