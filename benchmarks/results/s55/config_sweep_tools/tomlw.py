"""A small TOML writer for the sweep: nested tables as [a.b] headers, nan/inf as TOML's bare
nan/inf, datetimes as TOML dates, keys quoted where they must be."""
from __future__ import annotations

import datetime
import json
import math
import re

BARE = re.compile(r"[A-Za-z0-9_-]+")


class Raw(str):
    """A value written verbatim (e.g. a TOML literal the writer would not produce)."""


def key(k: str) -> str:
    return k if BARE.fullmatch(k) else json.dumps(k)


def value(v) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def dumps(data: dict, inline_depth: int = 2) -> str:
    """Top-level scalars first, then [section] tables; a dict value inside a section becomes a
    [section.sub] table when it holds dicts or we are at depth < inline_depth, else inline."""
    out: list[str] = []
    tables: list[tuple[list[str], dict]] = []
    for k, v in data.items():
        if isinstance(v, dict) and not isinstance(v, Raw):
            tables.append(([k], v))
        else:
            out.append(f"{key(k)} = {value(v)}")

    def emit(path: list[str], table: dict) -> None:
        lines, subs = [], []
        for k, v in table.items():
            if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
                subs.append((path + [k], v))
            elif isinstance(v, dict) and v and len(path) < inline_depth - 1 and k in ("arms",):
                subs.append((path + [k], v))
            else:
                lines.append(f"{key(k)} = {value(v)}")
        if lines or not subs:
            out.append("")
            out.append("[" + ".".join(key(p) for p in path) + "]")
            out.extend(lines)
        for p, t in subs:
            emit(p, t)

    for p, t in tables:
        emit(p, t)
    return "\n".join(out).lstrip("\n") + "\n"
