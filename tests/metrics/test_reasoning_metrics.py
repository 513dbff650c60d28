"""The reasoning metrics on records of known shape, folded as a stage folds them: time to first output, reasoning
tokens, TPOT per kind; and a run without reasoning, where they have no samples (run.json's {"count": 0}, empty
run.csv cells), as the other metrics without samples."""

import csv
import io

from loadgen.metrics import BY_NAME, decode_time
from loadgen.record import RequestRecord
from loadgen.run.results import CSV_COLUMNS, csv_text
from loadgen.stage.result import StageAccumulator, StageResult

MS = 1_000_000


def rec(i, thought, answer, step_ms=10, workload="w", spans=None):
    """Sent at i ms, first chunk 50 ms later, then one chunk every ``step_ms``: ``thought`` reasoning tokens then
    ``answer`` answer tokens, one a chunk (``spans`` instead: any interleaving, over thought + answer chunks)."""
    r = RequestRecord("t", workload, f"r{i}", i * MS)
    r.sent_ns = r.start_ns
    n = thought + answer
    for k in range(n):
        r.chunk_ns.append(r.sent_ns + (50 + k * step_ms) * MS)
        r.chunk_tokens.append(1)
    r.end_ns = r.chunk_ns[-1]
    r.output_tokens = n
    r.reasoning_spans = spans if spans is not None else (((0, thought),) if thought else ())
    r.reasoning_tokens = sum(hi - lo for lo, hi in r.reasoning_spans)
    return r


def stage(records) -> dict:
    acc = StageAccumulator(0, 1000 * MS, 50 * MS)
    for r in records:
        acc.add(r)
    return acc.result(target="t", url="u", protocol="chat", concurrency=1).to_dict()


def test_time_to_first_output_and_tpot_per_kind():
    d = stage([rec(i, thought=20, answer=10) for i in range(5)])
    assert d["ttft"]["count"] == d["ttfo"]["count"] == 5
    assert abs(d["ttft"]["p50"] - 50.0) < 0.1 and abs(d["ttfo"]["p50"] - 250.0) < 0.3  # 20 steps of 10 ms later
    assert d["reasoning_tokens"]["count"] == 5 and d["reasoning_tokens"]["mean"] == 20
    assert abs(d["reasoning_tpot"]["p50"] - 10.0) < 0.02 and abs(d["output_tpot"]["p50"] - 10.0) < 0.02


def test_the_kinds_share_the_first_to_last_chunk():
    r = rec(0, thought=7, answer=4, step_ms=3)
    (rns, rk), (ons, ok) = decode_time(r, reasoning=True), decode_time(r, reasoning=False)
    assert (rk, ok) == (6, 4) and rns + ons == r.chunk_ns[-1] - r.chunk_ns[0]
    assert (rns, ons) == (6 * 3 * MS, 4 * 3 * MS)


def test_interleaved_kinds_each_count_their_own_chunks():
    # chunks: R R A R R A A (reasoning at 0-1 and 3-4)
    r = rec(0, thought=0, answer=7, spans=((0, 2), (3, 5)))
    assert r.reasoning_tokens == 4 and r.first_output_index == 2
    assert decode_time(r, reasoning=True) == (3 * 10 * MS, 3) and decode_time(r, reasoning=False) == (3 * 10 * MS, 3)


def test_a_request_that_did_not_reason_counts_in_a_run_that_did():
    d = stage([rec(0, thought=20, answer=10), rec(1, thought=0, answer=10)])
    assert d["ttfo"]["count"] == 2 and abs(d["ttfo"]["min"] - 50.0) < 0.1  # its first output is its first token
    assert d["output_tpot"]["count"] == 2
    assert d["reasoning_tokens"]["count"] == d["reasoning_tpot"]["count"] == 1


def test_without_reasoning_they_have_no_samples_and_empty_csv_cells():
    d = stage([rec(i, thought=0, answer=10) for i in range(5)])
    assert d["ttft"]["count"] == 5
    for name in ("ttfo", "reasoning_tokens", "reasoning_tpot", "output_tpot"):
        assert d[name] == {"count": 0}, name
        assert StageResult.from_dict(d).to_dict()[name] == {"count": 0}, name
    d.update(stage_index=0, workloads={}, window={"duration_s": 1.0})
    row = dict(zip(CSV_COLUMNS, next(csv.reader(io.StringIO(csv_text([d]).splitlines()[1])))))
    assert row["ttfo_p50_ms"] == row["ttfo_p99_ms"] == row["reasoning_tokens_mean"] == ""
    assert row["ttft_p50_ms"] != ""


def test_only_the_workload_that_reasoned_has_them():
    d = stage([rec(0, 20, 10, workload="think"), rec(1, 0, 10, workload="plain")])
    assert d["workloads"]["think"]["ttfo"]["count"] == 1 and d["workloads"]["plain"]["ttfo"] == {"count": 0}
    assert d["ttfo"]["count"] == 2
    again = StageResult.from_dict(d).to_dict()
    assert again["ttfo"] == d["ttfo"] and again["workloads"]["plain"]["ttfo"] == {"count": 0}


def test_registered_with_what_they_need():
    assert BY_NAME["ttfo"].only_with == BY_NAME["output_tpot"].only_with == "reasoning_tokens"
    assert BY_NAME["reasoning_tokens"].unit == "tokens"
