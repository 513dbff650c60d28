"""Prompt workloads: the interface, length control, and the registry that turns a spec into one.

A workload is an endless stream of :class:`GenRequest` that depends only on a seed, so two
runs (or a baseline and a speculative server) see byte-identical traffic. Specs accepted by
:func:`resolve`:

- a built-in name (``code``, ``chat``, ``predictable``, ``freetext``, content in ``workloads/``);
- an entry-point name from the ``loadgen.workloads`` group (a Workload subclass, instance or factory);
- a ``.jsonl`` path (``prompt`` or ``messages`` per line), a ``.json`` path or ``sharegpt:PATH``
  (ShareGPT conversations);
- a weighted mix ``code:2,chat:1``; each request keeps the label of the workload it came from.

Length control (:class:`Lengths`) never invents tokens: a prompt grows with more material of
its own kind (more of the passage, more code of the same language, earlier turns of a
conversation) and shrinks by cutting that material, so the simulator and a real drafter see
the same kind of text at every length.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from loadgen.workloads import tokens
from loadgen.errors import LoadgenError
from loadgen.request import GenRequest

ENTRY_POINT_GROUP = "loadgen.workloads"

# Built-in name -> "module:Class". Modules are imported only when the workload is used, so
# `loadgen workloads list` and the other commands do not pay for loading every data file.
BUILTINS: dict[str, str] = {
    "code": "loadgen.workloads.builtin.code:CodeWorkload",
    "chat": "loadgen.workloads.builtin.chat:ChatWorkload",
    "predictable": "loadgen.workloads.builtin.predictable:PredictableWorkload",
    "freetext": "loadgen.workloads.builtin.freetext:FreetextWorkload",
}

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


# --------------------------------------------------------------------------- lengths


@dataclass(frozen=True)
class Length:
    """A token length: fixed, ``normal:MEAN,STD`` or ``uniform:LOW,HIGH`` (inclusive)."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, spec: str | int, what: str = "length") -> Length:
        text = str(spec).strip()
        kind, sep, rest = text.partition(":")
        try:
            if not sep:
                n = int(text)
                if n >= 1:
                    return cls("fixed", n)
            elif kind == "normal":
                mean, std = (float(x) for x in rest.split(","))
                if math.isfinite(mean) and math.isfinite(std) and mean >= 1 and std >= 0:
                    return cls("normal", mean, std)
            elif kind == "uniform":
                low, high = (int(x) for x in rest.split(","))
                if 1 <= low <= high:
                    return cls("uniform", low, high)
        except ValueError:
            pass
        raise LoadgenError(
            f"{what} {text!r}: expected a positive integer N, normal:MEAN,STD or uniform:LOW,HIGH"
        )

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "normal":
            return max(1, round(rng.gauss(self.a, self.b)))
        return rng.randint(int(self.a), int(self.b))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "normal":
            return f"normal:{self.a:g},{self.b:g}"
        return f"uniform:{int(self.a)},{int(self.b)}"


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


@dataclass(frozen=True)
class Lengths:
    """Length control applied on top of any workload; ``None`` keeps the workload's own lengths."""

    prompt_tokens: Length | None = None
    output_tokens: Length | None = None
    tokenizer: Tokenizer = field(default_factory=BuiltinTokenizer)
    ignore_eos: bool = False
    """Ask the server to generate exactly max_tokens (biases acceptance; off by default)."""

    @classmethod
    def parse(
        cls,
        prompt_tokens: str | None = None,
        output_tokens: str | None = None,
        tokenizer: str | None = None,
        ignore_eos: bool = False,
    ) -> Lengths:
        return cls(
            prompt_tokens=Length.parse(prompt_tokens, "prompt tokens") if prompt_tokens else None,
            output_tokens=Length.parse(output_tokens, "output tokens") if output_tokens else None,
            tokenizer=load_tokenizer(tokenizer),
            ignore_eos=ignore_eos,
        )

    @property
    def active(self) -> bool:
        return self.prompt_tokens is not None or self.output_tokens is not None or self.ignore_eos


def prompt_tokens(req: GenRequest, tokenizer: Tokenizer | None = None) -> int:
    """Prompt length as length control counts it: the prompt, or the sum of message contents.

    Chat-template tokens are server-specific and left out on purpose.
    """
    tok = tokenizer or BuiltinTokenizer()
    if req.prompt is not None:
        return tok.count(req.prompt)
    return sum(tok.count(m["content"]) for m in req.messages or ())


# --------------------------------------------------------------------------- drafts


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


def fit_text(parts: TextParts, target: int, tok: Tokenizer, rng: random.Random) -> str:
    """The prompt grown or cut to ``target`` tokens (exact for the built-in tokenizer).

    Grows by appending blocks from ``parts.more``; cuts the material at its end, and only if the
    frame alone is over the target does the frame itself get cut.
    """
    material = parts.material
    have = tok.count(parts.render(material))
    exhausted = parts.more is None
    while have < target and not exhausted:
        # Add blocks on an additive estimate, then recount once: counting the whole prompt
        # after every block would be quadratic in the target length.
        while have < target:
            block = parts.more(rng)
            if not block or not block.strip():
                exhausted = True
                break
            piece = (parts.sep if material else "") + block
            material += piece
            have += tok.count(piece)
        have = tok.count(parts.render(material))  # exact: the estimate misses the wrap and joins
    if have <= target:
        return parts.render(material)
    # Most material tokens that keep the prompt within the target. Tokens nearly add up, so
    # start from removing the excess and correct by a step or two rather than bisecting:
    # each probe re-tokenizes the whole prompt.
    def size(k: int) -> int:
        return tok.count(parts.render(tok.head(material, k)))

    total = tok.count(material)
    lo = max(0, total - (have - target))
    n = size(lo)
    while lo > 0 and n > target:
        lo = max(0, lo - (n - target))
        n = size(lo)
    while lo < total and size(lo + 1) <= target:
        lo += 1
    text = parts.render(tok.head(material, lo))
    if lo == 0 and tok.count(text) > target:
        text = tok.head(text, target)
    return text


def fit_chat(parts: ChatParts, target: int, tok: Tokenizer, rng: random.Random) -> tuple[dict, ...]:
    """Messages grown or cut to ``target`` content tokens.

    Grows by prepending earlier exchanges from ``parts.more``; cuts whole exchanges from the
    oldest end, then shortens the oldest remaining one, so the final turns stay intact.
    """
    msgs = [dict(m) for m in parts.messages()]
    sizes = [tok.count(m["content"]) for m in msgs]
    have = sum(sizes)
    at = len(parts.lead)  # history starts here; new exchanges go in front of it
    while have < target and parts.more is not None:
        pair = parts.more(rng)
        if pair is None:
            break
        pair_sizes = [tok.count(m["content"]) for m in pair]
        if not sum(pair_sizes):
            break
        msgs[at:at] = [dict(m) for m in pair]
        sizes[at:at] = pair_sizes
        have += sum(pair_sizes)
    excess = have - target
    # Drop whole exchanges from the oldest end while they fit inside the excess...
    while excess > 0 and len(msgs) - at - len(parts.final) >= 2 and sizes[at] + sizes[at + 1] <= excess:
        excess -= sizes[at] + sizes[at + 1]
        del msgs[at : at + 2], sizes[at : at + 2]
    # ...then shorten the oldest exchange: its reply loses its end (a reply cut short reads
    # naturally), its question its start; then the final turns, the lead (system) last.
    # Every message keeps one token at least, so roles still alternate.
    oldest = [(at + 1, False), (at, True)] if len(msgs) - at - len(parts.final) >= 2 else []
    later = range(at + len(oldest), len(msgs))
    for i, keep_end in oldest + [(i, True) for i in later] + [(i, True) for i in range(at)]:
        if excess <= 0:
            break
        cut = min(excess, sizes[i] - 1)
        if cut > 0:
            keep = sizes[i] - cut
            msgs[i]["content"] = tok.tail(msgs[i]["content"], keep) if keep_end else tok.head(msgs[i]["content"], keep)
            sizes[i] = keep
            excess -= cut
    return tuple(msgs)


# --------------------------------------------------------------------------- workloads


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


def _generic_drafts(workload: Workload, seed: int) -> Iterator[Draft]:
    # Padding comes from the workload's own other requests, drawn from a separate stream so
    # that padding never shifts the main sequence.
    donors = workload.requests(derive(seed, "padding").getrandbits(63))

    def more_text(rng: random.Random) -> str:
        return next(donors).as_prompt()

    def more_exchange(rng: random.Random) -> tuple[dict, dict] | None:
        for _ in range(64):  # a workload of single-turn chats has no exchanges to give
            pairs = exchanges(next(donors).messages or ())
            if pairs:
                return rng.choice(pairs)
        return None

    for req in workload.requests(seed):
        if req.prompt is not None:
            parts: TextParts | ChatParts = TextParts(head="", tail="", material=req.prompt, more=more_text)
        else:
            lead, history, final = split_chat(req.messages or ())
            parts = ChatParts(final=final, history=history, lead=lead, more=more_exchange)
        yield Draft(req, parts)


class Shaped(Workload):
    """Another workload with :class:`Lengths` applied; labels and sampling are left as they were."""

    def __init__(self, inner: Workload, lengths: Lengths) -> None:
        self.inner = inner
        self.lengths = lengths
        self.name = inner.name
        self.description = inner.description

    def requests(self, seed: int) -> Iterator[GenRequest]:
        lengths = self.lengths
        rng = derive(seed, "lengths", self.name)
        drafts = self.inner.drafts(seed) if isinstance(self.inner, DraftWorkload) else _generic_drafts(self.inner, seed)
        for draft in drafts:
            changes: dict[str, object] = {}
            if lengths.prompt_tokens is not None:
                target = lengths.prompt_tokens.sample(rng)
                if isinstance(draft.parts, TextParts):
                    changes["prompt"] = fit_text(draft.parts, target, lengths.tokenizer, rng)
                else:
                    changes["messages"] = fit_chat(draft.parts, target, lengths.tokenizer, rng)
            if lengths.output_tokens is not None:
                changes["max_tokens"] = lengths.output_tokens.sample(rng)
            if lengths.ignore_eos:
                changes["ignore_eos"] = True
            yield replace(draft.request, **changes)


class Mix(Workload):
    """Workloads drawn by weight; every request keeps the label of the workload it came from."""

    def __init__(self, parts: Sequence[tuple[Workload, float]]) -> None:
        self.parts = list(parts)
        self.name = ",".join(f"{w.name}:{weight:g}" for w, weight in self.parts)
        self.description = "weighted mix of " + ", ".join(w.name for w, _ in self.parts)

    def requests(self, seed: int) -> Iterator[GenRequest]:
        rng = derive(seed, "mix")
        streams = [w.requests(derive(seed, "mix", i, w.name).getrandbits(63)) for i, (w, _) in enumerate(self.parts)]
        cum, total = [], 0.0
        for _, weight in self.parts:
            total += weight
            cum.append(total)
        indices = range(len(streams))
        while True:
            (i,) = rng.choices(indices, cum_weights=cum)
            yield next(streams[i])


# --------------------------------------------------------------------------- registry


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def available() -> list[str]:
    """Built-in names, then entry-point names; file paths and mixes are accepted too."""
    return list(BUILTINS) + sorted(set(_entry_points()) - set(BUILTINS))


def _unknown(name: str) -> LoadgenError:
    return LoadgenError(
        f"unknown workload {name!r}; known: {', '.join(available())} "
        "(or a .jsonl/.json path, sharegpt:PATH, or a mix such as code:2,chat:1)"
    )


def _load_builtin(name: str) -> Workload:
    module, _, attr = BUILTINS[name].partition(":")
    return getattr(importlib.import_module(module), attr)()


def _load_entry_point(ep: importlib.metadata.EntryPoint) -> Workload:
    where = f"workload entry point {ep.name!r} ({ep.value})"
    try:
        obj = ep.load()
    except Exception as exc:
        raise LoadgenError(f"{where} failed to import: {one_line(exc)}") from exc
    if not (isinstance(obj, Workload) or callable(obj)):
        raise LoadgenError(f"{where} is a {type(obj).__name__}, not a Workload subclass, instance or factory")
    try:
        workload = obj if isinstance(obj, Workload) else obj()
    except Exception as exc:
        raise LoadgenError(f"{where} failed to construct: {one_line(exc)}") from exc
    if not isinstance(workload, Workload):
        raise LoadgenError(f"{where} gave a {type(workload).__name__}, not a loadgen.workloads.base.Workload")
    if not workload.name:
        workload.name = ep.name
    return workload


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".jsonl", ".json")) or "/" in spec or "\\" in spec


def _load(spec: str) -> Workload:
    from loadgen.workloads import files as datasets  # file loaders are only needed for file specs

    if spec.startswith("sharegpt:"):
        return datasets.sharegpt_workload(Path(spec.removeprefix("sharegpt:")))
    if spec in BUILTINS:
        return _load_builtin(spec)
    if _looks_like_path(spec):
        path = Path(spec)
        if path.suffix == ".json":
            return datasets.sharegpt_workload(path)
        if path.suffix != ".jsonl":
            raise LoadgenError(f"{spec}: workload files are .jsonl (prompt/messages per line) or ShareGPT .json")
        return datasets.jsonl_workload(path)
    ep = _entry_points().get(spec)
    if ep is None:
        raise _unknown(spec)
    return _load_entry_point(ep)


def _weight(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _split_mix(spec: str) -> list[tuple[str, float]] | None:
    """``[(spec, weight), ...]`` for a weighted spec, None for a single unweighted one."""
    items = [item.strip() for item in spec.split(",")]
    weighted = []
    for item in items:
        name, sep, tail = item.rpartition(":")
        weight = _weight(tail) if sep else None
        weighted.append((name.strip(), weight) if weight is not None else (item, None))
    if len(items) == 1 and weighted[0][1] is None:
        return None
    out = []
    for name, weight in weighted:
        if not name:
            raise LoadgenError(f"workload mix {spec!r}: empty entry")
        out.append((name, 1.0 if weight is None else weight))
    return out


def resolve(spec: str, lengths: Lengths | None = None) -> Workload:
    """The workload a spec names, with ``lengths`` applied to each component."""
    spec = spec.strip()
    if not spec:
        raise _unknown(spec)

    def one(name: str) -> Workload:
        workload = _load(name)
        return Shaped(workload, lengths) if lengths is not None and lengths.active else workload

    mix = _split_mix(spec)
    if mix is None:
        return one(spec)
    weights = [w for _, w in mix]
    if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
        raise LoadgenError(f"workload mix {spec!r}: weights must be non-negative numbers summing to more than 0")
    names = [name for name, _ in mix]
    for name in names:
        if names.count(name) > 1:
            raise LoadgenError(f"workload mix {spec!r}: {name!r} appears more than once")
    loaded = [(one(name), w) for name, w in mix]  # zero-weight entries are still checked
    parts = [(workload, w) for workload, w in loaded if w > 0]
    return parts[0][0] if len(parts) == 1 else Mix(parts)
