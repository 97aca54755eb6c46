"""history.jsonl: one record per ES generation, appended and fsynced, so a run
killed at any point keeps every finished update and a fresh engine can replay
them. A torn last line (a kill mid-write) is ignored on read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def append(path: str | Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, sort_keys=True) + "\n"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


def read(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for number, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            break  # torn tail of a killed write
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: corrupt history record: {exc}") from None
    return records


def truncate_torn_tail(path: str | Path) -> None:
    """Drop a partial last line so the next append starts on a clean line."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as handle:
            handle.truncate(cut)
