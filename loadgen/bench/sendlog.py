"""Client figures against a server's own send log, with one definition for both sides.

The server log gives, per request, when it read the request and when it wrote
each chunk with how many tokens. The same metric code (loadgen.metrics) runs
over the client's records and over records rebuilt from that log, so "error"
is exactly client figure − true figure.
"""

from __future__ import annotations

from array import array

from loadgen.metrics import BY_NAME
from loadgen.record import RequestRecord

COMPARED = ("ttft", "itl", "chunk_gap", "tokens_per_chunk")


def truth_record(rid: str, received_ns: int, sends: list, end_ns: int | None = None) -> RequestRecord:
    rec = RequestRecord("truth", "truth", rid, received_ns)
    rec.chunk_ns = array("q", (t for t, _ in sends))
    rec.chunk_tokens = array("l", (k for _, k in sends))
    rec.end_ns = end_ns or (sends[-1][0] if sends else received_ns)
    rec.output_tokens = sum(k for _, k in sends)
    return rec


def summarize(records: list[RequestRecord], names=COMPARED, lo_ns: int = -(1 << 62), hi_ns: int = 1 << 62) -> dict:
    """Summaries over the window [lo_ns, hi_ns), as a stage windows them: chunk-level metrics by the
    chunk's arrival, request-level ones by the request's start."""
    out = {}
    for name in names:
        m = BY_NAME[name]
        h = m.new_hist()
        for r in records:
            if m.level == "chunk" or lo_ns <= r.start_ns < hi_ns:
                m.observe(r, h, lo_ns, hi_ns)
        out[name] = h.summary(m.divisor)
    return out


def compare(client: list[RequestRecord], truth: list[RequestRecord], names=COMPARED) -> dict:
    """{metric: {"client": summary, "truth": summary, "error_p50": ..., "error_p99": ...}}."""
    c, t = summarize(client, names), summarize(truth, names)
    out = {}
    for name in names:
        row = {"client": c[name], "truth": t[name]}
        for p in ("p50", "p90", "p99"):
            if p in c[name] and p in t[name]:
                row[f"error_{p}"] = round(c[name][p] - t[name][p], 4)
        out[name] = row
    return out
