"""Trace replay's prompt half: a :class:`~loadgen.timing.trace.Trace` in, one request per trace line out.

In: a trace (lengths and prefix block ids per request), a base workload whose text is the
material (``freetext`` unless asked otherwise; any workload spec), the run's tokenizer (the
built-in one by default) and the tokens per hash-id block. Out: :class:`TraceWorkload`, whose
``requests(seed)`` yields exactly ``len(trace)`` requests in trace order, so request i goes with
the trace's planned time i (:meth:`Trace.times`).

A request's prompt is ``input_length`` tokens. With ``hash_ids``, its k-th full block (tokens
``k*block_tokens`` to ``(k+1)*block_tokens``) is text chosen by the seed and that block's id
alone, so two requests that share their first j ids share their first j blocks of text, which
is what a server's prefix cache sees; what lies past the last full block (and the whole prompt
of a line with no ids) is drawn for that request alone. Mooncake numbers new blocks in order of
first appearance, so consecutive ids get consecutive text and a request's own blocks read on.
Texts are cut from the material at token boundaries and joined so that no two fuse
(:func:`join`), so with the built-in tokenizer pieces add up exactly: the prompt is
``input_length`` tokens and a shared block is shared token for token. A real model's tokenizer
(``--tokenizer``) cuts each piece to its own count; a join may then merge or split a token, so
a prompt may be off by about a token per block.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

from loadgen.errors import LoadgenError
from loadgen.request import GenRequest
from loadgen.timing.trace import Trace
from loadgen.workloads import tokens
from loadgen.workloads.base import Workload, derive
from loadgen.workloads.lengths import Length, Lengths, Shaped
from loadgen.workloads.tokenizers import BuiltinTokenizer, Tokenizer

MATERIAL_TOKENS = 32768
"""Tokens of base-workload text each seed's blocks are cut from (built once per seed, 0.1 s).
Ids are spread over it in groups that each start at a random place, so the more material, the
rarer two different ids land on the same text (about 1 in its length per pair) and the fewer
repeats a long prompt holds that a prompt-lookup drafter would find; 32 Ki tokens is 64
Mooncake blocks."""

PIECE_TOKENS = 256
"""Each base request is grown or cut to this length (loadgen.workloads.lengths) before joining:
long enough that a block reads as running text, short enough that the material mixes many
requests of the base workload."""

CACHE_BLOCKS = 4096
"""Block texts kept per ``requests`` call. Shared ids in Mooncake's traces are mostly recent
(the turns of one conversation) or universal (id 0); an evicted block is only recomputed."""


class _Material:
    """A seed's base-workload text, as built-in tokens: positions in it are token indices."""

    def __init__(self, base: Workload, tok: Tokenizer, seed: int) -> None:
        shaped = Shaped(base, Lengths(prompt_tokens=Length("fixed", PIECE_TOKENS), tokenizer=tok))
        pieces: list[str] = []
        have = 0
        stream = shaped.requests(derive(seed, "trace-material").getrandbits(63))
        for _ in range(16 * MATERIAL_TOKENS // PIECE_TOKENS):  # bounded: a base of empty prompts must end
            if have >= MATERIAL_TOKENS:
                break
            req = next(stream, None)
            if req is None:
                break
            text = req.as_prompt().strip()
            if text:
                pieces.append(text)
                have += tokens.count(text)
        # Every piece opens "\n\n<word>" and ends on a non-space, so wrapping past the end joins
        # cleanly and a run of these tokens re-tokenizes to itself.
        self.toks = tokens.split("".join("\n\n" + p for p in pieces))
        if len(self.toks) < 2:
            raise LoadgenError(f"trace workload: base workload {base.name!r} gives no text to build prompts from")
        self.tok = tok

    def cut(self, at: int, n: int) -> str:
        """``n`` tokens of the run's tokenizer, from built-in token ``at`` on (wrapping round the end).

        With the built-in tokenizer this is tokens ``at .. at+n-1`` exactly, so consecutive
        positions read on as running text.
        """
        if n <= 0:
            return ""
        size = len(self.toks)
        m = n + 1  # one token more than asked, so the cut never ends on a word split by the window
        while True:
            window = "".join(self.toks[(at + k) % size] for k in range(m))
            if self.tok.count(window) > n:
                return self.tok.head(window, n)
            m = 2 * m


def join(parts: list[str]) -> str:
    """Pieces as one prompt whose built-in tokens are the pieces' tokens, in order.

    A piece may begin inside a word run ("load" of "json.load"); after a piece that ends on a
    word character the two would fuse into one token, so a space goes between (it joins the
    next token: the count is unchanged). What a piece becomes depends only on it and the piece
    before, so prompts that share their first j blocks share their text up to there exactly.
    The prompt's leading whitespace goes too, which changes no count either.
    """
    out: list[str] = []
    for part in parts:
        if part and out and out[-1] and _word(out[-1][-1]) and _word(part[0]):
            part = " " + part
        out.append(part)
    return "".join(out).lstrip()


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"  # the same set as re's \w on every BMP character (checked)


class TraceWorkload(Workload):
    """The requests of a trace: prompt of ``input_length`` tokens, ``max_tokens = output_length``.

    Every request carries ``ignore_eos=True``: the server generates the trace's output length
    rather than stopping at an end of sequence, as replaying the trace's load requires (it biases
    a drafter's acceptance toward text past a natural end, as ``--ignore-eos`` does anywhere).
    The stream is finite, one request per trace line in trace order, and the same for a seed.
    A trace says nothing of sampling: every request has ``temperature`` (0 unless given).
    """

    def __init__(
        self,
        trace: Trace,
        base: str | Workload = "freetext",
        tokenizer: Tokenizer | None = None,
        block_tokens: int | None = None,
        name: str | None = None,
        temperature: float = 0.0,
    ) -> None:
        if isinstance(base, str):
            from loadgen.workloads.registry import resolve  # the registry knows every spec; only a name needs it

            base = resolve(base)
        self.trace = trace
        self.base = base
        self.tokenizer = tokenizer or BuiltinTokenizer()
        self.block_tokens = trace.block_tokens if block_tokens is None else block_tokens
        if isinstance(self.block_tokens, bool) or not isinstance(self.block_tokens, int) or self.block_tokens < 1:
            raise LoadgenError(f"trace block tokens: an integer >= 1 (Mooncake's is 512), got {self.block_tokens!r}")
        self.temperature = temperature
        self.name = name or f"trace:{trace.name}"
        self.description = f"{len(trace)} requests of trace {trace.name}, text from {base.name}"

    def __len__(self) -> int:
        return len(self.trace)

    def requests(self, seed: int) -> Iterator[GenRequest]:
        material = _Material(self.base, self.tokenizer, seed)
        cache: OrderedDict[int, str] = OrderedDict()
        bt = self.block_tokens

        # Mooncake numbers new blocks consecutively as they first appear, so a request's own new
        # blocks have consecutive ids: ids of one group sit side by side in the material (they read
        # on as running text) and each group starts at a place drawn for it. A group spans the
        # material at most once, so two ids of one group never start at the same place.
        size = len(material.toks)
        group = max(1, size // bt)

        def block(hash_id: int) -> str:
            text = cache.get(hash_id)
            if text is None:
                g, k = divmod(hash_id, group)
                text = material.cut(derive(seed, "trace-block", g).randrange(size) + k * bt, bt)
                cache[hash_id] = text
                if len(cache) > CACHE_BLOCKS:
                    cache.popitem(last=False)
            else:
                cache.move_to_end(hash_id)
            return text

        for i, entry in enumerate(self.trace.entries):
            full = min(len(entry.hash_ids), entry.input_length // bt)
            parts = [block(h) for h in entry.hash_ids[:full]]
            parts.append(material.cut(derive(seed, "trace-tail", i).randrange(size), entry.input_length - full * bt))
            yield GenRequest(
                workload=self.name,
                max_tokens=entry.output_length,
                prompt=join(parts),
                temperature=self.temperature,
                ignore_eos=True,
                seed=derive(seed, "trace-sample", i).getrandbits(31),
            )
