"""The simulator's /metrics in both flavours, against what its streams carried and real engines' pages.

A real simulator process per flavour (speculative, time scale 10), real streaming requests over
loopback, pages parsed with prometheus_client's parser. The vLLM names, types and buckets below are the
ones verified in vLLM's source (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py, v0.10-v0.12); the real pages are in tests/serverview/pages/.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.engines.vllm import METRICS as _M
from loadgen.sim.process import SimProcess
from tests.sim.helpers import call, get

PAGES = Path(__file__).resolve().parent.parent / "serverview" / "pages"
SCALE = 10.0

# name (as the parser names the family) -> type, from vLLM's PrometheusStatLogger / SpecDecodingProm
VLLM_VERIFIED = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge", "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter", "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter", "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram", "vllm:request_inference_time_seconds": "histogram",
    "vllm:spec_decode_num_drafts": "counter", "vllm:spec_decode_num_draft_tokens": "counter",
    "vllm:spec_decode_num_accepted_tokens": "counter", "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
}  # fmt: skip
VLLM_TTFT_LE = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
VLLM_ITL_LE = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]  # fmt: skip
VLLM_E2E_LE = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0]  # fmt: skip

PROMPTS = [
    ("Tell me a long story about a lighthouse keeper.", 90, True),
    ("Please repeat this sentence: \"Cats sleep all day in the warm sun.\"", 200, False),  # ends on EOS
    ("def fib(n):\n    # complete this function", 60, True),
    ("List the planets of the solar system in order.", 45, True),
]


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, name: str, **labels: str) -> float:
    """Sum of the family's plain samples (not _created) whose labels include ``labels``."""
    return sum(s.value for s in fams[name].samples
               if not s.name.endswith("_created") and all(s.labels.get(k) == v for k, v in labels.items()))  # fmt: skip


async def _stream(session: aiohttp.ClientSession, url: str, text: str, max_new: int, ignore_eos: bool) -> dict:
    """One streaming /generate; the final event's meta_info."""
    body = {"text": text, "stream": True,
            "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": ignore_eos}}  # fmt: skip
    last = None
    async with session.post(url + "/generate", json=body) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: {"):
                last = orjson.loads(line[6:])
    return last["meta_info"]


async def _drive(url: str) -> tuple[list[dict], dict]:
    """The prompts concurrently, plus one request aborted mid-stream by rid; the metas and the abort's."""
    async with aiohttp.ClientSession() as s:
        metas = await asyncio.gather(*(_stream(s, url, p, n, e) for p, n, e in PROMPTS))
        body = {"text": "Write an endless poem.", "rid": "to-abort", "stream": True,
                "sampling_params": {"max_new_tokens": 3000, "temperature": 0, "ignore_eos": True}}  # fmt: skip
        last = None
        async with s.post(url + "/generate", json=body) as r:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    last = orjson.loads(line[6:])
                    if last["meta_info"]["completion_tokens"] >= 5 and last["meta_info"]["finish_reason"] is None:
                        async with s.post(url + "/abort_request", json={"rid": "to-abort"}) as a:
                            assert a.status == 200
        return list(metas), last["meta_info"]


@pytest.fixture(scope="module")
def vllm_run(live):
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", time_scale=SCALE, seed=5, metrics_flavour="vllm") as sim:
        metas, aborted = asyncio.run(_drive(sim.url))
        yield sim, metas, aborted


@pytest.fixture(scope="module")
def sglang_run(live):
    with SimProcess(profile="pcie-8gpu-eagle3", mode="spec", time_scale=SCALE, seed=5) as sim:
        metas, aborted = asyncio.run(_drive(sim.url))
        yield sim, metas, aborted


def test_vllm_names_labels_buckets_are_vllms(vllm_run):
    sim, _, _ = vllm_run
    fams = families(get(sim.url, "/metrics").body.decode())
    plain = {n: f for n, f in fams.items() if not n.endswith("_created")}
    assert {n: f.type for n, f in plain.items()} == VLLM_VERIFIED
    for n in plain:  # prometheus_client writes a _created gauge beside every counter and histogram
        if plain[n].type in ("counter", "histogram"):
            assert fams[n + "_created"].type == "gauge", n
    extra = {"vllm:request_success": {"finished_reason"}, "vllm:spec_decode_num_accepted_tokens_per_pos": {"position"}}
    for n, f in plain.items():
        for s in f.samples:
            want = {"engine", "model_name"} | extra.get(n, set()) | ({"le"} if s.name.endswith("_bucket") else set())
            assert set(s.labels) == want, (n, s.labels)
            assert s.labels["engine"] == "0"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples if s.name.endswith("_total")}
    assert reasons == {"stop", "length", "abort"}

    def les(name: str) -> list[float]:
        return [float(s.labels["le"]) for s in fams[name].samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]

    assert les("vllm:time_to_first_token_seconds") == VLLM_TTFT_LE
    assert les("vllm:inter_token_latency_seconds") == VLLM_ITL_LE == les("vllm:request_time_per_output_token_seconds")
    assert les("vllm:e2e_request_latency_seconds") == VLLM_E2E_LE == les("vllm:request_queue_time_seconds")


@pytest.mark.parametrize("page", ["vllm_spec_decode_pr41916.txt", "vllm_cpu_0.32.0_ngram4_after.txt"])
def test_vllm_matches_a_real_vllm_page(vllm_run, page):
    """Every family the simulator writes that a real page has too: the same type and label names; and every
    family loadgen reads that the real page has, the simulator writes. The real vllm-cpu 0.32.0 page has 41
    families more (mm cache, per-source prompt tokens, flops estimates...) that loadgen does not read; its
    token histograms end at its max_model_len (4096: buckets to 2000) as the simulator's end at its own."""
    sim, _, _ = vllm_run
    ours = families(get(sim.url, "/metrics").body.decode())
    real = families((PAGES / page).read_text())
    read = {n for s in (*_M.counters.values(), *_M.gauges.values(), *_M.histograms.values(), _M.per_position)
            for n in s.names}
    assert {n for n in real if n + "_total" in read or n in read} <= set(ours)
    for n in set(real) & set(ours):
        assert ours[n].type == real[n].type, n
        for s in real[n].samples:
            want = frozenset(s.labels) - {"le"}
            assert {frozenset(o.labels) - {"le"} for o in ours[n].samples if o.name == s.name} == {want}, n


def test_vllm_counters_equal_what_the_streams_carried(vllm_run):
    sim, metas, aborted = vllm_run
    fams = families(get(sim.url, "/metrics").body.decode())
    everyone = metas + [aborted]
    gen = sum(m["completion_tokens"] for m in everyone)
    assert value(fams, "vllm:generation_tokens") == gen
    assert value(fams, "vllm:prompt_tokens") == sum(m["prompt_tokens"] for m in everyone)
    verify = sum(m.get("spec_verify_ct", 0) for m in everyone)
    accepted = sum(m.get("spec_num_correct_drafts", 0) for m in everyone)
    drafts = value(fams, "vllm:spec_decode_num_drafts")
    assert drafts == verify > 0
    # as vLLM's scheduler (measured on vllm-cpu 0.32.0: 31 counted, 27 streamed), the counter takes each
    # step's accepted drafts before the output is cut at max_tokens: up to K=2 more a request
    counted = value(fams, "vllm:spec_decode_num_accepted_tokens")
    assert 0 < accepted <= counted <= accepted + 2 * len(everyone)
    assert value(fams, "vllm:spec_decode_num_draft_tokens") == sum(m.get("spec_num_proposed_drafts", 0) for m in everyone)
    # the client's accept length (tokens / verify steps) and the server's (1 + accepted / drafts) differ
    # only by each request's prefill token: tokens = first tokens + drafts + accepted
    assert gen == len(everyone) + drafts + accepted
    per_pos = [s.value for s in sorted(
        (s for s in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples if s.name.endswith("_total")),
        key=lambda s: int(s.labels["position"]))]  # fmt: skip
    assert len(per_pos) == 2  # the profile's num_steps: vLLM's num_speculative_tokens
    assert sum(per_pos) == counted and per_pos[0] <= drafts
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))  # a chain is accepted up to its first miss
    hist = [sum(h[k] for m in everyone for h in [m["spec_correct_drafts_histogram"]]) for k in range(3)]
    streamed = [hist[1] + hist[2], hist[2]]  # position k counted when the k-th draft was accepted
    assert all(s <= c <= s + len(everyone) for s, c in zip(streamed, per_pos)), (streamed, per_pos)
    success = {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples if s.name.endswith("_total")}
    want = {"stop": 0, "length": 0, "abort": 0}
    for m in everyone:
        want[m["finish_reason"]["type"]] += 1
    assert success == want and want["abort"] == 1 and want["stop"] >= 1
    for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
        assert value(fams, f"vllm:{h}") and next(s.value for s in fams[f"vllm:{h}"].samples
                                               if s.name.endswith("_count")) == len(everyone), h  # fmt: skip


def test_vllm_counts_per_step_sglang_at_request_end(live):
    """Mid-stream, vLLM's generation counter has the tokens so far; SGLang's has none until the end."""

    async def mid(url: str) -> tuple[float, float, dict]:
        async with aiohttp.ClientSession() as s:
            body = {"text": "Write a very long essay.", "stream": True,
                    "sampling_params": {"max_new_tokens": 2000, "temperature": 0, "ignore_eos": True}}  # fmt: skip
            async with s.post(url + "/generate", json=body) as r:
                await r.content.readline()
                async with s.get(url + "/metrics") as m:
                    page = families(await m.text())
                async with s.get(url + "/server_info") as i:
                    info = await i.json()
                async for _ in r.content:
                    pass
            async with s.get(url + "/metrics") as m:
                end = families(await m.text())
        return page, end, info

    for flavour, name in (("vllm", "vllm:generation_tokens"), ("sglang", "sglang:generation_tokens")):
        with SimProcess(profile="fast", mode="spec", time_scale=2.0, seed=2, metrics_flavour=flavour) as sim:
            page, end, info = asyncio.run(mid(sim.url))
        assert info["loadgen_sim"]["metrics_flavour"] == flavour
        running = "vllm:num_requests_running" if flavour == "vllm" else "sglang:num_running_reqs"
        assert value(page, running) == 1, flavour
        so_far = value(page, name)
        assert value(end, name) == 2000, flavour
        if flavour == "vllm":
            assert 0 < so_far < 2000
        else:
            assert so_far == 0


def test_sglang_counters_equal_what_the_streams_carried(sglang_run):
    sim, metas, aborted = sglang_run
    fams = families(get(sim.url, "/metrics").body.decode())
    everyone = metas + [aborted]
    assert value(fams, "sglang:generation_tokens") == sum(m["completion_tokens"] for m in everyone)
    assert value(fams, "sglang:prompt_tokens") == sum(m["prompt_tokens"] for m in everyone)
    assert value(fams, "sglang:num_requests") == len(everyone)
    assert value(fams, "sglang:num_aborted_requests") == 1
    assert value(fams, "sglang:spec_verify_calls") == sum(m["spec_verify_ct"] for m in everyone) > 0
    for g in ("num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate"):
        assert fams[f"sglang:{g}"].type == "gauge" and value(fams, f"sglang:{g}") == 0, g  # all requests ended
    for h in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        assert fams[f"sglang:{h}"].type == "histogram"
        assert sum(s.value for s in fams[f"sglang:{h}"].samples if s.name.endswith("_count")) > 0, h


def test_sglang_matches_a_real_sglang_page(sglang_run):
    sim, _, _ = sglang_run
    ours = families(get(sim.url, "/metrics").body.decode())
    real = families((PAGES / "sglang_docs_metrics.txt").read_text())
    # renamed or dropped since the docs' page: TPOT is request_time_per_output_token_seconds now
    comparable = set(real) - {"sglang:time_per_output_token_seconds", "sglang:func_latency_seconds"}
    assert comparable <= set(ours)
    for n in comparable:
        assert ours[n].type == real[n].type, n
        assert all("model_name" in s.labels for s in ours[n].samples), n


def test_reset_endpoints_answer_and_are_counted(vllm_run, sglang_run):
    vsim, _, _ = vllm_run
    ssim, _, _ = sglang_run
    r = call(vsim.url, "/reset_prefix_cache")
    assert r.status == 200 and r.body == b""
    assert get(vsim.url, "/server_info").json()["loadgen_sim"]["cache_resets"] == 1
    assert call(vsim.url, "/flush_cache").status in (404, 405)  # vLLM has no such route
    r = call(ssim.url, "/flush_cache")
    assert r.status == 200 and r.body.startswith(b"Cache flushed.")
    assert get(ssim.url, "/server_info").json()["loadgen_sim"]["cache_resets"] == 1
    assert call(ssim.url, "/reset_prefix_cache").status in (404, 405)


def test_vllm_reset_refused_while_busy(live):
    async def busy(url: str) -> tuple[int, int, dict]:
        async with aiohttp.ClientSession() as s:
            body = {"text": "Go on and on.", "stream": True,
                    "sampling_params": {"max_new_tokens": 2000, "temperature": 0, "ignore_eos": True}}  # fmt: skip
            async with s.post(url + "/generate", json=body) as r:
                await r.content.readline()
                async with s.post(url + "/reset_prefix_cache") as a:
                    refused = a.status
                async with s.post(url + "/reset_prefix_cache?reset_running_requests=true") as a:
                    forced = a.status
                async with s.get(url + "/server_info") as i:
                    info = await i.json()
                await s.post(url + "/abort_request", json={"abort_all": True})
        return refused, forced, info["loadgen_sim"]

    with SimProcess(profile="fast", mode="spec", time_scale=2.0, seed=2, metrics_flavour="vllm") as sim:
        refused, forced, info = asyncio.run(busy(sim.url))
    assert (refused, forced) == (409, 200)
    assert (info["cache_reset_refusals"], info["cache_resets"]) == (1, 1)
