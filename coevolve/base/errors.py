"""Errors every layer may raise. The CLI turns them into one line and an exit
code; lower layers never import the CLI to raise them."""

from __future__ import annotations

import difflib
from typing import Any, Iterable


class UsageError(Exception):
    """A bad config, flag, file or run directory: reported as one line, exit code 2."""


class ConfigError(UsageError):
    """A config field that fails its rules; the message names the field."""


class CorruptFileError(UsageError, ValueError):
    """A durable file (coevolve.base.durable) damaged beyond a torn last line;
    the message names file and line. A ValueError too, for callers that parse."""


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`; did you mean 'eoh'?` for a misspelt name among `choices`, else "": appended to the
    message that lists them all, where the near one is easy to miss."""
    if not isinstance(word, str):
        return ""
    choices = list(choices)
    # the same name in other case first: difflib scores 'TSP_construct' nearer 'kp_construct' than 'tsp_construct'
    same = [c for c in choices if c.lower() == word.lower()]
    match = same or difflib.get_close_matches(word, choices, n=1, cutoff=0.6) \
        or difflib.get_close_matches(word.lower(), choices, n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else ""


def plural(n: int, noun: str, many: str = "") -> str:
    """`1 analyst`, `2 analysts` (`many`: an irregular plural) in the messages people read."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def word_cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut at a word with "..." when it is longer: a message
    stored or shown at a fixed width that would otherwise stop mid-word ("use a vLL")."""
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."
