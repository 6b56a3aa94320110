"""The private channel between the evaluator and its sandbox: length-prefixed JSON frames.

Each frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON holding one object.
JSON, never pickle: the sandbox runs untrusted native code, which could write anything into its
end of the pipe, and unpickling would run it in the evaluator. A frame larger than
``MAX_FRAME_BYTES`` or that is not a JSON object is a ``ChannelError``.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

MAX_FRAME_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ChannelError(Exception):
    """A malformed frame."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, allow_nan=True).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ChannelError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write one whole frame to ``fd`` (blocking)."""
    data = memoryview(encode_frame(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _decode(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ChannelError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ChannelError(f"frame holds a {type(message).__name__}, not an object")
    return message


def read_frame(fd: int) -> dict[str, Any] | None:
    """Read one frame from ``fd`` (blocking); None at end of file."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise ChannelError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    body = _read_exactly(fd, size)
    if body is None:
        raise ChannelError("end of file inside a frame")
    return _decode(body)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            if remaining == size:
                return None
            raise ChannelError("end of file inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class FrameBuffer:
    """Incremental decoder for a non-blocking reader: feed bytes, take whole frames."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._data += data
        frames = []
        while len(self._data) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._data)
            if size > MAX_FRAME_BYTES:
                raise ChannelError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
            end = _HEADER.size + size
            if len(self._data) < end:
                break
            frames.append(_decode(bytes(self._data[_HEADER.size:end])))
            del self._data[:end]
        return frames
