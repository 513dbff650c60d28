"""What is behind a URL: which engine, its configuration, whether it answers at all.

Recorded in every results file (so a report says which server config produced
which numbers), and used to switch on SGLang-only request fields. What is fetched and how each answer
is read are the engines' (``loadgen.engines``, each engine's ``probe``); the HTTP is here.
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass, field

import aiohttp
from loadgen.engines import PAGE_TIMEOUT_S, UNKNOWN, decode, get, identify, owner_of


CONNECT_S = 5.0
"""How long the probe waits for a connection: a server that is not there says so at once or not at all."""


@dataclass
class ServerProbe:
    url: str
    reachable: bool = False
    error: str = ""
    engine: str = UNKNOWN
    """A name of loadgen.engines' registry, or "unknown"."""
    server_info: dict = field(default_factory=dict)
    models: list = field(default_factory=list)

    @property
    def speculative(self) -> bool | None:
        """Whether the server decodes speculatively; None when its engine does not say (its module reads it)."""
        return get(self.engine).speculative(self.server_info)

    def to_dict(self) -> dict:
        return {"url": self.url, "reachable": self.reachable, "error": self.error, "engine": self.engine,
                "speculative": self.speculative, "models": self.models, "server_info": self.server_info}


async def _get(session: aiohttp.ClientSession, url: str):
    async with session.get(url) as r:
        return decode(r.status, await r.read() if r.status == 200 else b"")


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _identify(s: aiohttp.ClientSession, url: str, out: ServerProbe, timeout_s: float) -> None:
    """The engines' own questions (loadgen.engines.identify), asked over this session. A page that does not
    answer in time is one that did not answer (what it would have told is missing), and ``error`` says so."""
    steps = identify(out.engine)
    try:
        path = next(steps)
        while True:
            try:
                page = await _get(s, url + path)
            except asyncio.TimeoutError:
                page = None
                out.error = f"GET {path}: no answer within {timeout_s:g} s"
            path = steps.send(page)
    except StopIteration as done:
        engine, info = done.value
    if info is not None:
        out.engine, out.server_info = engine, info


async def probe(url: str, timeout_s: float = PAGE_TIMEOUT_S) -> ServerProbe:
    """``timeout_s``: for each page (the connection itself: :data:`CONNECT_S`)."""
    out = ServerProbe(url)
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(CONNECT_S, timeout_s))
    try:
        async with aiohttp.ClientSession(timeout=timeout) as s:
            models = await _get(s, url + "/v1/models")
            out.reachable = True
            if isinstance(models, dict):
                out.models = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
                out.engine = owner_of(models)
            await _identify(s, url, out, timeout_s)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        if not out.reachable:
            out.error = _why(exc)
        else:  # it answered /v1/models, then broke off: what it is stays what /v1/models said
            out.error = f"probe broken off: {_why(exc)}"
    return out


def probe_sync(url: str, timeout_s: float = PAGE_TIMEOUT_S) -> ServerProbe:
    return asyncio.run(probe(url, timeout_s))


def probe_target(target, command: str | list[str] | None = None) -> ServerProbe:
    """Probe a target's server and switch on what its engine needs: an engine reporting acceptance on its
    OpenAI routes only when asked (SGLang) gets ``spec_details`` on a target that does not speak its own API.
    ``command``: the start command loadgen was given for it; what it says fills the gaps of what the server
    says of itself (its engine's ``read_command``: vLLM's speculative method and ``max_num_seqs``)."""
    found = probe_sync(target.url)
    engine = get(found.engine)
    if command and found.reachable:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        found.server_info = {**engine.read_command(argv), **found.server_info}
    if engine.spec_details and target.protocol != engine.native_protocol:
        target.spec_details = True
    return found
