"""loadgen's built-in approximate tokenizer, shared by the simulator and the workloads.

Rule (documented in docs/metrics.md): a token is a run of word characters or a
single other non-space character, each carrying the whitespace in front of it;
trailing whitespace at the very end is one more token. Concatenating the tokens
gives back the text exactly, so a streamed text delta and its token count always
agree, and a server built on this rule is checkable to the token.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")


def split(text: str) -> list[str]:
    """Tokens of ``text``; ``"".join(split(t)) == t`` for every string."""
    return _TOKEN.findall(text)


def count(text: str) -> int:
    """Number of tokens in ``text``."""
    return sum(1 for _ in _TOKEN.finditer(text))
