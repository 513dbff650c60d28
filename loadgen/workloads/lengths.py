"""Length control: any workload's requests at the prompt and output lengths asked for.

In: a workload and :class:`Lengths` (prompt and output token lengths, the tokenizer that
counts them). Out: the same requests resized (:class:`Shaped`). Length control never invents
tokens: a prompt grows with more material of its own kind (more of the passage, more code of
the same language, earlier turns of a conversation) and shrinks by cutting that material, so
the simulator and a real drafter see the same kind of text at every length.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest
from loadgen.workloads.base import ChatParts, Draft, DraftWorkload, TextParts, Workload, derive, exchanges, split_chat
from loadgen.workloads.tokenizers import BuiltinTokenizer, Tokenizer, load_tokenizer


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
        why = "expected a positive integer N, normal:MEAN,STD or uniform:LOW,HIGH"
        try:
            if not sep:
                n = int(text)
                if n >= 1:
                    return cls("fixed", n)
                why = f"a token count is >= 1, got {n}"
            elif kind == "normal":
                mean, std = (float(x) for x in rest.split(","))
                if math.isfinite(mean) and math.isfinite(std) and mean >= 1 and std >= 0:
                    return cls("normal", mean, std)
                why = "normal:MEAN,STD takes MEAN >= 1 and STD >= 0"
            elif kind == "uniform":
                low, high = (int(x) for x in rest.split(","))
                if 1 <= low <= high:
                    return cls("uniform", low, high)
                why = (f"LOW {low} exceeds HIGH {high} (uniform:LOW,HIGH)" if low > high
                       else "uniform:LOW,HIGH takes LOW >= 1")
        except ValueError:
            pass
        raise LoadgenError(f"{what} {text!r}: {why}")

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


