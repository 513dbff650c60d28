"""Event loops for measuring: asyncio's own with kernel receive stamps (exact, the default), or uvloop.

``stamping`` is asyncio's selector loop whose TCP transports read with
``recvmsg`` and keep the kernel's receive time of what they read
(``SO_TIMESTAMPNS``): the instant the bytes reached the socket, whatever the
loop was doing then and however long the process took to wake up. On a quiet
client core a poll-return stamp was 0.2 ms late at the median and 1-2.5 ms at
p99 against the simulator's write log (C=50, speculative), mostly the wake-up
of an idle process; the kernel stamp is not. Where the kernel gives no stamp
(TLS, other platforms), its selector's clock is used: it notes the instant each
poll returns. All sockets that poll found readable are then stamped with that
one instant, so in a burst (a batching server writes every stream's chunk in
the same decode step) the last socket handled is not stamped later than the
first. uvloop has no such hook; there each socket is stamped when its
``data_received`` runs, which is early but drifts by the handling time of the
sockets before it in the burst.

Measured against a known-schedule server (client and server on their own
cores, lock-step bursts, 2-token chunks every 10 ms): at 50-200 streams the
poll clock's TTFT p50 error was 0.06-0.38 ms against uvloop's 0.29-1.15 ms,
and ITL p99 0.03-0.39 ms against 0.2-1.6 ms; at 250 streams both stay within
about 1 ms on a quiet core. So ``auto`` is the stamping loop; ``uvloop``
remains for clients that need its lower CPU per chunk.
"""

from __future__ import annotations

import asyncio
import platform
import selectors
import socket
import struct
import sys
import time
from asyncio import selector_events

from loadgen.errors import LoadgenError

LOOPS = ("auto", "uvloop", "asyncio", "stamping")


def _poll_clock(base: type) -> type:
    class PollClockSelector(base):  # type: ignore[misc, valid-type]
        wake_ns = 0

        def select(self, timeout=None):
            ready = super().select(timeout)
            self.wake_ns = time.perf_counter_ns()
            return ready

    return PollClockSelector


# Python's socket module does not name it; 35 on Linux's generic socket ABI (x86-64, arm64).
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", None) or (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64") else None)
_ANCILLARY = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


class _KernelStampTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined]
    """asyncio's socket transport, reading with ``recvmsg`` to keep the kernel's receive stamp.

    ``rx_ns`` is the receive time of the newest bytes of the last read (what
    Linux gives for TCP), on ``time.perf_counter_ns``'s clock; 0 if the kernel
    gave none.
    """

    rx_ns = 0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._kernel_stamps = False
        if _SO_TIMESTAMPNS is not None and self._sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self._kernel_stamps = True
            except OSError:
                pass

    def _read_ready__data_received(self) -> None:
        if not self._kernel_stamps:
            return super()._read_ready__data_received()
        if self._conn_lost:
            return
        try:
            data, ancdata, _, _ = self._sock.recvmsg(self.max_size, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_ready__on_eof()
            return
        self.rx_ns = 0
        for level, kind, raw in ancdata:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                # The stamp is CLOCK_REALTIME; records use CLOCK_MONOTONIC (perf_counter_ns).
                mono = time.perf_counter_ns()
                rx = sec * 1_000_000_000 + nsec - (time.time_ns() - mono)
                if 0 < mono - rx < 60_000_000_000:  # a clock step would make it nonsense: no stamp then
                    self.rx_ns = rx
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")


class _StampingLoop(asyncio.SelectorEventLoop):
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        return _KernelStampTransport(self, sock, protocol, waiter, extra, server)


def new_event_loop(kind: str = "auto", selector_cls: type | None = None) -> asyncio.AbstractEventLoop:
    """A loop of ``kind``; ``selector_cls`` is the selector asyncio's loops use (gevent-patched
    processes must pass the original one)."""
    if kind not in LOOPS:
        raise LoadgenError(f"--loop: unknown loop {kind!r}; known: {', '.join(LOOPS)}")
    base = selector_cls or selectors.DefaultSelector
    if kind in ("auto", "stamping"):
        return _StampingLoop(_poll_clock(base)())
    if kind == "uvloop":
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            raise LoadgenError("--loop uvloop: uvloop is not installed") from None
    return asyncio.SelectorEventLoop(base())
