"""Per-chunk token counts for servers that do not send them (docs/metrics.md §Token counts).

Order of preference, applied after the stream ends so no tokenizer runs on the
hot path:
1. Per-chunk server usage (already in the record): exact.
2. The final usage equals the number of uncounted text chunks: every text chunk
   carries at least one token, so each carries exactly one: exact
   (llama.cpp streams one token per event, even when drafts are accepted).
   One more token than text chunks on a request that finished with "stop" is the
   token that ended it (EOS / end of turn, or a one-token stop string): servers
   count it but stream no text for it (llama.cpp). It arrived with the
   finish event, at the end of the stream: one more one-token chunk, stamped
   with the stream's end. Exact.
3. A tokenizer the user named counts each chunk's text, scaled to the final
   usage when there is one: approximate.
4. The final usage spread evenly over the chunks: approximate.
5. No usage at all: one token per chunk: approximate.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Callable

from loadgen.record import RequestRecord

TokenCounter = Callable[[str], int]
"""Text → its number of tokens (a tokenizer's count; not :class:`loadgen.workloads.Tokenizer`, which also cuts)."""


def reconcile(
    rec: RequestRecord,
    final_total: int | None,
    texts: list[str],
    tokenizer: TokenCounter | None = None,
) -> None:
    """Replace the ``UNKNOWN`` (-1) entries of ``rec.chunk_tokens`` with counts.

    ``texts`` holds the text of each unknown chunk, in order. Chunks that end up
    with zero tokens are removed, so every kept chunk carries at least one.
    """
    counts = rec.chunk_tokens
    unknown = [i for i, c in enumerate(counts) if c < 0]
    if (final_total is not None and final_total == len(counts) + 1 and len(unknown) == len(counts)
            and rec.finish_reason == "stop"):
        # The silent stop token (case 2 above): it came with the finish event, at the stream's end.
        for i in unknown:
            counts[i] = 1
        rec.chunk_ns.append(max(rec.end_ns, rec.chunk_ns[-1] if rec.chunk_ns else 0))
        counts.append(1)
        return
    if not unknown:
        return
    known = sum(c for c in counts if c >= 0)
    remainder = None if final_total is None else final_total - known
    n = len(unknown)
    if remainder == n:
        fill = [1] * n
    else:
        rec.token_counts_exact = False
        if tokenizer is not None and len(texts) == n:
            fill = [max(1, tokenizer(t)) for t in texts]
            if remainder is not None and remainder > 0:
                fill = _scale(fill, remainder)
        elif remainder is not None and remainder > 0:
            fill = [remainder // n + (1 if k < remainder % n else 0) for k in range(n)]
        else:
            fill = [1] * n
    for i, v in zip(unknown, fill):
        counts[i] = v
    if 0 in counts:
        keep = [i for i, c in enumerate(counts) if c > 0]
        rec.chunk_ns = array("q", (rec.chunk_ns[i] for i in keep))
        rec.chunk_tokens = array("l", (counts[i] for i in keep))
        if rec.reasoning_spans:
            # a span's ends move down by the chunks dropped before them
            spans = ((bisect_left(keep, lo), bisect_left(keep, hi)) for lo, hi in rec.reasoning_spans)
            rec.reasoning_spans = tuple((lo, hi) for lo, hi in spans if hi > lo)


def _scale(values: list[int], total: int) -> list[int]:
    """Integer counts proportional to ``values`` that sum to ``total`` (largest remainder)."""
    s = sum(values)
    raw = [v * total / s for v in values]
    out = [int(r) for r in raw]
    short = total - sum(out)
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[:short]:
        out[i] += 1
    return out


def load_counter(path: str) -> TokenCounter:
    """A token counter from a tokenizer.json file or its folder (the same loader the workloads use)."""
    from loadgen.workloads.tokenizers import load_tokenizer

    return load_tokenizer(path).count

