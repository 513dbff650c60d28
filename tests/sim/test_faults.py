"""Faults the simulator injects (``loadgen sim --faults``): the spec, the seeded draw, each fault's wire
shape on every generation route as a raw aiohttp client sees it, and the truth that says which request
got which. The server runs in this process (real loopback sockets); die_after, which exits the process,
runs in a child."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import aiohttp
import orjson
import pytest
from aiohttp import web

from loadgen.errors import LoadgenError
from loadgen.sim import profiles
from loadgen.sim.faults import KINDS, STREAM_ONLY, FaultPlan, parse
from loadgen.sim.process import SimProcess
from loadgen.sim.server import ServerConfig, SimServer

PROFILE = profiles.load("pcie-8gpu-eagle3")
STALL = 0.25
"""Seconds of the stall and slow_headers faults here: short, but far above a 16-token response at scale 50."""


@contextlib.asynccontextmanager
async def serving(faults: str, seed: int = 0, scale: float = 50.0, truth_path=None):
    cfg = ServerConfig(profile=PROFILE, time_scale=scale, seed=seed, faults=parse(faults), truth_path=truth_path)
    sim = SimServer(cfg)
    runner = web.AppRunner(sim.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield sim, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def body(route: str, rid: str, stream: bool = True, tokens: int = 16) -> tuple[str, dict]:
    if route == "generate":
        return "/generate", {"text": f"tell me about {rid}", "rid": rid, "stream": stream,
                             "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    common = {"model": "m", "max_tokens": tokens, "ignore_eos": True, "stream": stream}
    if route == "completions":
        return "/v1/completions", {**common, "prompt": f"tell me about {rid}"}
    return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": f"tell me about {rid}"}]}


async def fetch(url: str, route: str, rid: str, stream: bool = True, timeout: float = 10.0, tokens: int = 16) -> dict:
    """What a raw client sees: status, when the headers came, each read's time and bytes, the exception."""
    path, payload = body(route, rid, stream, tokens)
    out = {"status": None, "headers_s": None, "reads": [], "body": b"", "exc": None}
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        try:
            async with s.post(url + path, json=payload) as r:
                out["status"], out["headers_s"] = r.status, time.perf_counter() - t0
                async for chunk in r.content.iter_any():
                    out["reads"].append(time.perf_counter() - t0)
                    out["body"] += chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            out["exc"] = exc
    return out


def events(raw: bytes) -> list:
    """Each SSE data payload: parsed JSON, '[DONE]', or ('not json', bytes)."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        data = block[6:]
        if data == b"[DONE]":
            out.append("[DONE]")
            continue
        try:
            out.append(orjson.loads(data))
        except orjson.JSONDecodeError:
            out.append(("not json", data))
    return out


def finished(ev) -> bool:
    """An event that carries a finish reason (any route's shape)."""
    if not isinstance(ev, dict):
        return False
    if (ev.get("meta_info") or {}).get("finish_reason"):
        return True
    return any(c.get("finish_reason") for c in ev.get("choices") or [])


async def truth_of(sim: SimServer, rid: str | None = None, n: int = 1, wait_s: float = 3.0) -> list[dict]:
    """The truth's records (of ``rid``), once ``n`` are there: an aborted request is retired at its forward's end."""
    deadline = time.monotonic() + wait_s
    while True:
        recs = sim.truth.query(rid=rid)
        if len(recs) >= n or time.monotonic() > deadline:
            return recs
        await asyncio.sleep(0.02)


# ---- the spec ------------------------------------------------------------------------------------


def test_full_spec_parses():
    spec = parse("reset=0.02,http503=0.01,http500=0.01,http429=0.01,error_event=0.01,malformed=0.01,"
                 "stall=0.01:30s,slow_headers=0.01:500ms,truncate=0.01,die_after=500,hang_after=800")
    assert dict(spec.probs) == {"reset": 0.02, **{k: 0.01 for k in KINDS if k != "reset"}}
    assert spec.duration("stall") == 30.0 and spec.duration("slow_headers") == 0.5
    assert (spec.die_after, spec.hang_after) == (500, 800)


@pytest.mark.parametrize("text,message", [
    ("", "--faults: empty spec"),
    ("rest=0.1", "--faults: 'rest=0.1': unknown fault 'rest'"),
    ("reset", "--faults: 'reset': expected kind=probability"),
    ("reset=0.1,,http503=0.1", "--faults: '': expected kind=probability"),
    ("reset=lots", "--faults: 'reset=lots': probability 'lots' is not a number"),
    ("http503=1.5", "--faults: 'http503=1.5': probability must be in [0, 1]"),
    ("stall=0.1", "--faults: 'stall=0.1': stall takes probability:duration"),
    ("stall=0.1:soon", "--faults: 'stall=0.1:soon': bad duration 'soon'"),
    ("slow_headers=0.1:0s", "--faults: 'slow_headers=0.1:0s': the duration must be > 0"),
    ("reset=0.1:5s", "--faults: 'reset=0.1:5s': reset takes no duration"),
    ("reset=0.1,reset=0.2", "--faults: 'reset=0.2': reset given twice"),
    ("die_after=0", "--faults: 'die_after=0': die_after takes a whole number of requests >= 1"),
    ("hang_after=1.5", "--faults: 'hang_after=1.5': hang_after takes a whole number"),
    ("reset=0.6,truncate=0.6", "the probabilities add up to 1.2 > 1"),
])
def test_a_bad_spec_is_one_line_naming_the_part(text, message):
    with pytest.raises(LoadgenError) as e:
        parse(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cli_says_it_in_one_line(live):
    p = subprocess.run([sys.executable, "-m", "loadgen", "sim", "--port", "0", "--faults", "reset=0.1,stal=0.1:1s"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == ("loadgen: error: --faults: 'stal=0.1:1s': unknown fault 'stal' (known: reset, "
                                "http503, http500, http429, error_event, malformed, stall, slow_headers, truncate, "
                                "die_after, hang_after)"), p.stderr


# ---- the draw ------------------------------------------------------------------------------------


def test_the_draw_is_seeded_one_uniform_per_request():
    spec = parse("reset=0.1,http503=0.1,truncate=0.1,stall=0.1:1s")
    plan_a, plan_b, plan_c = FaultPlan(spec, 3), FaultPlan(spec, 3), FaultPlan(spec, 4)
    a = [plan_a.draw(True) for _ in range(400)]
    assert a == [plan_b.draw(True) for _ in range(400)]
    assert a != [plan_c.draw(True) for _ in range(400)]
    assert all(abs(a.count(k) - 40) < 25 for k in ("reset", "http503", "truncate", "stall"))
    # a non-streamed request drawn a stream-only fault gets none, and the next requests' draws do not move
    plan_d = FaultPlan(spec, 3)
    mixed = [plan_d.draw(i % 2 == 0) for i in range(400)]
    assert mixed == [k if i % 2 == 0 or k not in STREAM_ONLY else "" for i, k in enumerate(a)]


def test_the_same_request_sequence_gets_the_same_faults():
    spec = "http503=0.15,http429=0.1,truncate=0.15,error_event=0.1"

    async def sequence(seed: int) -> list[tuple[str, str]]:
        async with serving(spec, seed=seed) as (sim, url):
            for i in range(30):
                await fetch(url, ("generate", "completions", "chat")[i % 3], f"r{i}")
            recs = await truth_of(sim, n=30)
        order = {f"r{i}": i for i in range(30)}
        # OpenAI routes name their own ids: order those by arrival
        return [r["fault"] for r in sorted(recs, key=lambda r: r["received_ns"])], \
            sorted((r["rid"], r["fault"]) for r in recs if r["rid"] in order)

    first, second, other = (asyncio.run(sequence(s)) for s in (5, 5, 6))
    assert first == second and len(first[0]) == 30
    assert first[0] != other[0]
    assert {"http503", "http429", "truncate", "error_event", ""} >= set(first[0]) and len(set(first[0])) >= 3


# ---- each fault on the wire ----------------------------------------------------------------------


@pytest.mark.parametrize("route", ["generate", "completions", "chat"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_on_the_wire_and_in_the_truth(kind, route):
    spec = f"{kind}=1" + (f":{STALL}s" if kind in ("stall", "slow_headers") else "")

    async def go():
        async with serving(spec) as (sim, url):
            got = await fetch(url, route, "r1")
            recs = await truth_of(sim)
            return got, recs

    got, recs = asyncio.run(go())
    assert len(recs) == 1 and recs[0]["fault"] == kind and recs[0]["route"] == route
    evs = events(got["body"]) if got["status"] == 200 else []
    if kind.startswith("http"):
        status = int(kind[4:])
        assert got["status"] == status and got["exc"] is None
        err = orjson.loads(got["body"])
        assert err["object"] == "error" and err["code"] == status and "injected fault" in err["message"]
        assert recs[0]["finish_reason"] == "error" and recs[0]["events"] == []
        return
    assert got["status"] == 200
    if kind == "reset":
        assert isinstance(got["exc"], (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                                       aiohttp.ClientOSError)), got["exc"]
        assert evs and "[DONE]" not in evs and not any(finished(e) for e in evs)
        assert recs[0]["finish_reason"] == "abort"
        return
    assert got["exc"] is None, got["exc"]
    if kind == "truncate":
        assert evs and "[DONE]" not in evs and not any(finished(e) for e in evs)
        assert recs[0]["finish_reason"] == "abort"
    elif kind == "error_event":
        errs = [e for e in evs if isinstance(e, dict) and "error" in e]
        assert len(errs) == 1 and evs[-1] == "[DONE]" and evs[-2] is errs[0]
        assert {"message", "type", "code"} <= set(errs[0]["error"]) and errs[0]["error"]["code"] == 500
        assert evs.index(errs[0]) > 0  # mid-stream: after an event that carried tokens
        assert not any(finished(e) for e in evs)
    elif kind == "malformed":
        bad = [e for e in evs if isinstance(e, tuple)]
        assert len(bad) == 1 and evs.index(bad[0]) > 0  # mid-stream, and the stream goes on to its end
        assert evs[-1] == "[DONE]" and any(finished(e) for e in evs)
    elif kind == "stall":
        gaps = [b - a for a, b in zip(got["reads"], got["reads"][1:])]
        assert max(gaps) >= STALL * 0.95 and evs[-1] == "[DONE]"
        assert got["headers_s"] < STALL
    elif kind == "slow_headers":
        assert got["headers_s"] >= STALL * 0.95 and evs[-1] == "[DONE]"


@pytest.mark.parametrize("route", ["generate", "completions"])
def test_a_whole_response_gets_the_faults_it_can_carry(route):
    async def go(kind: str):
        spec = f"{kind}=1" + (f":{STALL}s" if kind in ("stall", "slow_headers") else "")
        async with serving(spec) as (sim, url):
            got = await fetch(url, route, "r1", stream=False)
            return got, await truth_of(sim)

    got, recs = asyncio.run(go("http429"))
    assert got["status"] == 429 and recs[0]["fault"] == "http429"
    got, recs = asyncio.run(go("slow_headers"))
    assert got["status"] == 200 and got["headers_s"] >= STALL * 0.95 and recs[0]["fault"] == "slow_headers"
    got, recs = asyncio.run(go("reset"))
    assert got["exc"] is not None and recs[0]["fault"] == "reset"
    got, recs = asyncio.run(go("truncate"))  # stream-only: a whole response is whole
    assert got["status"] == 200 and recs[0]["fault"] == ""


def test_hang_after_accepts_and_never_answers():
    async def go():
        async with serving("hang_after=2") as (sim, url):
            ok = [await fetch(url, "generate", f"r{i}") for i in range(2)]
            hung = await fetch(url, "chat", "r2", timeout=0.5)
            later = await fetch(url, "generate", "r3", timeout=0.5)
            return ok, hung, sim.truth.query(), later

    ok, hung, recs, later = asyncio.run(go())
    assert all(g["status"] == 200 and events(g["body"])[-1] == "[DONE]" for g in ok)
    assert hung["status"] is None and isinstance(hung["exc"], asyncio.TimeoutError)
    assert later["status"] is None and isinstance(later["exc"], asyncio.TimeoutError)
    assert [r["fault"] for r in sorted(recs, key=lambda r: r["received_ns"])] == ["", "", "hang", "hang"]


def test_die_after_exits_and_the_truth_file_says_who_was_cut(live, tmp_path):
    truth = tmp_path / "truth.jsonl"

    async def go(url):
        first = await fetch(url, "generate", "a0")
        # two long streams in flight when the second answered request ends the process
        long = [asyncio.ensure_future(fetch(url, "generate", f"long{i}", tokens=400)) for i in range(2)]
        await asyncio.sleep(0.05)
        second = await fetch(url, "generate", "a1")
        return first, second, await asyncio.gather(*long)

    with SimProcess(time_scale=1.0, faults="die_after=2", extra_args=["--truth-file", str(truth)]) as sim:
        first, second, long = asyncio.run(go(sim.url))
        sim.proc.wait(10)
        assert sim.proc.returncode == 3 and "die_after=2" in sim.stderr_tail
    assert events(first["body"])[-1] == "[DONE]" and events(second["body"])[-1] == "[DONE]"
    assert all(g["exc"] is not None for g in long)
    recs = {r["rid"]: r for r in map(json.loads, truth.read_text().splitlines())}
    assert {k: (r["fault"], r["finish_reason"]) for k, r in recs.items()} == {
        "a0": ("", "length"), "a1": ("", "length"), "long0": ("die", "abort"), "long1": ("die", "abort")}


HELD_S = 25
"""Shorter than the 30 s stall, and than aiohttp's 60 s wait for handlers at shutdown: an exit before it was not
held by either (it takes ~0.1 s here), however slow the host."""


def test_a_hung_request_or_a_long_stall_does_not_hold_the_shutdown(live):
    async def go(sim):
        stalled = asyncio.ensure_future(fetch(sim.url, "generate", "s0", timeout=30))
        hung = asyncio.ensure_future(fetch(sim.url, "chat", "h1", timeout=30))
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        sim.proc.terminate()
        while sim.proc.poll() is None and time.monotonic() - t0 < HELD_S:
            await asyncio.sleep(0.02)
        took = time.monotonic() - t0
        await asyncio.gather(stalled, hung)
        return took

    with SimProcess(time_scale=20.0, faults="stall=1:30s,hang_after=1") as sim:
        took = asyncio.run(go(sim))
        assert sim.proc.returncode == 0 and took < HELD_S, (sim.proc.returncode, took)
