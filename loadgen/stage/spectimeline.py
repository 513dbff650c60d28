"""What speculation did through a stage's window, second by second: the stream's view beside the server's.

In: the window's draft buckets (loadgen/stage/switching.py: per 10 ms the chunks that arrived, those that
carried two tokens or more, and their tokens) and the server block's ``series`` (loadgen/serverview/summary.py:
per scrape the running gauge and the counters' changes). Out: :func:`second_by_second`, the stage's
``speculation_timeline`` in run.json, one entry a second of the window:

- from the stream: ``output_tokens`` (arrived that second), ``chunks``, ``drafting`` (the share of chunks that
  carried drafts: a server that streams a step an event sends drafts' tokens together) and ``tokens_per_chunk``
  (on such a server, 1 + the drafts accepted per step: the accept length as the client saw it);
- from the server, where it has /metrics: ``running`` (the gauge at the scrape that closed that second) and
  ``accept_length`` and ``draft_tokens`` over the scrape interval that ended in it (an engine that counts at a
  request's end books its drafts in the second it ended).

None where the stream showed no speculation (a plain server: nothing to draw). The report draws it for the
stages it flags and for adaptive configurations; the Locust tab says per stage what it showed.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.stage.switching import BUCKET_S, DraftBuckets

PER_S = int(round(1.0 / BUCKET_S))
"""10 ms buckets a second."""
SCRAPE_LATE_S = 0.1
"""A sampler set to scrape each second lands a few ms past it (1.002-1.02 s on the simulator's stages): that
scrape closes the second before, not the next one."""


def _per_second(a: np.ndarray, seconds: int) -> list[int]:
    padded = np.zeros(seconds * PER_S, np.int64)
    padded[:min(len(a), len(padded))] = a[:len(padded)]
    return padded.reshape(seconds, PER_S).sum(axis=1).tolist()


def _server_at(series: dict | None, key: str, seconds: int) -> list | None:
    """The server's ``key`` placed in the second its scrape interval ended in (the last one there that has it);
    a scrape up to SCRAPE_LATE_S past a second's end closes that second."""
    if not series or key not in series:
        return None
    out: list = [None] * seconds
    for t, v in zip(series["t_s"], series[key]):
        i = min(seconds - 1, max(0, math.ceil(t - SCRAPE_LATE_S) - 1))
        if v is not None:
            out[i] = v
    return out


def second_by_second(buckets: DraftBuckets, window_s: float, server: dict | None = None) -> dict | None:
    """The window's seconds (a last part-second counted as one), the stream's and the server's figures each."""
    if not buckets.multi.any():
        return None
    seconds = max(1, math.ceil(window_s - 1e-9))
    chunks = _per_second(buckets.chunks, seconds)
    multi = _per_second(buckets.multi, seconds)
    tokens = _per_second(buckets.tokens, seconds)
    out = {
        "t_s": list(range(1, seconds + 1)),
        "output_tokens": tokens,
        "chunks": chunks,
        "drafting": [round(m / c, 4) if c else None for m, c in zip(multi, chunks)],
        "tokens_per_chunk": [round(t / c, 3) if c else None for t, c in zip(tokens, chunks)],
    }
    series = (server or {}).get("series")
    for key in ("running", "accept_length", "draft_tokens"):
        at = _server_at(series, key, seconds)
        if at is not None and any(v is not None for v in at):
            out[f"server_{key}"] = at
    return out
