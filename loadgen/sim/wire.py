"""Wire pieces every route of the simulated server shares: JSON and SSE bodies, SGLang's errors.

In: Python objects. Out: aiohttp responses and SSE frames shaped like SGLang 0.5.23's.
"""

from __future__ import annotations

import orjson
from aiohttp import web

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
DONE = b"data: [DONE]\n\n"
QUEUE_FULL = "The request queue is full."


def openai_error(message: str, type_: str, code: int) -> web.Response:
    body = {"object": "error", "message": message, "type": type_, "param": None, "code": code}
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


def json_response(obj: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(obj), content_type="application/json")


def sse(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"

