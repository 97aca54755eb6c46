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


def truncate_torn_tail(path: str | Path) -> None:
    """Drop a partial last line so the next append starts on a clean line."""
    durable.repair_jsonl(path)
