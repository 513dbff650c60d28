"""The gevent ↔ asyncio bridge: one asyncio loop in a real OS thread per Locust process.

Locust runs on gevent (everything monkey-patched, one OS thread); loadgen's
client is asyncio + aiohttp and stamps every chunk inside aiohttp's protocol
callback. Rather than run a second HTTP stack, each Locust process starts one
asyncio loop (uvloop when available) in a *real* thread and its greenlets hand
whole requests to it:

    greenlet ──call_soon_threadsafe──▶ asyncio thread: task (stream, stamp, fold)
    greenlet ◀──async watcher (hub)─── done-callback: deque.append + watcher.send()

So chunk timestamps are taken on the asyncio side, at socket receive time, and
the greenlet that asked wakes up in gevent's own hub with the result, where it
may touch Locust's stats (never from the asyncio thread). ``post`` carries
anything else to the hub the same way (finished records, in batches). A Locust
user makes one ``call`` per stage (its whole closed loop runs on the asyncio
side), so there is no cross-thread traffic per chunk, nor per request.

Threads: gevent patches ``threading``, so the thread is started with the
original ``_thread.start_new_thread``. Inside it nothing may block on gevent:
uvloop does its I/O in C (libuv); the stock asyncio loop is given the original
epoll selector (the patched one would switch to a hub that has nothing to run).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from typing import Any, Awaitable, Callable

import gevent
import gevent.event
import gevent.monkey

from loadgen.client.loops import new_event_loop
from loadgen.client.loops import new_event_loop

_start_new_thread = gevent.monkey.get_original("_thread", "start_new_thread")
_allocate_lock = gevent.monkey.get_original("_thread", "allocate_lock")

DEFAULT_SWITCH_INTERVAL_S = 0.0005
"""GIL hand-over interval while the bridge runs (CPython's default is 5 ms).

When the gevent thread is busy (Locust's stats, web UI, reports), the asyncio
thread waits for the GIL before it can stamp a chunk: up to one switch interval.
0.5 ms bounds that wait; measured cost is negligible (bench/bench_locust.py).
Override with the environment variable LOADGEN_GIL_SWITCH_S (seconds)."""


class Cancelled(Exception):
    """The asyncio task behind a bridge call was cancelled."""


def new_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """loadgen's loops, with asyncio's on the *original* selector (the patched one hangs in a second thread)."""
    import selectors

    try:
        selector_cls = gevent.monkey.get_original("selectors", "DefaultSelector")
    except (AttributeError, ImportError):  # selectors not patched: stdlib's is the original
        selector_cls = selectors.DefaultSelector
    return new_event_loop(kind, selector_cls)


class _Call:
    __slots__ = ("result", "task", "cancelled")

    def __init__(self) -> None:
        self.result = gevent.event.AsyncResult()
        self.task: asyncio.Task | None = None
        self.cancelled = False


class Bridge:
    """Run coroutines on a private asyncio loop thread; wait for them from greenlets."""

    def __init__(self, loop_kind: str = "auto", switch_interval_s: float | None = DEFAULT_SWITCH_INTERVAL_S) -> None:
        self.loop = new_loop(loop_kind)
        selector = getattr(self.loop, "_selector", None)
        self.loop_kind = ("stamping" if hasattr(selector, "wake_ns")
                          else type(self.loop).__module__.split(".")[0])
        self._done: collections.deque = collections.deque()
        self._watcher = gevent.get_hub().loop.async_()
        self._watcher.start(self._drain)
        self._exited = _allocate_lock()
        self._running = False
        self._old_switch = None
        env = os.environ.get("LOADGEN_GIL_SWITCH_S")
        if env:
            switch_interval_s = float(env)
        if switch_interval_s:
            self._old_switch = sys.getswitchinterval()
            sys.setswitchinterval(min(self._old_switch, switch_interval_s))

    # --- lifecycle (gevent side) ------------------------------------------------------------
    def start(self) -> "Bridge":
        if not self._running:
            self._running = True
            self._exited.acquire()
            _start_new_thread(self._thread_main, ())
        return self

    def _thread_main(self) -> None:
        try:
            asyncio.set_event_loop(self.loop)
            self.loop.run_forever()
            # Cancel what is left so sessions close cleanly.
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
            self._exited.release()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop (cancelling its tasks) and wait for the thread, politely for gevent."""
        if not self._running:
            return
        self._running = False
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # already closed
            pass
        deadline = timeout_s
        while not self._exited.acquire(False) and deadline > 0:
            gevent.sleep(0.01)
            deadline -= 0.01
        self._watcher.stop()
        self._watcher.close()
        self._drain()
        if self._old_switch is not None:
            sys.setswitchinterval(self._old_switch)

    @property
    def running(self) -> bool:
        return self._running

    # --- calls (gevent side) ------------------------------------------------------------------
    def submit(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> _Call:
        """Start ``fn(*args)`` as a task on the loop; ``.result`` is a gevent AsyncResult."""
        call = _Call()
        self.loop.call_soon_threadsafe(self._start, call, fn, args)
        return call

    def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``fn(*args)`` on the loop and block *this greenlet* until it ends.

        Raises what the coroutine raised, or :class:`Cancelled`. If the greenlet is
        killed while waiting (Locust stopping a user), the task is cancelled too.
        """
        call = self.submit(fn, *args)
        try:
            return call.result.get()
        except BaseException:
            if not call.result.ready():
                self.cancel(call)
            raise

    def cancel(self, call: _Call) -> None:
        try:
            self.loop.call_soon_threadsafe(self._cancel, call)
        except RuntimeError:  # loop closed: nothing left to cancel
            pass

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From the loop thread: run ``fn(*args)`` in gevent's hub (it must not block: e.g. a queue put)."""
        self._done.append((fn, args))
        self._watcher.send()

    # --- loop side ----------------------------------------------------------------------------
    def _start(self, call: _Call, fn, args) -> None:
        if call.cancelled:
            self._post(call, None)
            return
        try:
            task = self.loop.create_task(fn(*args))
        except BaseException as exc:  # the call itself failed before any await
            self._done.append((call, exc))
            self._watcher.send()
            return
        call.task = task
        task.add_done_callback(lambda t, c=call: self._post(c, t))

    def _cancel(self, call: _Call) -> None:
        call.cancelled = True
        if call.task is not None:
            call.task.cancel()

    def _post(self, call: _Call, task) -> None:
        self._done.append((call, task))
        self._watcher.send()

    # --- hub side -----------------------------------------------------------------------------
    def _drain(self) -> None:
        done = self._done
        while done:
            call, task = done.popleft()
            if not isinstance(call, _Call):  # post(): a function for the hub
                try:
                    call(*task)
                except Exception:  # never let a report break the hub
                    import logging

                    logging.getLogger("loadgen.locust").exception("loadgen: bridge post failed")
                continue
            ar = call.result
            if ar.ready():
                continue
            if task is None or (isinstance(task, asyncio.Future) and task.cancelled()):
                ar.set_exception(Cancelled())
            elif isinstance(task, BaseException):
                ar.set_exception(task)
            else:
                exc = task.exception()
                if exc is not None:
                    ar.set_exception(exc)
                else:
                    ar.set(task.result())
