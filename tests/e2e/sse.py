"""A minimal OpenAI-style SSE client on plain aiohttp (independent of loadgen's own)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class StreamResult:
    events: list[dict[str, Any]] = field(default_factory=list)  # parsed JSON events, in order
    arrivals: list[float] = field(default_factory=list)          # monotonic time of each event
    texts: list[str] = field(default_factory=list)               # text of each event that carried text
    text_times: list[float] = field(default_factory=list)        # arrival time of those events
    done: bool = False                                            # saw `data: [DONE]`
    sent_at: float = 0.0

    @property
    def text(self) -> str:
        return "".join(self.texts)

    @property
    def usage(self) -> dict[str, Any] | None:
        for ev in reversed(self.events):
            if ev.get("usage"):
                return ev["usage"]
        return None

    @property
    def timings(self) -> dict[str, Any] | None:
        for ev in reversed(self.events):
            if ev.get("timings"):
                return ev["timings"]
        return None

    @property
    def finish_reason(self) -> str | None:
        for ev in reversed(self.events):
            for ch in ev.get("choices") or []:
                if ch.get("finish_reason"):
                    return ch["finish_reason"]
        return None

    def client_decode_tps(self) -> float | None:
        """Tokens per second after the first text event, as the client saw them."""
        if len(self.text_times) < 2:
            return None
        span = self.text_times[-1] - self.text_times[0]
        return (len(self.text_times) - 1) / span if span > 0 else None


def _event_text(ev: dict[str, Any]) -> str:
    out = []
    for ch in ev.get("choices") or []:
        if "delta" in ch:
            out.append((ch.get("delta") or {}).get("content") or "")
        else:
            out.append(ch.get("text") or "")
    return "".join(out)


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                 timeout: float = 120.0) -> StreamResult:
    """POST ``body`` (``stream`` and ``stream_options.include_usage`` forced on) and read the SSE stream."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    res = StreamResult(sent_at=time.monotonic())
    async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        if r.status != 200:
            raise AssertionError(f"{url}: HTTP {r.status}: {(await r.text())[:500]}")
        buf = b""
        async for chunk in r.content.iter_any():
            now = time.monotonic()
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    res.done = True
                    continue
                ev = json.loads(data)
                res.events.append(ev)
                res.arrivals.append(now)
                text = _event_text(ev)
                if text:
                    res.texts.append(text)
                    res.text_times.append(now)
    return res
