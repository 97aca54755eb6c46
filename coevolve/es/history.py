"""history.jsonl: one record per ES generation, appended durably (see
coevolve.base.durable), so a run killed at any point keeps every finished
update and a fresh engine can replay them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevolve.base import durable


def append(path: str | Path, record: dict[str, Any]) -> None:
    durable.append_jsonl(path, record)


def read(path: str | Path) -> list[dict[str, Any]]:
    return durable.read_jsonl(path)


def read_numbered(path: str | Path) -> list[tuple[int, Any]]:
    """read(), each record with its line number in the file (1-based), so a
    refusal can name the line a user would open; blank lines are skipped and
    the torn tail ignored, as read() does."""
    records = read(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    complete = raw[: raw.rfind(b"\n") + 1]  # the torn tail after the last newline is no record
    numbers = [n for n, line in enumerate(complete.split(b"\n")[:-1], start=1) if line.strip()]
    return list(zip(numbers, records))


def truncate_torn_tail(path: str | Path) -> None:
    """Drop a partial last line so the next append starts on a clean line."""
    durable.repair_jsonl(path)
