"""Paths a config names count from the folder of the TOML that names them (not
from wherever the command was started), and the run directory records them
absolute, so its config.toml finds them from any folder (--resume, `coevolve
eval --run`, a comparison's report). Applied to the raw tables before
validation: a value that is not a non-empty string is left for validation to name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection


def counted(path: Any, base: str | Path) -> Any:
    """`path` counted from `base` and made absolute (an absolute one stays where it is)."""
    if not (isinstance(path, str) and path):
        return path
    return str((Path(base) / Path(path).expanduser()).resolve())


def counted_from(raw: Any, base: str | Path, section: str, key: str, keep: Collection[str] = ()) -> Any:
    """`raw` (a config's tables) with `[section] key`, one path or a list of them, counted from `base`;
    values in `keep` name no file (e.g. the embedded model's names) and stay as written."""
    table = raw.get(section) if isinstance(raw, dict) else None
    if not (isinstance(table, dict) and key in table):
        return raw
    value = table[key]

    def one(path: Any) -> Any:
        return path if isinstance(path, str) and path in keep else counted(path, base)

    return {**raw, section: {**table, key: [one(p) for p in value] if isinstance(value, list) else one(value)}}
