"""One module per serving engine: everything loadgen knows about SGLang, vLLM, llama.cpp, a generic OpenAI server.

In: nothing (tables and pure functions; the HTTP stays with whoever asks). Out: :data:`ENGINES`, name →
:class:`~loadgen.engines.base.Engine`, and the questions every other folder asks of it:

- how it is detected: :func:`by_owner` (``/v1/models``' ``owned_by``), each engine's ``probe`` (which info
  pages run/probe.py fetches, how it reads them), :func:`detect` (a ``/metrics`` page's sample names);
- whether it speculates (``speculative``, from what its probe kept);
- its ``/metrics`` series and when they move (``metrics``: serverview reads them, sim writes them);
- its cache reset (``reset``: what serverview/reset.py posts and how it reads the answer);
- its per-batch speculation setting (``terms``: analysis/engineterms.py resolves the policy, the engine
  spells it; ``no_terms`` why there is none) and its words in the report (``title``, ``cap_word``).

Engine names are what run.json, crossover.json and the ``server`` block write ("sglang", "vllm",
"llama.cpp"); a server nothing claims is "unknown", and :func:`get` answers the generic OpenAI
engine (``openai``) for it. The registry's order is the probe's and the page detection's.

**Adding an engine** (TensorRT-LLM, TGI, …): one module here building an ``Engine`` (its name, how its
probe tells it apart, its metric names and when they move, its reset, its terms or why none), listed in
``ENGINES`` below, plus its tests in tests/engines/ (detected from a recorded answer of the real server;
a recorded ``/metrics`` page summarised). Nothing else changes: the probe, the window summary, the reset,
the engine terms and the report ask the registry.
"""

from __future__ import annotations

import json
from typing import Any, Generator, Iterable

from loadgen.engines import llamacpp, openai, sglang, vllm
from loadgen.engines.base import Engine

ENGINES: dict[str, Engine] = {e.name: e for e in (sglang.ENGINE, vllm.ENGINE, llamacpp.ENGINE, openai.ENGINE)}
"""name → engine; a test or a plugin adds one by adding an entry."""

GENERIC = openai.ENGINE
UNKNOWN = "unknown"
"""The engine name of a server (or a page) no engine claims."""

PAGE_TIMEOUT_S = 30.0
"""How long a probe waits for each page: a vLLM on a busy CPU core took over 5 s to answer ``/version`` or
``/metrics`` (CI, 2026-12-03), and a probe that gave up then recorded a speculative server as
``"speculative": null``. A server that refuses the connection still fails at once."""


def get(name: str | None) -> Engine:
    """The named engine; the generic OpenAI one for "unknown" or any name loadgen does not hold."""
    return ENGINES.get(name or "", GENERIC)


def detect(names: Iterable[str]) -> str:
    """The engine whose metric prefix the page's sample names carry, else "unknown"."""
    names = list(names)
    for engine in ENGINES.values():
        if engine.metrics is not None and any(n.startswith(engine.metrics.prefix) for n in names):
            return engine.name
    return UNKNOWN


def by_owner(owners: set) -> str:
    """The engine whose ``owned_by`` a ``/v1/models`` answer carries, else "unknown"."""
    return next((e.name for e in ENGINES.values() if e.probe.owned_by and e.probe.owned_by in owners), UNKNOWN)


def closes_after_stream(server_header: str) -> bool:
    """Whether a server whose ``Server`` header this is closes the connection after every stream (its engine's
    ``closes_after_stream``): the client must not pool it."""
    return any(e.closes_after_stream and server_header.startswith(e.closes_after_stream) for e in ENGINES.values())


def with_metrics() -> str:
    """The engines whose /metrics loadgen reads, as a sentence names them: "SGLang, vLLM or llama.cpp"."""
    titles = [e.title or e.name for e in ENGINES.values() if e.metrics is not None]
    return ", ".join(titles[:-1]) + " or " + titles[-1] if len(titles) > 1 else "".join(titles)


Identify = Generator[str, Any, tuple[str, dict | None]]


def identify(owner: str = UNKNOWN) -> Identify:
    """Which engine a server is, asked the way each engine's ``probe`` says, in the registry's order: a
    generator that yields each path to GET, is sent its answer (:func:`decode`: JSON, else text; None when not 200),
    and returns (engine, server_info) — the first engine whose info page reads as its own, else ``owner``
    (``/v1/models``' owner) and None. The HTTP is its driver's: run/probe.py's (aiohttp) and the Locust
    master's (blocking), one rule for both."""
    for engine in ENGINES.values():
        p = engine.probe
        if not p.info_paths or not (p.asked_always or owner in (UNKNOWN, engine.name)):
            continue
        if p.needs_owner and owner != engine.name:
            continue
        page = None
        for path in p.info_paths:
            page = yield path
            if page is not None:
                break
        if p.is_info(page):
            then = []
            for path in p.then_paths:
                then.append((yield path))
            return engine.name, p.server_info(page, *then)
    return owner, None


def owner_of(models: Any) -> str:
    """The engine a ``/v1/models`` answer names by its entries' ``owned_by``, else "unknown"."""
    if not isinstance(models, dict):
        return UNKNOWN
    return by_owner({m.get("owned_by") for m in models.get("data", []) if isinstance(m, dict)})


def decode(status: int, body: bytes) -> Any:
    """A probe's answer as :func:`identify` is sent it: the decoded JSON, else the text (a ``/metrics`` page);
    None when not 200."""
    if status != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")


def identify_with(get) -> tuple[str, dict]:
    """(engine, server_info) of a server, with a blocking ``get(path)`` answering as :func:`decode` does."""
    steps = identify(owner_of(get("/v1/models")))
    try:
        path = next(steps)
        while True:
            path = steps.send(get(path))
    except StopIteration as done:
        engine, info = done.value
    return engine, info or {}
