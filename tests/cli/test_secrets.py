"""Secrets are sent, never written (issue 17 item 7): a fake key given through every path — ``--header``,
a TOML target's ``headers`` and ``api_key``, a URL's ``user:password@`` — reaches the server on the wire
and appears in no file loadgen or Locust writes, nor in what they print.

Real commands in child processes: ``loadgen run``, ``loadgen crossover --config``, a headless Locust
ramp, ``loadgen report`` on the results; the servers are embedded simulators behind a loopback proxy
that records each request's headers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from loadgen import redact
from loadgen.sim.process import SimProcess

ROOT = Path(__file__).resolve().parents[2]
FAKE = "FAKE-SECRET"
"""Every fake secret below holds this: it must appear nowhere written, in full or in part."""
HEADER_KEY = "sk-FAKE-SECRET-1234567890"
URL_PASSWORD = "sk-FAKE-SECRET-url-0987654321"
API_KEY = "sk-FAKE-SECRET-apikey-1122334455"
TOML_HEADER_KEY = "sk-FAKE-SECRET-toml-5544332211"
FAST = ["--ladder", "1", "--duration", "1s", "--warmup", "0.5s"]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


FORBIDDEN = (FAKE, basic("user", URL_PASSWORD).split()[1])
"""The fake key, and the basic-auth token the URL's credentials become on the wire."""


class RecordingProxy:
    """A loopback HTTP proxy in front of one simulator: forwards every request (streams included) and
    records its method, path and headers (what the server received)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.seen: list[tuple[str, str, dict]] = []
        self.port = 0

    def __enter__(self) -> "RecordingProxy":
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self._start())
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert ready.wait(10), "proxy did not start"
        return self

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path, dict(request.headers)))
        body = await request.read()
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with self.session.request(request.method, self.upstream + request.path_qs, data=body,
                                        headers=fwd) as up:
            resp = web.StreamResponse(status=up.status, headers={
                "Content-Type": up.headers.get("Content-Type", "application/octet-stream")})
            try:
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except ConnectionError:  # the client let go (a stage's end cancels its streams)
                pass
            return resp

    async def _stop(self) -> None:
        await self.runner.cleanup()
        await self.session.close()

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}"

    def generate_headers(self) -> list[dict]:
        """The headers of the load's requests (not the probes' or the /metrics scrapes')."""
        return [h for m, p, h in self.seen if m == "POST" and p in ("/generate", "/v1/completions",
                                                                      "/v1/chat/completions")]


@pytest.fixture(scope="module")
def servers(live):
    with SimProcess(mode="baseline", time_scale=10) as base, SimProcess(mode="spec", time_scale=10) as spec:
        with RecordingProxy(base.url) as pb, RecordingProxy(spec.url) as ps:
            yield pb, ps


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-3000:])
    return p


def loadgen(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "loadgen", *args], cwd)


def assert_nothing_written(folder: Path, outputs: list[subprocess.CompletedProcess]) -> list[Path]:
    """No file under ``folder`` (every one, whatever its kind) and no captured stdout/stderr holds a secret."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for bad in FORBIDDEN:
            assert bad.encode() not in data, f"{path.relative_to(folder)} holds {bad!r}"
    for p in outputs:
        for stream, text in (("stdout", p.stdout), ("stderr", p.stderr)):
            for bad in FORBIDDEN:
                assert bad not in text, f"{p.args[:4]} {stream} holds {bad!r}: ...{text[max(0, text.find(bad) - 200):][:400]}"
    return files


def completed(doc: dict) -> list[int]:
    return [s["requests"]["completed"] for s in doc["stages"]]


def test_loadgen_run_with_a_header_and_url_credentials(servers, tmp_path):
    pb, _ = servers
    pb.seen.clear()
    out = tmp_path / "run"
    p = loadgen("run", "--url", pb.url(f"user:{URL_PASSWORD}"), "--header", f"X-Api-Key: {HEADER_KEY}",
                *FAST, "--out", str(out), cwd=tmp_path)
    doc = json.loads((out / "run.json").read_text())
    assert all(n > 0 for n in completed(doc)), doc["stages"][0]["requests"]
    # written masked, name kept; the URL keeps its host and port
    argv = doc["run"]["argv"]
    assert "X-Api-Key: ***" in argv and f"http://***@127.0.0.1:{pb.port}" in argv
    assert doc["run"]["targets"][0]["url"] == f"http://***@127.0.0.1:{pb.port}"
    # ... and sent as given: every request of the load carried both
    sent = pb.generate_headers()
    assert sent and all(h.get("X-Api-Key") == HEADER_KEY for h in sent)
    assert all(h.get("Authorization") == basic("user", URL_PASSWORD) for h in sent)
    # the server view's /metrics scrapes carried them too
    assert any(path == "/metrics" and h.get("X-Api-Key") == HEADER_KEY
               and h.get("Authorization") == basic("user", URL_PASSWORD) for _, path, h in pb.seen)
    files = assert_nothing_written(tmp_path, [p])
    assert {f.name for f in files} >= {"run.json", "run.csv", "run.hlog"}


def config(tmp_path: Path, pb: RecordingProxy, ps: RecordingProxy) -> Path:
    path = tmp_path / "targets.toml"
    path.write_text(f"""
[targets.baseline]
url = "{pb.url(f'user:{URL_PASSWORD}')}"
headers = {{ "X-Api-Key" = "{TOML_HEADER_KEY}" }}

[targets.spec]
url = "{ps.url()}"
api_key = "{API_KEY}"
""")
    return path


def test_loadgen_crossover_from_a_config_then_report(servers, tmp_path):
    pb, ps = servers
    pb.seen.clear()
    ps.seen.clear()
    cfg = config(tmp_path, pb, ps)
    out = tmp_path / "xo"
    p = loadgen("crossover", "--config", str(cfg), *FAST, "--out", str(out), cwd=tmp_path)
    doc = json.loads((out / "run.json").read_text())
    assert all(n > 0 for n in completed(doc))
    assert [t["url"] for t in doc["run"]["targets"]] == [f"http://***@127.0.0.1:{pb.port}", ps.url()]
    # sent: the TOML header and the URL's credentials to one, the api_key as a bearer token to the other
    base, spec = pb.generate_headers(), ps.generate_headers()
    assert base and all(h.get("X-Api-Key") == TOML_HEADER_KEY and h.get("Authorization") == basic("user", URL_PASSWORD)
                        for h in base)
    assert spec and all(h.get("Authorization") == f"Bearer {API_KEY}" for h in spec)
    r = loadgen("report", str(out), cwd=tmp_path)
    files = assert_nothing_written(out, [p, r])
    assert {f.name for f in files} >= {"run.json", "run.csv", "run.hlog", "crossover.json", "report.html"}


def test_open_loop_crossover_with_a_header_and_url_credentials_then_report(servers, tmp_path):
    """Rates, not concurrencies: rates.json and its page go through the same masking."""
    pb, ps = servers
    pb.seen.clear()
    ps.seen.clear()
    out = tmp_path / "rates"
    p = loadgen("crossover", "--baseline-url", pb.url(f"user:{URL_PASSWORD}"), "--spec-url", ps.url(),
                "--header", f"X-Api-Key: {HEADER_KEY}", "--rate", "5", "--duration", "2s",
                "--warmup", "0.5s", "--out", str(out), cwd=tmp_path)
    doc = json.loads((out / "run.json").read_text())
    assert all(n > 0 for n in completed(doc)) and "X-Api-Key: ***" in doc["run"]["argv"]
    base, spec = pb.generate_headers(), ps.generate_headers()
    assert base and spec and all(h.get("X-Api-Key") == HEADER_KEY for h in base + spec)
    assert all(h.get("Authorization") == basic("user", URL_PASSWORD) for h in base)
    r = loadgen("report", str(out), cwd=tmp_path)
    files = assert_nothing_written(out, [p, r])
    assert {f.name for f in files} >= {"run.json", "run.csv", "run.hlog", "rates.json", "report.html"}


def test_locust_ramp_from_a_config_then_report(servers, tmp_path):
    pb, ps = servers
    pb.seen.clear()
    ps.seen.clear()
    cfg = config(tmp_path, pb, ps)
    work = tmp_path / "work"  # everything written: Locust's own --csv and --html files, the ramp, the report
    work.mkdir()
    p = run([sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / "ramp.py"), "--headless",
             "--config", str(cfg), *FAST, "--csv", str(work / "locust"), "--html", str(work / "locust.html"),
             "--logfile", str(work / "locust.log")],
            cwd=work)
    ramp = work / "results" / "ramp"
    doc = json.loads((ramp / "ramp.json").read_text())
    assert all(n > 0 for n in completed(doc))
    assert [t["url"] for t in doc["run"]["targets"]] == [f"http://***@127.0.0.1:{pb.port}", ps.url()]
    base, spec = pb.generate_headers(), ps.generate_headers()
    assert base and all(h.get("X-Api-Key") == TOML_HEADER_KEY and h.get("Authorization") == basic("user", URL_PASSWORD)
                        for h in base)
    assert spec and all(h.get("Authorization") == f"Bearer {API_KEY}" for h in spec)
    x = loadgen("crossover", "--from", str(ramp / "ramp.json"), "--out", str(work / "analysed"), cwd=work)
    r = loadgen("report", str(work / "analysed"), cwd=work)
    files = assert_nothing_written(work, [p, x, r])
    names = {f.name for f in files}
    assert {"ramp.json", "ramp.csv", "ramp.hlog", "locust.html", "locust.log", "report.html", "crossover.json"} <= names


def test_what_is_masked_and_what_is_kept():
    """The module's rules on their own: names kept, values masked; nothing that is not a secret touched."""
    redact.remember("Bearer sk-unit-test-secret-42")
    assert redact.argv(["run", "--header", "Authorization: Bearer x", "--header=X-Key: y", "--url",
                        "https://u:p@h:8443/v1", "--api-key", "z", "--ladder", "1,2"]) == [
        "run", "--header", "Authorization: ***", "--header=X-Key: ***", "--url", "https://***@h:8443/v1",
        "--api-key", "***", "--ladder", "1,2"]
    doc = {"run": {"targets": [{"url": "http://a:b@h:1/p", "headers": {"Cookie": "c", "X": "y"}}],
                   "settings": {"header": {"X-Key": "v"}, "url": "http://u:p@h"},
                   "api_key": "k", "HF_TOKEN": "t", "client_secret": "s", "Password": "p",
                   "max_tokens": "128", "token_counts": "exact", "tokenizer": "gpt2", "output_tokens": 7},
           "notes": ["the key sk-unit-test-secret-42 leaked", "mail me at someone@example.com"]}
    out = redact.document(doc)
    assert out["run"]["targets"] == [{"url": "http://***@h:1/p", "headers": {"Cookie": "***", "X": "***"}}]
    assert out["run"]["settings"] == {"header": {"X-Key": "***"}, "url": "http://***@h"}
    assert [out["run"][k] for k in ("api_key", "HF_TOKEN", "client_secret", "Password")] == ["***"] * 4
    assert [out["run"][k] for k in ("max_tokens", "token_counts", "tokenizer", "output_tokens")] == [
        "128", "exact", "gpt2", 7]
    assert out["notes"] == ["the key *** leaked", "mail me at someone@example.com"]
    assert doc["run"]["targets"][0]["url"] == "http://a:b@h:1/p"  # the live document is left as it is
    # a plain header's value is masked where headers are written, not hunted in other text
    redact.remember_headers({"X-Model": "default-model", "X-Auth-Token": "tok-unit-secret-77"})
    assert redact.text("model default-model, token tok-unit-secret-77") == "model default-model, token ***"
    assert redact.argv(["--header", "X-Model: default-model"]) == ["--header", "X-Model: ***"]


def test_log_records_are_masked_whatever_writes_them(tmp_path):
    import logging

    redact.guard_streams()  # idempotent; installs the log record factory
    log = logging.getLogger("loadgen.test_secrets")
    handler = logging.FileHandler(tmp_path / "x.log")
    log.addHandler(handler)
    try:
        log.warning("cannot reach %s", "http://user:pw-unit@h:1/v1")
    finally:
        log.removeHandler(handler)
        handler.close()
    assert (tmp_path / "x.log").read_text() == "cannot reach http://***@h:1/v1\n"
