"""Text that a candidate program (or an LLM) wrote, made safe to show.

A candidate's exception message, output and idea text travel into
candidates.jsonl, reports, the terminal and the next prompt. Two things must
never happen on the way: control sequences reaching a terminal (escape codes
that move the cursor or rewrite lines), and a candidate's text passing for
the tool's own output (a forged results row). `clean` removes the first; the
`fence` marks every line as quoted, so the second cannot happen either.
"""

from __future__ import annotations

import re
import unicodedata

# C0/C1 controls except newline and tab, DEL, and the Unicode format/line
# separators a terminal or a markdown renderer may act on.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Whole terminal escape sequences (CSI "ESC [ ... letter", OSC "ESC ] ... BEL/ST",
# 8-bit CSI), removed before the lone control characters so no "[2K" is left over.
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x9b[0-?]*[ -/]*[@-~]")
FENCE = "│ "
# a reasoning model's thinking; an unclosed block ran to the reply's end (the reply was cut off while thinking)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)


def without_reasoning(text: str) -> tuple[str, int]:
    """A reply less its `<think>` blocks, and how many there were: drafts in them (code, rules) are not
    the answer, and servers without a reasoning parser send them in the reply."""
    return _THINK.subn("", text)


def clean(text: object, limit: int | None = None) -> str:
    """`text` as a printable string: control characters dropped (newlines and
    tabs kept), cut to its last `limit` characters (where errors say what
    went wrong) with a marker when cut."""
    value = unicodedata.normalize("NFC", str(text if text is not None else ""))
    value = _CONTROL.sub("", _ESCAPE.sub("", value))
    if limit is not None and len(value) > limit:
        value = "…" + value[-max(limit - 1, 0):]
    return value


def fence(text: object, limit: int | None = None, prefix: str = FENCE) -> str:
    """`clean(text)` with every line behind `prefix`: quoted material that
    cannot start a line of its own (no forged table row or verdict)."""
    body = clean(text, limit)
    return "\n".join(prefix + line for line in body.splitlines()) if body else prefix.rstrip()
