#!/usr/bin/env python3
"""Scrape a llama-server's /metrics every INTERVAL s into a JSON-lines file, until killed (standard library only).

    python3 bench/gpu/scrape.py URL OUT.jsonl [INTERVAL]

Each line: {"t_ns": CLOCK_MONOTONIC ns (the clock loadgen stamps its stage windows with), "up": bool,
"m": {counter: value}}. It keeps scraping while the server is down (between the baseline and the
speculative server on one port), so a restart shows as counters falling back to 0.
Counters only (``*_total``) and the two request gauges: llama.cpp's ``predicted_tokens_seconds`` gauge is
reset by every scrape, so it means nothing once loadgen scrapes the same server.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import urllib.request


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if not key.startswith("llamacpp:"):
            continue
        name = key[len("llamacpp:"):]
        if not (name.endswith("_total") or name.startswith("requests_") or "_total{" in name):
            continue
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def main() -> int:
    url, path = sys.argv[1].rstrip("/"), sys.argv[2]
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.25
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    with open(path, "a", buffering=1) as f:
        nxt = time.monotonic()
        while not stop:
            t = time.monotonic_ns()
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as r:
                    rec = {"t_ns": t, "up": True, "m": parse(r.read().decode())}
            except (OSError, ValueError):
                rec = {"t_ns": t, "up": False}
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            nxt += interval
            time.sleep(max(0.0, nxt - time.monotonic()))
            if nxt < time.monotonic() - 5 * interval:  # fell behind (server slow to answer): don't burst
                nxt = time.monotonic()
    return 0


if __name__ == "__main__":
    sys.exit(main())
