"""Empty a server's prefix cache before a stage (``--reset-cache``), so no stage inherits a warm cache.

In: a base URL and its engine (the probe's or the page's). Out: a JSON-able record of what was done,
``{"engine", "how", "ok", "ms", "error"?}``; never raises. What is posted, which answers mean "requests
still run" (asked again for up to ``wait_s``: a stage's cool-down can leave a request finishing) and what an
error answer means are the engine's (``loadgen.engines``, its ``reset``); a per-slot reset (llama.cpp: no
whole-cache reset) erases each slot its listing names.
"""

from __future__ import annotations

import http.client
import json
import time

from loadgen.engines import get
from loadgen.engines.base import Reset
from loadgen.serverview import wire


def _says_no(text: str) -> bool:
    """vLLM (some versions) answers 200 with {"success": false} when it did not reset."""
    try:
        d = json.loads(text) if text.startswith("{") else None
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("success") is False


def _why(hints, status: int) -> str:
    hint = hints.get(status) or hints.get(0)
    return f" ({hint})" if hint else ""


def reset_cache(base_url: str, engine: str, *, timeout_s: float = 10.0, wait_s: float = 5.0,
                headers: dict | None = None) -> dict:
    t0 = time.perf_counter()
    how = get(engine).reset
    out: dict = {"engine": engine, "how": None, "ok": False}
    hdrs = dict(headers or {})

    def done(**kw) -> dict:
        out.update(kw, ms=round((time.perf_counter() - t0) * 1000, 1))
        return out

    if how is None:
        return done(error=f"{base_url}: no way to empty the cache of a server loadgen does not know ({engine})")
    try:
        if how.slots:
            return done(**_erase_slots(base_url, how, timeout_s, hdrs))
        deadline = time.perf_counter() + wait_s
        while True:
            status, _, body = wire.call(base_url, how.method, how.path, timeout_s=timeout_s, headers=hdrs)
            if status not in how.busy or time.perf_counter() >= deadline:
                break
            time.sleep(0.25)  # SGLang 400, vLLM 409: a request still runs
        text = body[:160].decode("utf-8", "replace").strip()
        if status != 200 or _says_no(text):
            hint = _why(how.hints, status) if status != 200 else ""
            return done(how=f"{how.method} {how.path}",
                        error=f"{base_url}{how.path}: HTTP {status} {text}{hint}".rstrip())
        return done(how=f"{how.method} {how.path}", ok=True)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return done(how=f"{how.method} {how.path}",
                    error=f"{base_url}{how.slots or how.path}: {type(exc).__name__}: {str(exc)[:160]}")


def _erase_slots(base_url: str, how: Reset, timeout_s: float, hdrs: dict) -> dict:
    """Each slot the listing names, erased in turn; stops at the first 501 (every slot answers the same)."""
    what = f"{how.method} {how.path}"
    status, _, body = wire.call(base_url, "GET", how.slots, timeout_s=timeout_s, headers=hdrs)
    if status != 200:
        return {"how": what, "error": f"{base_url}{how.slots}: HTTP {status}{_why(how.slots_hints, status)}"}
    ids = [s.get("id") for s in json.loads(body) if isinstance(s, dict) and isinstance(s.get("id"), int)]
    bad = []
    for i in ids:
        st, _, b = wire.call(base_url, how.method, how.path.format(id=i), timeout_s=timeout_s, headers=hdrs)
        if st != 200:
            bad.append(f"slot {i}: HTTP {st} {b[:80].decode('utf-8', 'replace')}{_why(how.hints, st)}")
            if st == 501:
                break
    return {"how": what, "slots": len(ids), "ok": not bad,
            **({"error": f"{base_url}: " + "; ".join(bad[:3])} if bad else {})}
