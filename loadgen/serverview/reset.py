"""Empty a server's prefix cache before a stage (``--reset-cache``), so no stage inherits a warm cache.

In: a base URL and its engine (the probe's or the page's). Out: a JSON-able record of what was done,
``{"engine", "how", "ok", "ms", "error"?}``; never raises. SGLang refuses ``/flush_cache`` while
requests run (HTTP 400): tried again for up to ``wait_s`` (a stage's cool-down can leave a request
finishing). llama.cpp has no whole-cache reset: each slot is erased (``/slots/{id}?action=erase``),
which needs its ``/slots`` endpoint (on unless ``--no-slots``) and ``--slot-save-path`` (every slot
action answers 501 without it, tools/server/server.cpp). vLLM serves ``/reset_prefix_cache`` only
with ``VLLM_SERVER_DEV_MODE=1``.
"""

from __future__ import annotations

import http.client
import json
import time

from loadgen.serverview import wire
from loadgen.serverview.engines import ENGINES


BUSY = (400, 409)
"""SGLang's /flush_cache answers 400 while requests run, vLLM's /reset_prefix_cache 409 (0.11+)."""


def _says_no(text: str) -> bool:
    """vLLM (some versions) answers 200 with {"success": false} when it did not reset."""
    try:
        d = json.loads(text) if text.startswith("{") else None
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("success") is False


def reset_cache(base_url: str, engine: str, *, timeout_s: float = 10.0, wait_s: float = 5.0,
                headers: dict | None = None) -> dict:
    t0 = time.perf_counter()
    eng = ENGINES.get(engine)
    out: dict = {"engine": engine, "how": None, "ok": False}
    hdrs = dict(headers or {})

    def done(**kw) -> dict:
        out.update(kw, ms=round((time.perf_counter() - t0) * 1000, 1))
        return out

    if eng is None or eng.reset is None:
        return done(error=f"{base_url}: no way to empty the cache of a server loadgen does not know ({engine})")
    method, path = eng.reset
    try:
        if method == "slots":
            status, _, body = wire.call(base_url, "GET", "/slots", timeout_s=timeout_s, headers=hdrs)
            if status == 501:
                return done(how="POST /slots/{id}?action=erase",
                            error=f"{base_url}/slots: HTTP 501 (llama.cpp: /slots is off, --no-slots)")
            if status != 200:
                return done(how="POST /slots/{id}?action=erase",
                            error=f"{base_url}/slots: HTTP {status} (llama.cpp started with --no-slots?)")
            ids = [s.get("id") for s in json.loads(body) if isinstance(s, dict) and isinstance(s.get("id"), int)]
            bad = []
            for i in ids:
                st, _, b = wire.call(base_url, "POST", f"/slots/{i}?action=erase", timeout_s=timeout_s, headers=hdrs)
                if st != 200:
                    why = " (llama.cpp erases a slot only when started with --slot-save-path)" if st == 501 else ""
                    bad.append(f"slot {i}: HTTP {st} {b[:80].decode('utf-8', 'replace')}{why}")
                    if st == 501:
                        break  # every slot answers the same
            return done(how="POST /slots/{id}?action=erase", slots=len(ids), ok=not bad,
                        **({"error": f"{base_url}: " + "; ".join(bad[:3])} if bad else {}))
        deadline = time.perf_counter() + wait_s
        while True:
            status, _, body = wire.call(base_url, method, path, timeout_s=timeout_s, headers=hdrs)
            if status not in BUSY or time.perf_counter() >= deadline:
                break
            time.sleep(0.25)  # SGLang 400, vLLM 409: a request still runs
        text = body[:160].decode("utf-8", "replace").strip()
        if status != 200 or _says_no(text):
            hint = " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)" if engine == "vllm" and status == 404 else ""
            return done(how=f"{method} {path}", error=f"{base_url}{path}: HTTP {status} {text}{hint}".rstrip())
        return done(how=f"{method} {path}", ok=True)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return done(how=f"{method} {path}", error=f"{base_url}{path}: {type(exc).__name__}: {str(exc)[:160]}")
