"""Readable output text, one ``loadgen.workloads.tokens`` token per simulated token.

Copy tasks echo the prompt's passage; everything else is sentences of words
taken from the prompt and a small built-in vocabulary. Tokens are produced so
that ``loadgen.workloads.tokens.count`` of any concatenation of them equals their number:
no whitespace-only tokens, and a word never directly follows a word without a
space (which would merge the two).
"""

from __future__ import annotations

import random
import re
import zlib

from loadgen.workloads import tokens as tok

_VOCAB = tuple(
    """the a of and to in is that it for on with as this be are by from at an which can will
    not or have one time system model request server token step batch answer question way
    simple small large first next more most other some each many very often also then when
    make use work need show give take find keep help explain run read write think know look
    data value result reason example point part case idea number word line page list group
    good new high low fast slow clear short long early late useful common basic main best
    because while where after before during between through about into over under again""".split()
)
_WORD = re.compile(r"[A-Za-z]{3,}")  # letters only: every echoed word must be exactly one token
_PASSAGE = re.compile(r'"([^"]{8,})"|\u201c([^\u201d]{8,})\u201d|```(?:\w*\n)?(.+?)```', re.S)


def copy_passage(prompt: str) -> str:
    """The text a copy/edit instruction refers to: a quoted or fenced passage, else what follows
    the first colon or line break, else the prompt itself."""
    m = _PASSAGE.search(prompt)
    if m:
        return next(g for g in m.groups() if g)
    for sep in (":\n", ":", "\n"):
        head, found, rest = prompt.partition(sep)
        if found and len(rest.strip()) >= 8:
            return rest.strip()
    return prompt.strip()


def token_id(piece: str) -> int:
    """A stable id for a token string (ids below 1000 are left for special tokens)."""
    return zlib.crc32(piece.encode("utf-8", "replace")) % 150_000 + 1000


class TextSource:
    """Lazily extended output tokens for one request; the same (prompt, seed) gives the same text."""

    __slots__ = ("_rng", "_cycle", "_pos", "_words", "_sentence_left", "pieces", "ids", "_ends_word")

    def __init__(self, prompt: str, kind: str, rng: random.Random) -> None:
        self._rng = rng
        self.pieces: list[str] = []
        self.ids: list[int] = []
        self._ends_word = False
        self._cycle: list[str] | None = None
        self._pos = 0
        if kind == "copy":
            cycle = [p for p in tok.split(copy_passage(prompt)) if p.strip()]
            self._cycle = cycle or None
        prompt_words = _WORD.findall(prompt)
        self._words = tuple(prompt_words) + _VOCAB
        self._sentence_left = 0

    @property
    def passage_tokens(self) -> int | None:
        """Length of the passage a copy task echoes (None if not a copy task)."""
        return len(self._cycle) if self._cycle is not None else None

    def _next_piece(self) -> str:
        if self._cycle is not None:
            piece = self._cycle[self._pos % len(self._cycle)]
            self._pos += 1
            return piece
        rng = self._rng
        if self._sentence_left == 0:
            self._sentence_left = rng.randint(6, 16)
            return " " + rng.choice(self._words).capitalize()
        self._sentence_left -= 1
        if self._sentence_left == 0:
            return "."
        if self._sentence_left > 2 and rng.random() < 0.06:
            return ","
        return " " + rng.choice(self._words).lower()

    def extend_to(self, n: int) -> None:
        pieces, ids = self.pieces, self.ids
        while len(pieces) < n:
            piece = self._next_piece()
            starts_word = piece[0].isalnum() or piece[0] == "_"
            if starts_word and self._ends_word:
                piece = " " + piece  # else the two words would re-tokenize as one
            elif not pieces and piece[0].isspace():
                piece = piece.lstrip() or piece  # the answer starts at its first word
            last = piece[-1]
            self._ends_word = last.isalnum() or last == "_"
            pieces.append(piece)
            ids.append(token_id(piece))

    def text(self, start: int, end: int) -> str:
        self.extend_to(end)
        return "".join(self.pieces[start:end])


class OutputView:
    """What a client sees of a request's tokens: text and ids up to a token count.

    ``visible`` tokens have text; any beyond (the EOS token of a natural stop)
    have an id but no text, as SGLang counts EOS in completion_tokens and
    output_ids but trims it from text. ``char_cap`` trims a matched stop string.
    """

    __slots__ = ("source", "visible", "eos_id", "char_cap", "text", "n")

    def __init__(self, source: TextSource, visible: int, eos_id: int | None, char_cap: int | None) -> None:
        self.source = source
        self.visible = visible
        self.eos_id = eos_id
        self.char_cap = char_cap
        self.text = ""
        self.n = 0

    def advance(self, n: int) -> str:
        """Move to ``n`` tokens; returns the text they add."""
        if n <= self.n:
            return ""
        lo, hi = min(self.n, self.visible), min(n, self.visible)
        self.n = n
        if hi <= lo:
            return ""
        delta = self.source.text(lo, hi)
        if self.char_cap is not None:
            delta = delta[: max(0, self.char_cap - len(self.text))]
        self.text += delta
        return delta

    def ids(self, start: int, end: int) -> list[int]:
        hi = min(end, self.visible)
        self.source.extend_to(hi)
        out = self.source.ids[start:hi] if start < hi else []
        if end > self.visible and self.eos_id is not None:
            out = out + [self.eos_id]
        return out
