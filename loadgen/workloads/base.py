"""The workload interface and the pieces the built-ins compose requests from.

In: a seed. Out: requests (:class:`Workload`) or drafts (:class:`DraftWorkload`): a request at
its natural length plus the structure (:class:`TextParts`, :class:`ChatParts`) that length
control (:mod:`loadgen.workloads.lengths`) grows or cuts. A workload is an endless stream that
depends only on the seed, so two runs (or a baseline and a speculative server) see
byte-identical traffic.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from loadgen.request import GenRequest

T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """An exception as one line: the CLI contract is one line on stderr, whatever the message."""
    text = " ".join(str(exc).split()) or "no message"
    return f"{type(exc).__name__}: {text}"


def derive(seed: int, *labels: object) -> random.Random:
    """An RNG for one purpose within a seeded stream.

    Seeding with a string hashes it with SHA-512 (stable across processes and Python builds,
    unlike ``hash()``), so each stream is independent of how many draws the others made.
    """
    return random.Random(":".join(str(x) for x in (seed, *labels)))


def deck(items: Sequence[T], rng: random.Random) -> Iterator[T]:
    """Items in shuffled rounds, forever: every item is used once before any repeats."""
    order = list(items)
    while True:
        rng.shuffle(order)
        yield from order


def dealer(items: Sequence[T], rng: random.Random) -> Callable[[random.Random], T]:
    """A padding source that deals ``items`` in shuffled rounds, so padding repeats nothing
    until it has used everything; its order is fixed by ``rng`` at creation."""
    cards = deck(items, random.Random(rng.getrandbits(64)))
    return lambda _rng: next(cards)


@dataclass(frozen=True)
class TextParts:
    """A completion prompt: a fixed frame (``head``, ``tail``) around elastic ``material``.

    The frame holds what is asked; the material is what it is asked about (a passage, code
    from the same file, notes for a story) and is what length control grows or cuts.
    """

    head: str
    tail: str
    material: str = ""
    more: Callable[[random.Random], str] | None = None
    """Another block of material of the same kind, or None when there is no more."""
    sep: str = "\n\n"
    wrap: tuple[str, str] = ("", "")
    """Text around the material, present only when there is material."""

    def render(self, material: str | None = None) -> str:
        m = self.material if material is None else material
        return self.head + (self.wrap[0] + m + self.wrap[1] if m else "") + self.tail


@dataclass(frozen=True)
class ChatParts:
    """Chat messages: fixed ``lead`` (system) and ``final`` turns around an elastic ``history``."""

    final: tuple[dict, ...]
    history: tuple[dict, ...] = ()
    """Earlier user/assistant exchanges; length control adds and cuts at the oldest end."""
    lead: tuple[dict, ...] = ()
    more: Callable[[random.Random], tuple[dict, dict] | None] | None = None
    """An earlier (user, assistant) exchange of the same kind, or None when there is none."""

    def messages(self) -> tuple[dict, ...]:
        return self.lead + self.history + self.final


@dataclass(frozen=True)
class Draft:
    """A request at its natural length, with the structure length control needs to resize it."""

    request: GenRequest
    parts: TextParts | ChatParts


def text_draft(workload: str, parts: TextParts, max_tokens: int, **sampling: object) -> Draft:
    return Draft(GenRequest(workload=workload, max_tokens=max_tokens, prompt=parts.render(), **sampling), parts)


def chat_draft(workload: str, parts: ChatParts, max_tokens: int, **sampling: object) -> Draft:
    return Draft(GenRequest(workload=workload, max_tokens=max_tokens, messages=parts.messages(), **sampling), parts)


class Workload(ABC):
    """An endless stream of requests determined by a seed.

    Subclasses set ``name`` (the label every request and record carries) and ``description``,
    and implement :meth:`requests`. The same seed must give the same sequence, in any process.
    """

    name: str = ""
    description: str = ""

    @abstractmethod
    def requests(self, seed: int) -> Iterator[GenRequest]:
        """Requests for ``seed``, forever."""


class DraftWorkload(Workload):
    """A workload that knows the structure of its prompts, so length control keeps their nature.

    The built-ins and the file loaders are these; a plain :class:`Workload` from a third party
    still gets length control, padded with its own other prompts.
    """

    @abstractmethod
    def drafts(self, seed: int) -> Iterator[Draft]:
        """Drafts for ``seed``, forever."""

    def requests(self, seed: int) -> Iterator[GenRequest]:
        for draft in self.drafts(seed):
            yield draft.request


def exchanges(messages: Sequence[dict]) -> list[tuple[dict, dict]]:
    """The (user, assistant) pairs in a conversation, usable as earlier history elsewhere."""
    return [
        (messages[i], messages[i + 1])
        for i in range(len(messages) - 1)
        if messages[i].get("role") == "user" and messages[i + 1].get("role") == "assistant"
    ]


def split_chat(messages: Sequence[dict]) -> tuple[tuple[dict, ...], tuple[dict, ...], tuple[dict, ...]]:
    """(lead system messages, history, final message) of a conversation."""
    msgs = tuple(messages)
    lead = 0
    while lead < len(msgs) - 1 and msgs[lead].get("role") == "system":
        lead += 1
    return msgs[:lead], msgs[lead:-1], msgs[-1:]
