"""Stage accounting: windows, merge = union, encode/decode, per-workload slices."""

import json
import random
from array import array

from loadgen.record import CANCELLED, RequestRecord
from loadgen.stage.result import Slo, StageAccumulator, StageResult

MS = 1_000_000


def make_rec(rng, i, start_ms, workload="w", fail=None):
    r = RequestRecord("t", workload, f"r{i}", start_ms * MS)
    r.sent_ns = r.start_ns + 100_000
    t = r.sent_ns + rng.randint(20, 80) * MS
    n = 0
    for _ in range(rng.randint(2, 30)):
        k = rng.choice([1, 2, 3])
        r.chunk_ns.append(t)
        r.chunk_tokens.append(k)
        n += k
        t += rng.randint(5, 40) * MS
    r.end_ns = t
    r.output_tokens = n
    r.accept_length = rng.uniform(1.0, 3.0)
    if fail:
        r.fail(fail, "boom")
    return r


def records(seed=1, n=300):
    rng = random.Random(seed)
    return [make_rec(rng, i, rng.randint(0, 2000), rng.choice(["code", "chat"]),
                     "http_503" if rng.random() < 0.05 else None) for i in range(n)]


def fold(recs, lo=500, hi=1500):
    acc = StageAccumulator(lo * MS, hi * MS, 50 * MS, Slo(ttft_ms=60))
    for r in recs:
        acc.add(r)
    return acc.result(target="t", url="http://x", protocol="sglang", concurrency=4)


def test_merge_equals_union():
    recs = records()
    a, b = fold(recs[::2]), fold(recs[1::2])
    a.merge(b)
    whole = fold(recs).to_dict()
    merged = a.to_dict()
    for key in ("requests", "output_tokens", "ttft", "itl", "chunk_gap", "tpot", "e2e", "tokens_per_chunk",
                "accept_length", "timeline", "good_requests", "histograms"):
        assert merged[key] == whole[key], key
    assert merged["workloads"]["code"]["itl"] == whole["workloads"]["code"]["itl"]
    assert merged["client"]["processes"] == 2


def test_dict_round_trip_then_merge():
    recs = records(2)
    a = StageResult.from_dict(fold(recs[:150]).to_dict())
    a.merge(StageResult.from_dict(fold(recs[150:]).to_dict()))
    assert a.to_dict()["itl"] == fold(recs).to_dict()["itl"]
    assert a.to_dict()["requests"] == fold(recs).to_dict()["requests"]


def test_window_rules():
    rng = random.Random(3)
    recs = records(3)
    d = fold(recs).to_dict()
    inside = [r for r in recs if 500 * MS <= r.start_ns < 1500 * MS]
    assert d["requests"]["started"] == len(inside)
    assert d["requests"]["failed"] == sum(1 for r in inside if not r.ok)
    assert d["ttft"]["count"] == sum(1 for r in inside if r.ok)
    tokens = sum(k for r in recs for t, k in zip(r.chunk_ns, r.chunk_tokens) if 500 * MS <= t < 1500 * MS)
    assert d["output_tokens"] == tokens and sum(d["timeline"]["tokens"]) == tokens
    assert abs(d["output_tokens_per_s"] - tokens / 1.0) < 1e-6
    assert len(d["timeline"]["tokens"]) == 20
    per_token = sum(k for r in recs for i, (t, k) in enumerate(zip(r.chunk_ns, r.chunk_tokens))
                    if i > 0 and 500 * MS <= t < 1500 * MS)
    assert d["itl"]["count"] == per_token
    assert d["requests"]["failures"]["http_503"]["first_message"] == "boom"
    del rng


def test_itl_counts_each_token_of_a_k_token_chunk():
    r = RequestRecord("t", "w", "r", 0)
    r.sent_ns = 0
    r.chunk_ns = array("q", [10 * MS, 40 * MS])
    r.chunk_tokens = array("l", [1, 3])
    r.end_ns = 40 * MS
    r.output_tokens = 4
    acc = StageAccumulator(0, 100 * MS, 5 * MS)
    acc.add(r)
    d = acc.result(target="t", url="u", protocol="p", concurrency=1).to_dict()
    assert d["itl"]["count"] == 3 and abs(d["itl"]["p50"] - 10.0) < 0.02
    assert d["chunk_gap"]["count"] == 1 and abs(d["chunk_gap"]["p50"] - 30.0) < 0.05
    assert abs(d["tpot"]["p50"] - 10.0) < 0.02 and abs(d["ttft"]["p50"] - 10.0) < 0.02
    assert d["tokens_per_chunk"]["count"] == 2


def _met_by_hand(slo, r):
    """The SLO rules of docs/metrics.md spelled out, to hold the registry-built Slo to them."""
    if not r.ok or not r.chunk_ns:
        return False
    n = r.output_tokens or 0
    worst = max(((r.chunk_ns[i] - r.chunk_ns[i - 1]) / r.chunk_tokens[i] for i in range(1, len(r.chunk_ns))),
                default=0.0)
    return not ((slo.ttft_ms is not None and (r.chunk_ns[0] - r.t0_ns) / 1e6 > slo.ttft_ms)
                or (slo.e2e_ms is not None and (r.end_ns - r.t0_ns) / 1e6 > slo.e2e_ms)
                or (slo.tpot_ms is not None and n > 1 and (r.end_ns - r.chunk_ns[0]) / 1e6 / (n - 1) > slo.tpot_ms)
                or (slo.itl_ms is not None and worst / 1e6 > slo.itl_ms))


def test_slo_keys_and_checks_come_from_the_metrics():
    import dataclasses

    assert {f.name for f in dataclasses.fields(Slo)} == {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}
    assert not Slo().any() and Slo(itl_ms=1.0).any()
    recs = records(4)
    for slo in (Slo(ttft_ms=60), Slo(tpot_ms=20), Slo(itl_ms=15), Slo(e2e_ms=400),
                Slo(ttft_ms=70, tpot_ms=25, itl_ms=30, e2e_ms=600)):
        met = [slo.met(r) for r in recs]
        assert met == [_met_by_hand(slo, r) for r in recs]
        assert 0 < sum(met) < len(recs), slo  # each limit bites on some requests and not others


def test_requests_the_runner_cancelled_are_counted_apart_from_failures():
    """A request still running when the stage ended is the runner's cancellation, not the server's failure: its
    window chunks count, it is neither completed nor failed; a file written before says "cancelled" among its
    failures, and reads the same."""
    rng = random.Random(4)
    recs = [make_rec(rng, i, 600 + i, fail=["http_503", CANCELLED, None][i % 3]) for i in range(30)]
    d = fold(recs).to_dict()
    assert d["requests"]["started"] == 30 and d["requests"]["completed"] == 10
    assert d["requests"]["failed"] == 10 and d["requests"]["cancelled"] == 10
    assert set(d["requests"]["failures"]) == {"http_503"}
    assert d["output_tokens"] == sum(k for r in recs for t, k in zip(r.chunk_ns, r.chunk_tokens)
                                     if 500 * MS <= t < 1500 * MS)
    old = json.loads(json.dumps(d))
    old["requests"]["failures"]["cancelled"] = {"count": 10, "first_message": "request cancelled when the stage ended"}
    old["requests"]["failed"] = 20
    del old["requests"]["cancelled"]
    assert StageResult.from_dict(old).to_dict()["requests"] == d["requests"]
