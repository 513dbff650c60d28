"""A real loopback HTTP server whose /metrics (and reset routes) answer what a test sets."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Served:
    def __init__(self) -> None:
        self.status = 200
        self.body = ""
        self.content_type = "text/plain; version=0.0.4"
        self.delay_s = 0.0
        self.pages: list[str] | None = None
        """When set: answered in turn, the last one repeated."""
        self.posts: list[str] = []
        self.post_status: dict[str, int] = {}
        self.gets = 0
        self.routes: dict[str, tuple[int, str]] = {}
        """Other GET paths: (status, body)."""

    def page(self) -> str:
        if self.pages:
            return self.pages.pop(0) if len(self.pages) > 1 else self.pages[0]
        return self.body


@pytest.fixture
def served():
    state = Served()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, status: int, body: str, ctype: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:  # the client gave up (a timeout test)
                pass

        def do_GET(self):
            if self.path in state.routes:
                st, body = state.routes[self.path]
                return self._send(st, body, "application/json")
            if self.path != "/metrics":
                return self._send(404, "not found", "text/plain")
            state.gets += 1
            if state.delay_s:
                time.sleep(state.delay_s)
            self._send(state.status, state.page(), state.content_type)

        def do_POST(self):
            state.posts.append(self.path)
            self._send(state.post_status.get(self.path.split("?")[0], 200), "", "text/plain")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    state.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()
