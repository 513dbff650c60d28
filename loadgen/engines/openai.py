"""A generic OpenAI-compatible server: what loadgen assumes of a server no other engine module claims.

Its probe finds ``engine: "unknown"`` (the name run.json keeps for it): the OpenAI routes answer,
nothing else is known — no ``/metrics`` loadgen can read (the stage's ``server`` block says why),
no cache reset, no speculative setting the server reports, no per-batch speculation setting.
It is what :func:`loadgen.engines.get` answers for any name it does not hold.
"""

from __future__ import annotations

from loadgen.engines.base import Engine

ENGINE = Engine(
    name="openai",
    no_terms="the servers' engine is {engine}: loadgen knows no per-batch speculation setting for it",
)
