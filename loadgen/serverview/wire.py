"""One blocking HTTP exchange with a server's admin routes (``/metrics``, ``/flush_cache``, ``/slots``...).

In: a base URL, a method and path, a timeout. Out: (status, Content-Type, body), the body read up to
``max_bytes`` (one byte more is read so a caller can tell a page that was cut). Raises ``OSError``
(``socket.timeout`` included) or ``http.client.HTTPException``; the callers turn those into their
one-line notes. Blocking on purpose: these calls run in a thread of their own or in the gevent
Locust master, never on the client's event loop.
"""

from __future__ import annotations

import base64
import http.client
import json
from urllib.parse import unquote, urlsplit

from loadgen.engines import decode


def call(base_url: str, method: str, path: str, *, timeout_s: float, headers: dict | None = None,
         max_bytes: int = 1 << 20) -> tuple[int, str, bytes]:
    parts = urlsplit(base_url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    hdrs = dict(headers or {})
    if parts.username is not None and not any(k.lower() == "authorization" for k in hdrs):
        # a URL's user:password@ as the client's aiohttp sends it: basic auth
        userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        hdrs["Authorization"] = "Basic " + base64.b64encode(userinfo.encode()).decode()
    try:
        conn.request(method, parts.path.rstrip("/") + path, body=b"" if method == "POST" else None,
                     headers=hdrs)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type", "") or "", r.read(max_bytes + 1)
    finally:
        conn.close()


def get_page(base_url: str, path: str, *, timeout_s: float, headers: dict | None = None):
    """GET ``path`` as loadgen.engines.identify is sent it (engines.decode: JSON, else text); None when it
    did not answer 200 or at all."""
    try:
        return decode(*call(base_url, "GET", path, timeout_s=timeout_s, headers=headers)[::2])
    except (OSError, http.client.HTTPException):
        return None


def get_json(base_url: str, path: str, *, timeout_s: float, headers: dict | None = None):
    """GET ``path`` and parse its JSON body; None when the server did not answer 200 with JSON (a probe or
    a reading that finds nothing goes on without it)."""
    try:
        status, _, body = call(base_url, "GET", path, timeout_s=timeout_s, headers=headers)
        return json.loads(body) if status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
