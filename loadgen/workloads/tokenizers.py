"""Tokenizers for length control: counting and cutting text at token boundaries.

In: a tokenizer spec (``builtin``, a ``tokenizer.json`` or a model folder). Out: a
:class:`Tokenizer`. The built-in one is :mod:`loadgen.workloads.tokens` (exact for the
simulator, approximate for real models); a Hugging Face one gives a real model's counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from loadgen.errors import LoadgenError
from loadgen.workloads import tokens
from loadgen.workloads.base import one_line


class Tokenizer(Protocol):
    """What length control needs from a tokenizer: counting and cutting at token boundaries."""

    name: str

    def count(self, text: str) -> int: ...

    def head(self, text: str, n: int) -> str:
        """The prefix of ``text`` made of its first ``n`` tokens."""
        ...

    def tail(self, text: str, n: int) -> str:
        """The suffix of ``text`` made of its last ``n`` tokens."""
        ...


@dataclass(frozen=True)
class BuiltinTokenizer:
    """:mod:`loadgen.workloads.tokens`: exact for the simulator, approximate for real models."""

    name: str = "builtin"

    def count(self, text: str) -> int:
        return tokens.count(text)

    def head(self, text: str, n: int) -> str:
        return "".join(tokens.split(text)[: max(n, 0)])

    def tail(self, text: str, n: int) -> str:
        parts = tokens.split(text)
        return "".join(parts[len(parts) - n :]) if n > 0 else ""


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer (``tokenizer.json``), for a real model's counts."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as _HF  # optional dependency: loaded only when asked for
        except ImportError:
            raise LoadgenError(
                f"tokenizer {path}: the optional 'tokenizers' package is not installed "
                "(pip install 'loadgen[tokenizers]')"
            ) from None
        try:
            self._tok = _HF.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exception for a bad file
            raise LoadgenError(f"tokenizer {path}: cannot load ({one_line(exc)})") from exc
        self.name = str(path)

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        return self._tok.encode(text, add_special_tokens=False).offsets

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def head(self, text: str, n: int) -> str:
        offsets = self._offsets(text)
        if n >= len(offsets):
            return text
        return text[: offsets[n - 1][1]] if n > 0 else ""

    def tail(self, text: str, n: int) -> str:
        offsets = self._offsets(text)
        if n >= len(offsets):
            return text
        return text[offsets[len(offsets) - n][0] :] if n > 0 else ""


def load_tokenizer(spec: str | None) -> Tokenizer:
    """``None``/``builtin``, or a ``tokenizer.json`` file or a model folder that holds one."""
    if spec is None or spec == "builtin":
        return BuiltinTokenizer()
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise LoadgenError(f"tokenizer {spec}: no such file (give 'builtin', a tokenizer.json or a folder holding one)")
    return HFTokenizer(path)

