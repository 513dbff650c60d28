"""``predictable``: tasks whose answer repeats the context, so a drafter guesses most tokens.

Four kinds, in roughly equal shares: copy a passage verbatim, apply a small edit to given code
and return all of it, fill a template (or JSON keys) once per record, continue an obvious
sequence. Length control adds more of the passage, more code of the file, more records or more
terms of the sequence, so a longer prompt is the same task with more to repeat.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loadgen.workloads.tokens import count
from loadgen.workloads.base import Draft, DraftWorkload, TextParts, dealer, deck, derive, text_draft
from loadgen.workloads.builtin import LANG_NAMES, code_context, load, snippets_by_lang

_COPY = (
    "Copy the following passage exactly, word for word, and output nothing else.",
    "Repeat the text below verbatim. Do not change, add or remove anything.",
    "Reproduce this passage exactly as it is written, keeping every line break.",
    "Type out the following text again exactly as written, character for character.",
)
_EDIT = (
    "Edit the {Lang} code below as follows and return the complete code with no other changes.\n\n"
    "Change: {edit}\n\n",
    "Edit this {Lang} code: make exactly one change and output the whole code afterwards, "
    "leaving everything else untouched. The change: {edit}\n\n",
)
_FILL = (
    "Fill in the template below once for each record. Copy the template exactly, replace each "
    "{{placeholder}} with the record's value, and separate the filled copies with a blank line.\n\n"
    "Template:\n\n{template}\n\nRecords:\n\n"
)
_CONTINUE = (
    "Continue this sequence for {n} more items, in exactly the same format. Output only the new items.\n\n",
    "Here is the start of a list. Continue the pattern: write the next {n} entries in the same format.\n\n",
)
_SLOT = re.compile(r"\{(\w+)\}")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_NATO = ("Alfa", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf", "Hotel", "India", "Juliett", "Kilo",
         "Lima", "Mike", "November", "Oscar", "Papa", "Quebec", "Romeo", "Sierra", "Tango", "Uniform",
         "Victor", "Whiskey", "X-ray", "Yankee", "Zulu")
_ROMAN = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),
          (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))


def _roman(n: int) -> str:
    out = []
    for value, letters in _ROMAN:
        times, n = divmod(n, value)
        out.append(letters * times)
    return "".join(out)


def _sequence(kind: str, rng: random.Random) -> tuple[Iterator[str], str]:
    """An endless obvious sequence of one kind, with a random start, and its separator."""
    if kind == "arithmetic":
        start, step = rng.randint(1, 500), rng.choice((2, 3, 5, 7, 10, 12, 25))
        return (str(start + i * step) for i in itertools.count()), ", "
    if kind == "countdown":
        start = rng.randint(200, 999)
        return (str(start - i) for i in itertools.count()), ", "
    if kind == "squares":
        k = rng.randint(1, 30)
        return (str((k + i) ** 2) for i in itertools.count()), ", "
    if kind == "nato":
        first = rng.randrange(len(_NATO))
        return (_NATO[(first + i) % len(_NATO)] for i in itertools.count()), ", "
    if kind == "times_table":
        m = rng.randint(2, 19)
        return (f"{m} x {i} = {m * i}" for i in itertools.count(1)), "\n"
    if kind == "iso_dates":
        start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
        return ((start + dt.timedelta(days=i)).isoformat() for i in itertools.count()), "\n"
    if kind == "weekday_dates":
        start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
        days = (start + dt.timedelta(days=i) for i in itertools.count())
        return (f"{_WEEKDAYS[d.weekday()]} {d.day} {_MONTHS[d.month - 1]}" for d in days), "\n"
    if kind == "clock":
        step = rng.choice((5, 10, 15, 20, 30))
        start = rng.randint(6, 10) * 60
        return (f"{(start + i * step) // 60 % 24:02d}:{(start + i * step) % 60:02d}" for i in itertools.count()), ", "
    if kind == "steps":
        noun = rng.choice(("item", "box", "shelf", "valve", "panel", "sample"))
        return (f"Step {i}: check {noun} {i} and mark it as done." for i in itertools.count(1)), "\n"
    if kind == "csv":
        start = rng.randint(100, 9000)
        state = rng.choice(("pending", "active", "queued"))
        head = iter(["id,name,status"])
        rows = (f"{start + i},item-{start + i:05d},{state}" for i in itertools.count())
        return itertools.chain(head, rows), "\n"
    if kind == "hex":
        start = rng.randint(0, 200)
        return (f"0x{start + i:02X}" for i in itertools.count()), ", "
    if kind == "letters":
        offset = rng.randint(0, 10)
        return (f"{chr(65 + (i + offset) % 26)}{i + 1}" for i in itertools.count()), ", "
    if kind == "roman":
        start = rng.randint(1, 40)
        return (_roman(start + i) for i in itertools.count()), ", "
    if kind == "months":
        year, first = rng.randint(2020, 2030), rng.randint(0, 11)
        return (f"{_MONTHS[(first + i) % 12]} {year + (first + i) // 12}" for i in itertools.count()), "\n"
    # table rows of n, n squared, n cubed
    start = rng.randint(1, 20)
    header = iter(["| n | n^2 | n^3 |", "|---|-----|-----|"])
    rows = (f"| {n} | {n * n} | {n ** 3} |" for n in itertools.count(start))
    return itertools.chain(header, rows), "\n"


_SEQUENCES = ("arithmetic", "countdown", "squares", "nato", "times_table", "iso_dates", "weekday_dates",
              "clock", "steps", "csv", "hex", "letters", "roman", "months", "table")


@dataclass(frozen=True)
class _Task:
    kind: str  # copy | edit | fill | continue
    item: object


class PredictableWorkload(DraftWorkload):
    name = "predictable"
    description = "copy a passage, edit given code, fill a template or JSON, continue a sequence: output repeats the context"

    def __init__(self) -> None:
        data = load("predictable.jsonl")
        code = load("code.jsonl")
        self._paragraphs = [p for r in data if r["kind"] == "passage" for p in r["paragraphs"]]
        self._pools = snippets_by_lang(code)
        self._values: dict[str, list[str]] = next(r["values"] for r in data if r["kind"] == "values")
        tasks = [_Task("copy", (r["paragraphs"],)) for r in data if r["kind"] == "passage"]
        tasks += [_Task("copy", ([p],)) for r in data if r["kind"] == "passage" for p in r["paragraphs"]]
        tasks += [_Task("edit", (s, e)) for s in (r for r in code if r["kind"] == "snippet") for e in s["edits"]]
        # Templates and sequences draw fresh values on every use, so they appear several times
        # per round to give the four kinds roughly equal shares.
        tasks += [_Task("fill", r) for r in data if r["kind"] == "template"] * 5
        tasks += [_Task("continue", kind) for kind in _SEQUENCES] * 5
        self._tasks = tasks

    def _record(self, slots: list[str], number: int, rng: random.Random) -> str:
        fields = ", ".join(f"{slot} = {rng.choice(self._values[slot])}" for slot in slots)
        return f"Record {number}: {fields}"

    def _draft(self, task: _Task, rng: random.Random) -> Draft:
        more: Callable[[random.Random], str] | None
        if task.kind == "copy":
            (paragraphs,) = task.item
            material = "\n\n".join(paragraphs)
            head = rng.choice(_COPY) + "\n\n"
            others = [p for p in self._paragraphs if p not in paragraphs]
            parts = TextParts(head=head, tail="", material=material, more=dealer(others, rng))
            max_tokens = count(material) + 16
        elif task.kind == "edit":
            snippet, edit = task.item
            lang = snippet["lang"]
            head = rng.choice(_EDIT).format(Lang=LANG_NAMES[lang], edit=edit) + f"```{lang}\n"
            parts = TextParts(
                head=head,
                tail=snippet["code"] + "\n```",
                more=code_context(self._pools[lang], exclude=snippet["name"], rng=rng),
                wrap=("", "\n\n"),
            )
            max_tokens = count(snippet["code"]) + 32
        elif task.kind == "fill":
            template = task.item
            # A JSON "template" is an object whose values are the placeholders, filled like any other.
            text = json.dumps({k: f"{{{k}}}" for k in template["json_keys"]}) if template["json_keys"] else template["text"]
            slots = list(dict.fromkeys(_SLOT.findall(text)))
            head = _FILL.format(template=text)
            per_record = count(text) + 8
            numbers = itertools.count(1)
            records = [self._record(slots, next(numbers), rng) for _ in range(rng.randint(1, 3))]
            parts = TextParts(
                head=head,
                tail="",
                material="\n".join(records),
                more=lambda r: self._record(slots, next(numbers), r),
                sep="\n",
            )
            max_tokens = per_record * len(records) + 16
        else:
            items, sep = _sequence(task.item, rng)
            given = [next(items) for _ in range(rng.randint(6, 14))]
            n = rng.choice((10, 20, 30, 40))
            parts = TextParts(
                head=rng.choice(_CONTINUE).format(n=n),
                tail="",
                material=sep.join(given),
                more=lambda r: next(items),
                sep=sep,
            )
            max_tokens = n * max(1, count(sep.join(given)) // len(given) + 1) + 8
        return text_draft(self.name, parts, max_tokens, temperature=0.0, seed=rng.getrandbits(31))

    def drafts(self, seed: int) -> Iterator[Draft]:
        rng = derive(seed, self.name)
        for task in deck(self._tasks, rng):
            yield self._draft(task, rng)
