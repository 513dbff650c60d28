"""How predictable a prompt's continuation is, judged from the prompt text alone.

Draft models accept well where the answer is already on the page (copy, edit,
fill a template, continue a sequence) or follows rigid syntax (code), moderately
on conversation, and poorly on open-ended writing. The simulator never reads a
hint from the client: the class comes from the text, the probability from the
profile's [acceptance] table.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from loadgen.sim.profiles import Acceptance

# Order matters: an instruction to copy code is a copy task; a story in JSON is still a story.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "copy",
        re.compile(
            r"\b(copy|repeat|verbatim|echo( back)?|reproduce|word for word|exactly as (written|given)|"
            r"proofread|fix (the |any |all )?(typos|spelling|grammar|punctuation)|"
            r"correct (the |any |all )?(typos|spelling|grammar|punctuation)|edit (the|this)|rewrite (the|this)|"
            r"fill (in )?(the |this )?(template|blanks?|form)|continue (the|this) (sequence|list|pattern|series|count)|"
            r"count from|reformat)\b",
            re.I,
        ),
    ),
    (
        "code",
        re.compile(
            r"```|\bdef \w+\(|\bfunction\b|\bclass \w+|\bimport \w+|#include|\bSELECT\b.+\bFROM\b|"
            r"\b(python|javascript|typescript|java|rust|golang|c\+\+|sql|bash|regex|code|snippet|program|unit tests?)\b",
            re.I,
        ),
    ),
    (
        "creative",
        re.compile(
            r"\b(story|stories|poem|poetry|haiku|limerick|sonnet|song|lyrics|brainstorm|imagine|fiction|novel|"
            r"fairy ?tale|slogan|jokes?|creative|fantasy|screenplay|ideas for)\b",
            re.I,
        ),
    ),
    (
        "structured",
        re.compile(
            r"\b(json|yaml|csv|xml|table|extract|classify|categori[sz]e|summari[sz]e|translate|list (the|all)|"
            r"bullet points?)\b",
            re.I,
        ),
    ),
)


@dataclass(frozen=True)
class Predictability:
    kind: str
    """copy, code, creative, structured or chat."""
    p: float
    """Probability that one draft token is accepted (given the previous one was)."""


def classify(text: str) -> str:
    for kind, pattern in _RULES:
        if pattern.search(text):
            return kind
    return "chat"


def predictability(text: str, temperature: float, table: Acceptance) -> Predictability:
    """Acceptance probability for a prompt: its class's value, lowered by sampling temperature,
    spread a little per prompt (stable: derived from the text) so prompts of a class differ."""
    kind = classify(text)
    base = getattr(table, kind)
    t = min(max(temperature, 0.0), 2.0)
    p = base * (1.0 - table.temperature_penalty * t)
    spread = (zlib.crc32(text.encode("utf-8", "replace")) / 0xFFFFFFFF) * 2.0 - 1.0
    p += table.jitter * spread
    return Predictability(kind=kind, p=min(0.99, max(0.0, p)))
