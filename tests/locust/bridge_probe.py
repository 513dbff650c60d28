"""Run by test_bridge.py in its own process: Locust's monkey-patching must not leak into pytest."""

import locust  # noqa: F401  (patches the stdlib with gevent, as in any Locust process)

import asyncio
import json
import time

import gevent
import gevent.monkey

from loadgen.locust.bridge import Bridge, Cancelled

native_id = gevent.monkey.get_original("threading", "get_native_id")
out = {}
b = Bridge().start()
out["loop"] = b.loop_kind


async def where():
    return native_id()


out["main_thread"] = native_id()
out["loop_thread"] = b.call(where)


async def boom():
    raise ValueError("from the loop")


try:
    b.call(boom)
except ValueError as exc:
    out["error"] = str(exc)

# Many greenlets waiting at once; the hub keeps running meanwhile.
ticks = []
ticker = gevent.spawn(lambda: [ticks.append(time.monotonic()) or gevent.sleep(0.01) for _ in range(1000)])


async def nap(i):
    await asyncio.sleep(0.3)
    return i


t0 = time.monotonic()
gl = [gevent.spawn(b.call, nap, i) for i in range(300)]
gevent.joinall(gl)
out["concurrent_s"] = time.monotonic() - t0
out["values_ok"] = [g.value for g in gl] == list(range(300))
gaps = [b_ - a for a, b_ in zip(ticks, ticks[1:])]
out["hub_max_gap_s"] = max(gaps) if gaps else None
ticker.kill()

# Killing a waiting greenlet cancels its task.
state = {}


async def long():
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        state["cancelled"] = True
        raise


g = gevent.spawn(b.call, long)
gevent.sleep(0.1)
g.kill()
gevent.sleep(0.2)
out["killed_cancels_task"] = state.get("cancelled", False)

# A task cancelled on the loop side surfaces as Cancelled in the greenlet.
call = b.submit(long)
gevent.sleep(0.1)
b.cancel(call)
try:
    call.result.get(timeout=5)
except Cancelled:
    out["cancel_raises"] = True

b.stop()
out["stopped"] = not b.running and b.loop.is_closed()
print(json.dumps(out))
