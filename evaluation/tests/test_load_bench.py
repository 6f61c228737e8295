"""The load test's own parts: its websocket frames, and how it counts what happened."""

from __future__ import annotations

import asyncio
import struct

from evaluation.load_bench import SessionOutcome, _frame, read_text, summarise


class _Writer:
    def __init__(self) -> None:
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data


def _server_frame(data: bytes, opcode: int, *, final: bool = True) -> bytes:
    first = (0x80 if final else 0) | opcode
    if len(data) < 126:
        return struct.pack("!BB", first, len(data)) + data
    return struct.pack("!BBH", first, 126, len(data)) + data


def _read(stream: bytes, writer: _Writer) -> str:
    async def read() -> str:
        reader = asyncio.StreamReader()
        reader.feed_data(stream)
        reader.feed_eof()
        return await read_text(reader, writer)

    return asyncio.run(read())


def test_a_client_frame_is_masked_and_unmasks_to_its_text():
    text = "问题 " * 100  # past 125 bytes: the 16-bit length form
    frame = _frame(text.encode())
    assert frame[0] == 0x81 and frame[1] == 0x80 | 126
    (length,) = struct.unpack("!H", frame[2:4])
    mask, body = frame[4:8], frame[8:]
    assert length == len(body) and bytes(b ^ mask[i % 4] for i, b in enumerate(body)).decode() == text


def test_fragments_join_and_a_ping_is_answered_before_the_text():
    writer = _Writer()
    stream = _server_frame(b"ping!", 0x9) + _server_frame(b"<div>", 0x1, final=False) + _server_frame(b"ok</div>", 0x0)
    assert _read(stream, writer) == "<div>ok</div>"
    assert writer.sent[0] == 0x8A  # a pong, masked like every client frame
    assert writer.sent[1] & 0x80


def test_a_close_frame_is_a_broken_socket():
    try:
        _read(_server_frame(b"", 0x8), _Writer())
    except ConnectionError as error:
        assert "closed" in str(error)
    else:
        raise AssertionError("a close frame was read as text")


def test_the_summary_tells_errors_from_lost_answers():
    outcomes = [
        *(SessionOutcome(first_event_ms=float(n), final_ms=100.0 + n) for n in range(1, 99)),
        SessionOutcome(first_event_ms=5.0),  # no final fragment: lost
        SessionOutcome(error="connect: refused"),
    ]
    report = summarise(outcomes, servers=2, seconds=1.234)
    assert (report["sessions"], report["errors"], report["lost"], report["servers"]) == (100, 1, 1, 2)
    assert report["first_event_ms"] == {"p50": 49.0, "p99": 98.0}  # nearest rank over 99 first events
    assert report["final_ms"] == {"p50": 149.0, "p99": 198.0}
    assert report["error_examples"] == ["connect: refused"]
