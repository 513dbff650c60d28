"""``chat``: conversational questions and multi-turn histories, as chat messages.

Length control prepends earlier exchanges from other conversations (a long chat that has
wandered across topics) and cuts from the oldest turn, so the final question is always intact.
Temperature is 0 so that chat sits between the repetitive tasks and the free-writing ones on
content alone, not because of sampling noise.
"""

from __future__ import annotations

from collections.abc import Iterator

from loadgen.workloads.base import ChatParts, Draft, DraftWorkload, chat_draft, dealer, deck, derive, exchanges
from loadgen.workloads.builtin import load


class ChatWorkload(DraftWorkload):
    name = "chat"
    description = "conversational questions and multi-turn chat histories"

    def __init__(self) -> None:
        data = load("chat.jsonl")
        self._systems = [r["text"] for r in data if r["kind"] == "system"]
        questions = [({"role": "user", "content": r["text"]},) for r in data if r["kind"] == "question"]
        conversations = [tuple(r["turns"]) for r in data if r["kind"] == "conversation"]
        self._items: list[tuple[dict, ...]] = questions + conversations
        self._pairs = [pair for c in conversations for pair in exchanges(c)]

    def drafts(self, seed: int) -> Iterator[Draft]:
        rng = derive(seed, self.name)
        for turns in deck(self._items, rng):
            # Half the traffic carries a system prompt, as API clients differ in this.
            lead = ({"role": "system", "content": rng.choice(self._systems)},) if rng.random() < 0.5 else ()
            others = [pair for pair in self._pairs if pair[0] not in turns]
            parts = ChatParts(final=turns[-1:], history=turns[:-1], lead=lead, more=dealer(others, rng))
            yield chat_draft(self.name, parts, 200, temperature=0.0, seed=rng.getrandbits(31))
