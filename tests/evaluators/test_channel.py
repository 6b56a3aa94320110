"""The sandbox's result channel and how a dead sandbox is put into words."""

from __future__ import annotations

import os
import signal
import struct

import pytest

from kernelswarm.evaluators.channel import (
    ChannelError,
    FrameBuffer,
    encode_frame,
    read_frame,
    write_frame,
)
from kernelswarm.evaluators.sandbox.crash import describe_exit


def test_frames_round_trip_through_a_pipe_and_end_of_file_is_none():
    r, w = os.pipe()
    write_frame(w, {"type": "progress", "shape": "d=8", "value": float("nan")})
    os.close(w)
    message = read_frame(r)
    assert message["shape"] == "d=8" and message["value"] != message["value"]
    assert read_frame(r) is None
    os.close(r)


def test_a_frame_arriving_in_pieces_is_decoded_once_whole():
    data = encode_frame({"a": 1}) + encode_frame({"b": 2})
    buffer = FrameBuffer()
    assert buffer.feed(data[:3]) == []
    assert buffer.feed(data[3:]) == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize("data, error", [
    (struct.pack(">I", 1 << 30), "exceeds"),
    (struct.pack(">I", 3) + b"[1]", "not an object"),
    (struct.pack(">I", 5) + b"\x80\x04K.", "not JSON"),  # a pickle is refused, never loaded
])
def test_forged_or_oversized_frames_are_refused(data, error):
    with pytest.raises(ChannelError, match=error):
        FrameBuffer().feed(data + b"\0" * 8)


def test_deaths_are_described_with_the_signal_and_its_usual_cause():
    text = describe_exit(-signal.SIGSEGV, "on shape d=8")
    assert text.startswith("SIGSEGV (segmentation fault) on shape d=8 — usually an out-of-bounds")
    assert describe_exit(-signal.SIGFPE, "x").startswith("SIGFPE (arithmetic exception)")
    assert "exited with status 3" in describe_exit(3, "on shape d=8")
