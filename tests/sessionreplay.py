"""The history each session turn should have carried, rebuilt from a stage's records and its request stream: what
the session tests hold the server's own prompt count against (the simulator's rule, llama.cpp's tokenizer)."""

from __future__ import annotations

from typing import Iterator

from loadgen.record import RequestRecord
from loadgen.request import GenRequest
from loadgen.workloads.sessions import prefix_text, user_message


def replayed(records: list[RequestRecord], drawn: Iterator[GenRequest], turns: int,
             prefix: int = 0) -> Iterator[tuple[RequestRecord, list[dict]]]:
    """(record, the messages its prompt should have been) for every completed turn of a one-process stage, in
    session order: session n drew the stream's requests (n-1)·turns … n·turns-1 (loadgen/workloads/sessions.py);
    turn 1 brings the workload's whole conversation, a later turn the reply before it and its last message."""
    by_session: dict[int, dict[int, RequestRecord]] = {}
    for r in records:
        if r.turn is not None:
            by_session.setdefault(r.turn.session, {})[r.turn.index] = r
    if not by_session:
        return
    user_turns = [next(drawn) for _ in range(max(by_session) * turns)]
    for session, recs in sorted(by_session.items()):
        history = [{"role": "system", "content": prefix_text(prefix)}] if prefix else []
        for index in range(1, turns + 1):
            req = user_turns[(session - 1) * turns + index - 1]
            history += req.as_messages() if index == 1 else [{"role": "user", "content": user_message(req)}]
            rec = recs.get(index)
            if rec is None or not rec.ok:
                break
            yield rec, list(history)
            if rec.turn.last:
                break
            assert rec.reply is not None, (session, index)  # a turn before its last asks for its reply
            history.append({"role": "assistant", "content": rec.reply})
