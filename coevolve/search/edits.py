"""Edit answers: the proposer changes its parent with SEARCH/REPLACE blocks
instead of writing the whole function again (the `diff` operator), as
OpenEvolve's and ShinkaEvolve's diff modes do. On a long program it costs a
fraction of the completion tokens and keeps the parts that already work.

The peers' users report most diff replies failing to apply (OpenEvolve
issue 346) and blocks applied one after another matching text an earlier
block wrote (aider issue 3964). Here the blocks are applied to the parent
all or none:
- every block is located in the parent before any is applied, and two blocks
  that change overlapping lines fail the edit;
- a block matches as written (trailing spaces ignored), else with all its
  lines' indentation shifted by one amount, its REPLACE lines shifted by the
  same amount (a block copied out of a nested scope at the wrong depth);
- a block that matches nowhere or in several places fails the edit with a
  message naming the block and the first SEARCH line the parent does not
  hold; the loop shows it under the failed sibling (context.failures), so the
  next request knows what went wrong.
A reply with no blocks but a whole function is taken as a whole program:
small models often answer that way, and the function is what counts.

Where the engine can constrain decoding (context.constrain), an edit reply
is decoded under `edit_pattern(parent)`: the idea in braces, then one block
whose SEARCH is one line of the parent's function body that occurs in it
once, so the block the model writes can always be placed. (The embedded
135M model, decoding freely, wrote no block in 36 requests:
benchmarks/results/s41/diff_ablation.md.)
"""

from __future__ import annotations

import ast
import re
from typing import Sequence

from coevolve.codeparse import Extracted, extract, pattern_literal

# markers as the prompt shows them (coevolve/search/prompts.py); 5 or more of each character are accepted
SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
_BLOCK = re.compile(r"^[ \t]*<{5,}[ \t]*SEARCH[ \t]*\n(.*?)^[ \t]*={5,}[ \t]*\n(.*?)^[ \t]*>{5,}[ \t]*REPLACE[ \t]*$",
                    re.M | re.S)
_OPENED = re.compile(r"^[ \t]*<{5,}[ \t]*SEARCH", re.M)
WHOLE = "whole program, no edit blocks"  # the repair a reply without blocks records
SEARCH_CHARS = 200  # longer parent lines are left out of the pattern's choices


class EditError(ValueError):
    """A reply whose edit cannot be applied; the message says why, for the proposer's next prompt."""


def _lines(block: str) -> list[str]:
    lines = [line.rstrip() for line in block.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def parse_blocks(text: str) -> list[tuple[list[str], list[str]]]:
    """The (SEARCH lines, REPLACE lines) of each block in a reply, in order."""
    text = text.replace("\r\n", "\n")
    blocks = [(_lines(m.group(1)), _lines(m.group(2))) for m in _BLOCK.finditer(text)]
    opened = len(_OPENED.findall(text))
    if opened > len(blocks):
        raise EditError(f"edit block {len(blocks) + 1} is not closed with {REPLACE} (was the answer cut off?)")
    return blocks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shift(line: str, by: int) -> str:
    """`line` indented `by` more columns (less, when negative; never below column 0)."""
    if not line or by == 0:
        return line
    return " " * by + line if by > 0 else line[min(-by, _indent(line)):]


def _offset(parent: list[str], at: int, search: list[str]) -> int | None:
    """The one indentation shift that makes `search` read as the parent's lines from `at`; None if none does."""
    first = next(i for i, line in enumerate(search) if line)
    by = _indent(parent[at + first]) - _indent(search[first])
    for mine, theirs in zip(search, parent[at:at + len(search)]):
        if (mine or theirs) and _shift(mine, by) != theirs:
            return None
    return by


def _locate(parent: list[str], search: list[str], number: int) -> tuple[int, int]:
    """Where block `number`'s SEARCH lines stand in the parent, and the indentation shift they needed."""
    if not search:
        raise EditError(f"edit block {number} has nothing under SEARCH: copy there the lines it replaces")
    starts = range(len(parent) - len(search) + 1)
    found = [(at, 0) for at in starts if parent[at:at + len(search)] == search]
    if not found:
        found = [(at, by) for at in starts for by in [_offset(parent, at, search)] if by is not None]
    if len(found) > 1:
        raise EditError(f"edit block {number}'s SEARCH matches {len(found)} places in the heuristic; copy more "
                        "lines around it so that it matches one")
    if not found:
        present = {line.strip() for line in parent}
        missing = next((line.strip() for line in search if line.strip() not in present), None)
        raise EditError(f"edit block {number}'s SEARCH is not in the heuristic: " +
                        (f"no line of it reads `{missing}`" if missing is not None else
                         "its lines are there, but not together in this order") +
                        "; copy the lines exactly")
    return found[0]


def apply_blocks(code: str, blocks: list[tuple[list[str], list[str]]]) -> tuple[str, list[str]]:
    """`code` with every block applied, all located in `code` first; and the repairs made (re-indented
    blocks). EditError when any block cannot be placed: then nothing is applied."""
    parent = [line.rstrip() for line in code.split("\n")]
    spans, repairs = [], []
    for number, (search, replace) in enumerate(blocks, 1):
        at, by = _locate(parent, search, number)
        if by:
            repairs.append(f"reindented edit block {number} by {by} columns")
        spans.append((at, at + len(search), [_shift(line, by) for line in replace], number))
    spans.sort()
    for (_, end, _, a), (start, _, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise EditError(f"edit blocks {min(a, b)} and {max(a, b)} change overlapping lines; make them one block")
    for start, end, lines, _ in reversed(spans):
        parent[start:end] = lines
    return "\n".join(parent).strip("\n") + "\n", repairs


def edited(text: str, parent: str, function_name: str, template: str, instructions: Sequence[str] = ()) -> Extracted:
    """The program an edit reply makes of `parent`: its blocks applied, then read as any
    reply's program is (the template's imports, the function's name, an idea that is no echo of
    `instructions`); a reply with no blocks is read as a whole program. EditError says why no
    program came of it."""
    blocks = parse_blocks(text)
    if not blocks:
        whole = extract(text, function_name, template, instructions)
        if whole is None:
            raise EditError(f"the answer had no {SEARCH} ... {REPLACE} blocks (and no whole function either)")
        return Extracted(whole.code, whole.idea, whole.repairs + (WHOLE,))
    code, repairs = apply_blocks(parent, blocks)
    prose = text[:_OPENED.search(text).start()]  # the idea in braces stands before the first block
    program = extract(f"{prose.strip()}\n```python\n{code}```\n", function_name, template, instructions)
    if program is None:
        raise EditError(f"the edited heuristic no longer defines {function_name}")
    return Extracted(program.code, program.idea, program.repairs + tuple(repairs))


def edit_pattern(parent: str) -> str | None:
    """A decoding pattern for an edit of `parent`: the idea in braces, then one block that replaces one
    line of the function's body (not of its docstring; one that occurs once in the parent) with one to
    eight indented lines without double quotes (as the program pattern's body lines). One block: the
    small model otherwise repeats the block on the same line (overlapping edits) or rambles in the
    replacement until its tokens run out (benchmarks/results/s41/edit_patterns_check.txt). None when the
    parent has no such line or does not parse."""
    try:
        tree = ast.parse(parent)
    except (SyntaxError, ValueError):
        return None
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = [line.rstrip() for line in parent.split("\n")]
    unique = [line for number, line in enumerate(lines, 1)
              if line[:1].isspace() and line.strip() and number not in docstrings and lines.count(line) == 1
              and len(line) <= SEARCH_CHARS]
    if not unique:
        return None
    choice = "(" + "|".join(pattern_literal(line) for line in dict.fromkeys(unique)) + ")"
    return (r"\{[^{}\n]{8,200}\}\n" + f"{SEARCH}\\n{choice}\\n{DIVIDER}\\n" + r'(    [^"\n]{0,160}\n){1,8}'
            + f"{REPLACE}\\n")
