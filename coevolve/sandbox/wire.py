"""Length-prefixed pickle messages over pipe file descriptors.

Used between the Sandbox and its workers and between a worker and each
candidate child. Reads take a deadline so a silent peer never hangs the
reader.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct("!Q")


class PeerGone(Exception):
    """The other end closed the pipe (it exited or died)."""


class WireTimeout(Exception):
    """No complete message before the deadline."""


def send(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exactly(fd: int, count: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while count:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WireTimeout()
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise WireTimeout()
        chunk = os.read(fd, min(count, 1 << 20))
        if not chunk:
            raise PeerGone()
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None) -> Any:
    """Next message from `fd`; `deadline` is a time.monotonic() value."""
    (length,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exactly(fd, length, deadline))


def recv_bytes(data: bytes) -> Any:
    """Decode one complete message already read into memory."""
    (length,) = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if len(payload) != length:
        raise ValueError(f"truncated message: {len(payload)} of {length} bytes")
    return pickle.loads(payload)
