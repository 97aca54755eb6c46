"""Errors every layer may raise. The CLI turns them into one line and an exit
code; lower layers never import the CLI to raise them."""

from __future__ import annotations


class UsageError(Exception):
    """A bad config, flag, file or run directory: reported as one line, exit code 2."""


class ConfigError(UsageError):
    """A config field that fails its rules; the message names the field."""


class CorruptFileError(UsageError, ValueError):
    """A durable file (coevolve.base.durable) damaged beyond a torn last line;
    the message names file and line. A ValueError too, for callers that parse."""
