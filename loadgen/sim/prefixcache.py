"""The simulator's prefix cache: which leading tokens of a prompt a server would not prefill again.

In: token sequences (lists of token strings, ``loadgen.workloads.tokens.split``, the simulator's token rule).
Out: :meth:`PrefixCache.match`, how many leading tokens of a sequence are cached (touching them), and
:meth:`PrefixCache.insert`, which caches a sequence's every prefix.

A sequence is kept as one entry per token position, its chained hash h_k = hash((h_{k-1}, tok_k)) (h_0 = 0),
in an LRU of at most ``capacity_tokens`` entries: one entry is one token of KV, as a radix tree's node holds
one token per slot. Both operations touch a sequence's prefixes longest first, so a prefix is always at least
as recent as every extension of it: the LRU end then holds leaves only, and eviction trims chains from their
tails, as a radix tree evicts leaves, never breaking one in the middle (a kept h_k always has its h_{k-1}).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def chain(tokens: Sequence[str]) -> list[int]:
    """The chained hashes of ``tokens``' prefixes: [h_1, …, h_n]."""
    out, h = [], 0
    for tok in tokens:
        h = hash((h, tok))
        out.append(h)
    return out


class PrefixCache:
    """An LRU of token-prefix hashes, at most ``capacity_tokens`` of them."""

    __slots__ = ("capacity_tokens", "_lru", "evicted")

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens <= 0:
            raise ValueError(f"a prefix cache needs a capacity > 0 tokens, got {capacity_tokens}")
        self.capacity_tokens = capacity_tokens
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.evicted = 0
        """Token entries evicted over capacity since the start (or the last clear)."""

    def __len__(self) -> int:
        return len(self._lru)

    def match(self, tokens: Sequence[str]) -> int:
        """The longest cached prefix of ``tokens``, at most len - 1 (an engine always computes the last prompt
        token, whose logits give the first output token); the prefixes used become the most recent."""
        lru = self._lru
        used: list[int] = []
        h = 0
        for tok in tokens[: len(tokens) - 1]:
            h = hash((h, tok))
            if h not in lru:
                break
            used.append(h)
        for h in reversed(used):
            lru.move_to_end(h)
        return len(used)

    def insert(self, tokens: Sequence[str]) -> None:
        """Cache every prefix of ``tokens`` (the whole sequence included), then evict over capacity."""
        lru = self._lru
        for h in reversed(chain(tokens)):
            lru[h] = None
            lru.move_to_end(h)
        over = len(lru) - self.capacity_tokens
        if over > 0:
            self.evicted += over
            for _ in range(over):
                lru.popitem(last=False)

    def clear(self) -> None:
        """Empty it (``/flush_cache``, ``/reset_prefix_cache``)."""
        self._lru.clear()
        self.evicted = 0
