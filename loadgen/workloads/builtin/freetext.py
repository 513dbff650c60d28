"""``freetext``: stories, poems and brainstorming, sampled at temperature > 0.

Open writing is what a drafter predicts worst, and sampling makes it worse still; this is the
low-acceptance end of the built-ins. Length control adds or cuts a writer's notes (images and
details to draw on), so a long prompt is still an open creative brief, never a text to repeat.
"""

from __future__ import annotations

from collections.abc import Iterator

from loadgen.workloads.base import Draft, DraftWorkload, TextParts, dealer, deck, derive, text_draft
from loadgen.workloads.builtin import load

_STORY = (
    "Write a short story of about {words} words about {premise}. {style}",
    "Tell me a story about {premise}. {style} Keep it under {words} words.",
)


class FreetextWorkload(DraftWorkload):
    name = "freetext"
    description = "stories, poems and open brainstorming at temperature > 0"

    def __init__(self) -> None:
        data = load("freetext.jsonl")
        by_kind: dict[str, list[str]] = {}
        for r in data:
            by_kind.setdefault(r["kind"], []).append(r["text"])
        self._k = by_kind
        self._notes = ["- " + note for note in by_kind["note"]]
        # One entry per story premise, poem subject and brainstorm topic; form, style and
        # numbers are drawn on each use, so rounds repeat subjects but rarely whole prompts.
        self._items = [(kind, text) for kind in ("story", "poem_subject", "brainstorm") for text in by_kind[kind]]

    def drafts(self, seed: int) -> Iterator[Draft]:
        rng = derive(seed, self.name)
        for kind, text in deck(self._items, rng):
            if kind == "story":
                words = rng.choice((300, 400, 500, 600))
                ask = rng.choice(_STORY).format(words=words, premise=text, style=rng.choice(self._k["style"]))
                max_tokens, temperature = int(words * 1.4), 0.9
            elif kind == "poem_subject":
                ask = f"Write {rng.choice(self._k['poem_form'])} about {text}."
                max_tokens, temperature = 240, 1.0
            else:
                n = rng.choice((8, 10, 12, 15))
                ask = rng.choice(self._k["brainstorm_ask"]).format(n=n, topic=text)
                max_tokens, temperature = 32 * n, 0.8
            parts = TextParts(
                head=ask,
                tail="",
                more=dealer(self._notes, rng),
                sep="\n",
                wrap=("\n\nSome notes you can draw on, or ignore:\n", ""),
            )
            yield text_draft(self.name, parts, max_tokens, temperature=temperature, top_p=0.95, seed=rng.getrandbits(31))
