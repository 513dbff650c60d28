"""Incremental Server-Sent Events parser over raw bytes.

Correct whatever the TCP chunk boundaries: lines split across reads, CRLF or CR
line ends (a CR at the end of one read may pair with an LF at the start of the
next), comments, several events in one read, and multi-byte characters split
across reads (we stay in bytes; JSON decoding happens on whole events).

Only what LLM servers use is kept: the ``data`` payload of each event and its
``event`` name (SGLang's only named event is ``sglext_ids``). ``id`` and
``retry`` fields are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Event:
    data: bytes
    name: bytes = b""


class SSEParser:
    """Feed bytes, get complete events. One parser per response stream."""

    __slots__ = ("_buf", "_pending_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[Event]:
        if self._pending_cr:
            # The previous read ended with CR: if this one starts with LF they are one line end.
            chunk = b"\r" + chunk
            self._pending_cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk = chunk[:-1]
                self._pending_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        events = []
        for block in blocks:
            ev = _parse_block(block)
            if ev is not None:
                events.append(ev)
        return events

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """The data of every event ``chunk`` completes, in order: what the client reads (names dropped).

        One split of the read and a slice per event, no object per event: the client's per-chunk path
        (``feed`` builds an :class:`Event` each). Whatever the chunk, the same data as ``feed``'s events.
        """
        if self._pending_cr or b"\r" in chunk:
            return [ev.data for ev in self.feed(chunk)]
        blocks = (self._buf + chunk if self._buf else chunk).split(b"\n\n")
        self._buf = blocks.pop()
        out = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                out.append(block[6:])
            elif (ev := _parse_block(block)) is not None:
                out.append(ev.data)
        return out

    def close(self) -> list[Event]:
        """End of stream: a last event without its blank line is still delivered.

        The SSE spec discards it, but a server that closes right after its final
        ``data:`` line has still sent it, and dropping it would lose the usage.
        """
        if self._pending_cr:
            self._pending_cr = False
        block, self._buf = self._buf, b""
        ev = _parse_block(block.rstrip(b"\n")) if block.strip() else None
        return [ev] if ev is not None else []


def _parse_block(block: bytes) -> Event | None:
    # Fast path: the overwhelmingly common single "data: {...}" line.
    if block.startswith(b"data:") and b"\n" not in block:
        data = block[5:]
        return Event(data[1:] if data.startswith(b" ") else data)
    data_lines: list[bytes] = []
    name = b""
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        field, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data_lines.append(value)
        elif field == b"event":
            name = value
    if not data_lines:
        return None
    return Event(b"\n".join(data_lines), name)
