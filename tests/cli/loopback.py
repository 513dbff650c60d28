"""Loopback servers in a thread of the test, for what a command sends (or must not send) to its targets.

:class:`CountingServer` counts every request and answers it; :class:`NotHttpServer` listens but does not speak
HTTP; :class:`DelayedProxy` starts listening on its port only when told to, after a delay, then relays every
connection to a real server (a server still loading, as ``--wait-for-server`` waits for).
"""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
import time


class _Loopback:
    """A socketserver on 127.0.0.1 serving in a thread while the ``with`` lasts; ``url`` its http:// address."""

    def _bind(self, server_class, handler) -> None:
        self._srv = server_class(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._srv.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._srv.shutdown()
        self._srv.server_close()


class CountingServer(_Loopback):
    """A loopback HTTP server that counts every request (any method, any path, in ``requests``) and answers each:
    200 with a model list, or ``post_status`` to a POST (500: every generation request fails)."""

    def __init__(self, post_status: int = 200) -> None:
        self.requests: list[str] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                seen.append(f"{self.command} {self.path}")
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                status = post_status if self.command == "POST" else 200
                body = (b'{"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "nobody"}]}'
                        if status == 200 else b'{"error": "this server fails every request"}')
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

            def log_message(self, *a) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:  # a client gone mid-answer: not ours to print
                pass

        self._bind(Server, Handler)


class NotHttpServer(_Loopback):
    """A loopback TCP server that greets like an SSH server and closes: it listens, but does not speak HTTP."""

    def __init__(self) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True

        self._bind(Server, Handler)


class DelayedProxy:
    """Listens on ``port`` once told to (:meth:`listen_after`), then relays every connection to ``upstream`` (host,
    port) byte for byte: a server that starts answering late. ``listening_at``: when it began (time.monotonic),
    None until then."""

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.port, self.upstream = port, upstream
        self.listening_at: float | None = None
        self._stop = threading.Event()
        self._sock: socket.socket | None = None

    def listen_after(self, seconds: float) -> None:
        threading.Thread(target=self._serve, args=(seconds,), daemon=True).start()

    def __enter__(self) -> "DelayedProxy":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()

    def _serve(self, after_s: float) -> None:
        if self._stop.wait(after_s):
            return
        self._sock = sock = socket.create_server(("127.0.0.1", self.port))
        self.listening_at = time.monotonic()
        while not self._stop.is_set():
            try:
                client, _ = sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_relay, args=(a, b), daemon=True).start()


def _relay(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
