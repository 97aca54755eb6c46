"""Length-prefixed messages over pipe file descriptors: JSON plus raw numeric
arrays. Never pickle: a candidate's child writes one of these messages, and
decoding must not be able to run code or build arbitrary objects.

A frame is a 16-byte header (JSON length, blob length), the UTF-8 JSON
document, then the blob. A numpy array inside the message travels as
{"__array__": [offset, dtype, shape]} in the JSON and its bytes in the blob.
Only little-endian int64, float64 and bool arrays exist on the wire; the
decoder checks every placeholder against the blob, and the reader refuses a
frame over `limit` bytes before reading it.

Used between the Sandbox and its workers and between a worker and each
candidate child. Reads take a deadline so a silent peer never hangs the
reader.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from typing import Any

import numpy as np

_HEADER = struct.Struct("!QQ")
HEADER_SIZE = _HEADER.size
_ARRAY_KEY = "__array__"
DTYPES = {"<i8": np.dtype("<i8"), "<f8": np.dtype("<f8"), "|b1": np.dtype("|b1")}
DEFAULT_LIMIT = 1 << 30  # bytes; messages between trusted processes


class PeerGone(Exception):
    """The other end closed the pipe (it exited or died)."""


class WireTimeout(Exception):
    """No complete message before the deadline."""


class BadMessage(ValueError):
    """Bytes that are not a well-formed message (too big, truncated, malformed)."""


def encode(message: Any) -> bytes:
    """One frame for `message`: JSON values plus numpy arrays of the wire dtypes."""
    blobs: list[bytes] = []
    offset = 0

    def lift(value: Any) -> Any:
        nonlocal offset
        if isinstance(value, np.ndarray):
            name = {"i": "<i8", "u": "<i8", "f": "<f8", "b": "|b1"}.get(value.dtype.kind)
            if name is None:
                raise TypeError(f"arrays of dtype {value.dtype} do not travel on the wire")
            data = np.ascontiguousarray(value, dtype=DTYPES[name]).tobytes()
            placeholder = {_ARRAY_KEY: [offset, name, list(value.shape)]}
            blobs.append(data)
            offset += len(data)
            return placeholder
        if isinstance(value, dict):
            return {str(key): lift(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [lift(item) for item in value]
        if isinstance(value, (np.integer, np.bool_)):
            return value.item()
        if isinstance(value, np.floating):
            return float(value)
        return value

    document = json.dumps(lift(message), allow_nan=True, separators=(",", ":")).encode("utf-8")
    blob = b"".join(blobs)
    return _HEADER.pack(len(document), len(blob)) + document + blob


def send(fd: int, message: Any) -> None:
    data = memoryview(encode(message))
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


def _check_lengths(document_length: int, blob_length: int, limit: int) -> None:
    if document_length + blob_length > limit:
        raise BadMessage(f"message of {document_length + blob_length} bytes is over the {limit}-byte limit")


def recv(fd: int, deadline: float | None = None, limit: int = DEFAULT_LIMIT) -> Any:
    """Next message from `fd`; `deadline` is a time.monotonic() value."""
    document_length, blob_length = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    _check_lengths(document_length, blob_length, limit)
    document = _read_exactly(fd, document_length, deadline)
    blob = _read_exactly(fd, blob_length, deadline)
    return _decode(document, blob)


def frame_lengths(data: bytes | bytearray) -> tuple[int, int]:
    """(JSON length, blob length) from the header at the start of `data`:
    a reader checks them against its limits before it buffers the frame."""
    return _HEADER.unpack_from(data)


def decode(data: bytes, limit: int = DEFAULT_LIMIT) -> Any:
    """Decode one complete frame already read into memory; anything else in
    `data` (a short frame, trailing bytes) is a BadMessage."""
    if len(data) < _HEADER.size:
        raise BadMessage(f"truncated message: {len(data)} bytes, no complete header")
    document_length, blob_length = _HEADER.unpack_from(data)
    _check_lengths(document_length, blob_length, limit)
    if len(data) != _HEADER.size + document_length + blob_length:
        raise BadMessage(f"message of {len(data)} bytes, its header announces "
                         f"{_HEADER.size + document_length + blob_length}")
    start = _HEADER.size + document_length
    return _decode(data[_HEADER.size:start], data[start:])


def _decode(document: bytes, blob: bytes) -> Any:
    try:
        tree = json.loads(document.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, nesting too deep, huge ints
        raise BadMessage(f"malformed message: {type(exc).__name__}: {str(exc)[:200]}") from None
    view = memoryview(blob)

    def lower(value: Any, depth: int) -> Any:
        if depth > 64:
            raise BadMessage("message nested more than 64 levels deep")
        # in place: decoding costs the parsed tree once, never a second copy of it
        if isinstance(value, dict):
            if _ARRAY_KEY in value:
                return _array(value, view)
            for key, item in value.items():
                value[key] = lower(item, depth + 1)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                value[index] = lower(item, depth + 1)
        return value

    try:
        return lower(tree, 0)
    except BadMessage:
        raise
    except Exception as exc:  # any other surprise in the structure is still a malformed message
        raise BadMessage(f"malformed message: {type(exc).__name__}: {str(exc)[:200]}") from None


def _array(placeholder: dict[str, Any], blob: memoryview) -> np.ndarray:
    spec = placeholder[_ARRAY_KEY]
    if len(placeholder) != 1 or not isinstance(spec, list) or len(spec) != 3:
        raise BadMessage(f"malformed array placeholder {str(placeholder)[:100]}")
    offset, dtype_name, shape = spec
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise BadMessage(f"array dtype {str(dtype_name)[:20]!r} is not allowed on the wire")
    if not (isinstance(offset, int) and not isinstance(offset, bool) and isinstance(shape, list) and len(shape) <= 8
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d for d in shape)):
        raise BadMessage(f"malformed array placeholder {str(placeholder)[:100]}")
    dtype = DTYPES[dtype_name]
    nbytes = math.prod(shape) * dtype.itemsize
    if not 0 <= offset <= len(blob) - nbytes:
        raise BadMessage(f"array of {nbytes} bytes at offset {offset} lies outside the {len(blob)}-byte blob")
    # a copy: the array owns its memory, writable, independent of the frame
    return np.frombuffer(blob[offset:offset + nbytes], dtype=dtype).reshape(shape).copy()
