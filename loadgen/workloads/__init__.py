"""Workloads: the first step of the pipeline.

In: a workload spec (a built-in name, a plugin, a JSONL/ShareGPT file, a weighted mix)
and the length settings. Out: an endless, seeded stream of :class:`loadgen.request.GenRequest`,
identical for every target of a run.

- ``base``: the :class:`Workload` interface (what a plugin subclasses), drafts, seeded helpers;
- ``lengths``/``tokenizers``: length control that never invents tokens, and the counters it uses;
- ``registry``: a spec to a workload (built-ins, entry points, files, mixes, phases);
- ``phases``: ``phases:NAME@DUR,...``, workloads one after another on the stage window's clock;
- ``files``: user JSONL and ShareGPT files; ``builtin/``: the four built-ins and their data.
"""

from loadgen.request import GenRequest
from loadgen.workloads.base import (
    ChatParts,
    Draft,
    DraftWorkload,
    TextParts,
    Workload,
    chat_draft,
    dealer,
    deck,
    derive,
    exchanges,
    split_chat,
    text_draft,
)
from loadgen.workloads.lengths import Length, Lengths, Shaped, prompt_tokens
from loadgen.workloads.phases import Phase, PhaseSchedule, PhaseStream, PhaseWorkload
from loadgen.workloads.registry import BUILTINS, ENTRY_POINT_GROUP, Mix, available, resolve
from loadgen.workloads.tokenizers import BuiltinTokenizer, HFTokenizer, Tokenizer, load_tokenizer

__all__ = [
    "BUILTINS", "ENTRY_POINT_GROUP", "BuiltinTokenizer", "ChatParts", "Draft", "DraftWorkload", "GenRequest",
    "HFTokenizer", "Length", "Lengths", "Mix", "Phase", "PhaseSchedule", "PhaseStream", "PhaseWorkload", "Shaped",
    "TextParts", "Tokenizer", "Workload", "available",
    "chat_draft", "dealer", "deck", "derive", "exchanges", "load_tokenizer", "prompt_tokens", "resolve",
    "split_chat", "text_draft",
]
