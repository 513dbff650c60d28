"""User data as workloads: JSONL requests and ShareGPT conversations.

Every problem with a file is a one-line :class:`LoadgenError` naming the file and the line
(or, inside a JSON array, the record), because the CLI prints exactly that and nothing else.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen.workloads import tokens
from loadgen.errors import LoadgenError
from loadgen.workloads.base import (
    ChatParts,
    Draft,
    DraftWorkload,
    TextParts,
    chat_draft,
    deck,
    derive,
    exchanges,
    split_chat,
    text_draft,
)

DEFAULT_MAX_TOKENS = 256
"""Output budget for records that give none (override with the output-tokens option)."""

_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}


@dataclass(frozen=True)
class Record:
    """One request from a file: exactly one of ``prompt`` / ``messages``."""

    prompt: str | None = None
    messages: tuple[dict, ...] | None = None
    max_tokens: int | None = None
    reply: str | None = None
    """The reference answer a ShareGPT conversation ends with; used only as padding history."""


def _read_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise LoadgenError(f"{path}:{lineno}: not UTF-8 text") from None
    except FileNotFoundError:
        raise LoadgenError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise LoadgenError(f"{path}: is a directory, not a workload file") from None
    except PermissionError:
        raise LoadgenError(f"{path}: permission denied") from None


def _json_line(path: Path, lineno: int, line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise LoadgenError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def _messages(where: str, value: object) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise LoadgenError(f"{where}: 'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(value, 1):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise LoadgenError(f"{where}: message {i} needs string 'role' and 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out)


def _max_tokens(where: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LoadgenError(f"{where}: 'max_tokens' must be a positive integer, not {value!r}")
    return value


def load_jsonl(path: Path) -> list[Record]:
    """One request per line: ``{"prompt": str}`` or ``{"messages": [...]}``, optional ``max_tokens``."""
    records = []
    for lineno, line in _read_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = _json_line(path, lineno, line)
        if not isinstance(obj, dict):
            raise LoadgenError(f"{where}: expected a JSON object with 'prompt' or 'messages'")
        prompt, messages = obj.get("prompt"), obj.get("messages")
        if prompt is not None and messages is not None:
            raise LoadgenError(f"{where}: give 'prompt' or 'messages', not both")
        if messages is not None:
            record = Record(messages=_messages(where, messages), max_tokens=_max_tokens(where, obj.get("max_tokens")))
        elif isinstance(prompt, str) and prompt.strip():
            record = Record(prompt=prompt, max_tokens=_max_tokens(where, obj.get("max_tokens")))
        else:
            raise LoadgenError(f"{where}: no prompt (needs a non-empty 'prompt' string or a 'messages' list)")
        records.append(record)
    if not records:
        raise LoadgenError(f"{path}: no requests in the file")
    return records


def _sharegpt_record(where: str, obj: object) -> Record | None:
    """A record from one conversation, or None when it has no human turn to send."""
    turns = obj.get("conversations", obj.get("conversation")) if isinstance(obj, dict) else None
    if not isinstance(turns, list):
        raise LoadgenError(f"{where}: expected an object with a 'conversations' list")
    messages = []
    for i, turn in enumerate(turns, 1):
        if not (isinstance(turn, dict) and isinstance(turn.get("from"), str) and isinstance(turn.get("value"), str)):
            raise LoadgenError(f"{where}: turn {i} needs string 'from' and 'value'")
        role = _SHAREGPT_ROLES.get(turn["from"].lower())
        if role is None:
            known = ", ".join(sorted(_SHAREGPT_ROLES))
            raise LoadgenError(f"{where}: turn {i} has unknown speaker {turn['from']!r} (known: {known})")
        messages.append({"role": role, "content": turn["value"]})
    # The request ends at the last human turn; the answer after it is the reference reply,
    # whose length is the natural output budget (as the usual ShareGPT benchmarks do).
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user" and m["content"].strip()), default=None)
    if last_user is None:
        return None
    reply = next((m["content"] for m in messages[last_user + 1 :] if m["role"] == "assistant"), None)
    return Record(
        messages=tuple(messages[: last_user + 1]),
        max_tokens=max(1, tokens.count(reply)) if reply else None,
        reply=reply,
    )


def load_sharegpt(path: Path) -> list[Record]:
    """ShareGPT conversations: a JSON array, or one conversation object per line.

    Conversations without a human turn are skipped, as real dumps contain a few empty ones.
    """
    lines = list(_read_lines(path))
    first = next((line.lstrip() for _, line in lines if line.strip()), "")
    records: list[Record | None] = []
    if first.startswith("["):
        try:
            data = json.loads("".join(line for _, line in lines))
        except json.JSONDecodeError as exc:
            raise LoadgenError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        records = [_sharegpt_record(f"{path}: record {i}", obj) for i, obj in enumerate(data, 1)]
    else:
        for lineno, line in lines:
            if line.strip():
                records.append(_sharegpt_record(f"{path}:{lineno}", _json_line(path, lineno, line)))
    usable = [r for r in records if r is not None]
    if not usable:
        raise LoadgenError(f"{path}: no conversation with a human turn")
    return usable


class DatasetWorkload(DraftWorkload):
    """Records from a file in shuffled rounds; padding draws on the file's other records."""

    def __init__(self, name: str, records: Sequence[Record], description: str) -> None:
        self.name = name
        self.description = description
        self.records = list(records)
        self._pairs = [pair for r in self.records for pair in _record_exchanges(r)]

    def _more_text(self, rng: random.Random) -> str:
        r = rng.choice(self.records)
        return r.prompt if r.prompt is not None else "\n\n".join(m["content"] for m in r.messages or ())

    def _more_exchange(self, rng: random.Random) -> tuple[dict, dict] | None:
        return rng.choice(self._pairs) if self._pairs else None

    def drafts(self, seed: int) -> Iterator[Draft]:
        rng = derive(seed, "dataset", self.name)
        for r in deck(self.records, rng):
            max_tokens = r.max_tokens or DEFAULT_MAX_TOKENS
            sampling = {"seed": rng.getrandbits(31)}
            if r.prompt is not None:
                parts = TextParts(head="", tail="", material=r.prompt, more=self._more_text)
                yield text_draft(self.name, parts, max_tokens, **sampling)
            else:
                lead, history, final = split_chat(r.messages or ())
                chat = ChatParts(final=final, history=history, lead=lead, more=self._more_exchange)
                yield chat_draft(self.name, chat, max_tokens, **sampling)


def _record_exchanges(r: Record) -> list[tuple[dict, dict]]:
    messages = list(r.messages or ())
    if r.reply is not None:
        messages.append({"role": "assistant", "content": r.reply})
    return exchanges(messages)


def jsonl_workload(path: Path) -> DatasetWorkload:
    records = load_jsonl(path)
    return DatasetWorkload(path.stem, records, f"{len(records)} requests from {path}")


def sharegpt_workload(path: Path) -> DatasetWorkload:
    records = load_sharegpt(path)
    return DatasetWorkload(path.stem, records, f"{len(records)} ShareGPT conversations from {path}")
