"""What is behind a URL: which engine, its configuration, whether it answers at all.

Recorded in every results file (so a report says which server config produced
which numbers), and used to switch on SGLang-only request fields. What is fetched and how each answer
is read are the engines' (``loadgen.engines``, each engine's ``probe``); the HTTP is here.
"""

from __future__ import annotations

import asyncio
import errno
import shlex
import socket
from dataclasses import dataclass, field
from urllib.parse import urlparse

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
    status: int | None = None
    """The HTTP status of its ``/v1/models``; None when it gave none."""
    reason: str = ""
    """Why it does not answer, in a few words ("connection refused", "not an HTTP server"): for the one line
    that says so (``error`` keeps the exception as run.json records it)."""

    @property
    def answers(self) -> bool:
        """It speaks HTTP and is not still loading (a 503: llama.cpp's answer while it loads its model)."""
        return self.reachable and self.status != 503

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


def refused(url: str, timeout_s: float = CONNECT_S) -> str:
    """Why nothing accepts a connection at ``url``'s host and port, in a few words; "" when something does. A
    connection and no request: a run finds a target where nothing listens before it asks any other anything."""
    p = urlparse(url)
    try:
        with socket.create_connection((p.hostname, p.port or (443 if p.scheme == "https" else 80)), timeout=timeout_s):
            return ""
    except socket.timeout:
        return f"no connection within {timeout_s:g} s"
    except socket.gaierror as exc:
        return f"cannot resolve {p.hostname} ({exc.strerror})"
    except OSError as exc:
        return "connection refused" if exc.errno == errno.ECONNREFUSED else f"cannot connect ({exc.strerror or exc})"


def _reason(exc: BaseException, timeout_s: float) -> str:
    """Why a server does not answer, in a few words."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = getattr(exc, "os_error", None)
        if isinstance(os_error, OSError) and os_error.errno == errno.ECONNREFUSED:
            return "connection refused"
        return f"cannot connect ({(os_error.strerror if isinstance(os_error, OSError) else None) or exc})"
    if isinstance(exc, asyncio.TimeoutError):
        if "connect" in str(exc).lower():  # aiohttp's ServerTimeoutError: "Connection timeout to host ..."
            return f"no connection within {min(CONNECT_S, timeout_s):g} s"
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError, aiohttp.ClientPayloadError)):
        return f"not an HTTP server: {type(exc).__name__}"  # its text holds the bytes it got, on several lines
    return _why(exc)


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
            async with s.get(url + "/v1/models") as r:
                out.status = r.status
                models = decode(r.status, await r.read() if r.status == 200 else b"")
            out.reachable = True
            if out.status == 503:
                out.reason = "HTTP 503 on /v1/models (still loading?)"
            if isinstance(models, dict):
                out.models = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
                out.engine = owner_of(models)
            if out.status != 503:  # still loading: asked again once it answers
                await _identify(s, url, out, timeout_s)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        if not out.reachable:
            out.error = _why(exc)
            out.reason = _reason(exc, timeout_s)
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
