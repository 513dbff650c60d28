"""Whether speculation was on or off through a window, from the stream's chunks (stage/switching.py)."""

from __future__ import annotations

import random

import numpy as np

from loadgen.stage.switching import BUCKET_S, NOTE_HEAD, DraftBuckets, cell_alpha, cell_size, judge

STEP_NS = int(BUCKET_S * 1e9)


def _buckets(states: list[str], per_bucket: int = 40, p_multi: float = 0.9, seed: int = 0) -> DraftBuckets:
    """One bucket per state: ``per_bucket`` chunks, each carrying drafts with ``p_multi`` when "on", never when "off"."""
    rng = random.Random(seed)
    b = DraftBuckets()
    for i, st in enumerate(states):
        t = np.full(per_bucket, i * STEP_NS + 1000, np.int64)
        k = np.array([1 + (st == "on" and rng.random() < p_multi) * rng.randint(1, 3) for _ in range(per_bucket)])
        b.add(t, k)
    return b


def test_buckets_count_chunks_and_those_that_carried_drafts():
    b = DraftBuckets()
    b.add(np.array([0, 5_000_000, 12_000_000, 31_000_000]), np.array([1, 3, 1, 2]))
    b.add(np.array([9_999_999]), np.array([4]))
    assert b.trimmed() == ([3, 1, 0, 1], [2, 0, 0, 1])
    other = DraftBuckets()
    other.add(np.array([45_000_000]), np.array([2]))
    b.merge(other)
    assert b.trimmed() == ([3, 1, 0, 1, 1], [2, 0, 0, 1, 1])
    again = DraftBuckets.from_dict({"chunks": [3, 1, 0, 1, 1], "multi": [2, 0, 0, 1, 1]})
    assert again.trimmed() == b.trimmed()


def test_a_threshold_that_flips_every_step_is_oscillating():
    states = ["on", "off"] * 50  # 100 buckets of 10 ms: a switch every step for a second
    sw = judge(_buckets(states), window_s=1.0)
    assert (sw.on, sw.off, sw.mixed, sw.switches) == (50, 50, 0, 99)
    # a cell is as small as the level allows (a bucket of 40 chunks is one cell): 6 chunks at 0.9 over 4,000
    assert sw.cell_chunks == cell_size(sw.level, cell_alpha(4000)) == 6
    assert sw.oscillating and sw.note().startswith(f"{NOTE_HEAD} 99 times in the 1 s window")


def test_steady_speculation_at_any_acceptance_has_no_switch():
    for p, per in ((0.9, 40), (0.3, 40), (0.3, 5), (0.9, 1)):
        sw = judge(_buckets(["on"] * 2000, per_bucket=per, p_multi=p, seed=3), window_s=20.0)
        assert sw.switches == 0 and sw.off == 0 and not sw.oscillating, (p, per)


def test_one_switch_when_the_load_moves_is_not_oscillation():
    sw = judge(_buckets(["on"] * 300 + ["off"] * 300), window_s=6.0)
    assert sw.switches == 1 and not sw.oscillating


def test_a_plain_server_says_nothing():
    assert judge(_buckets(["off"] * 200), window_s=2.0) is None
    # a plain server whose client now and then merged two sends into one read (2 tokens a chunk)
    b = _buckets(["off"] * 200)
    b.add(np.array([i * 7 * STEP_NS for i in range(5)]), np.array([2] * 5))
    assert judge(b, window_s=2.0) is None


def test_few_chunks_a_bucket_are_merged_into_cells_before_judging():
    # C=1: 2 chunks a bucket; a cell needs 5 at this level, so 3 buckets make one
    sw = judge(_buckets(["on"] * 160 + ["off"] * 160, per_bucket=2), window_s=3.2)
    assert sw.cell_chunks == 5 and sw.switches == 1 and sw.mixed <= 1  # 3 buckets a cell: one holds the switch


def _stage(users: range, flip: bool):
    """A stage of 1 s where every user's request gets a chunk each 10 ms step: with ``flip``, steps alternate
    between verifying drafts (3 tokens) and plain decoding (1), else every step verifies."""
    from array import array

    from loadgen.record import RequestRecord
    from loadgen.stage.result import StageAccumulator

    t0 = 10_000_000_000
    acc = StageAccumulator(t0, t0 + 1_000_000_000, 50_000_000)
    for u in users:
        rec = RequestRecord("auto", "chat", f"r{u}", start_ns=t0 - 1_000_000, sent_ns=t0 - 900_000)
        rec.chunk_ns = array("q", [t0 + s * STEP_NS + 100_000 + u for s in range(100)])
        rec.chunk_tokens = array("l", [1 if flip and s % 2 else 3 for s in range(100)])
        rec.end_ns, rec.output_tokens, rec.finish_reason = rec.chunk_ns[-1] + 1000, sum(rec.chunk_tokens), "length"
        acc.add(rec)
    return acc.result(target="auto", url="http://x", protocol="sglang", concurrency=len(users))


def test_a_stage_says_when_its_speculation_thrashed_and_a_merge_says_it_once():
    from loadgen.stage.result import StageResult

    d = _stage(range(40), flip=True).to_dict()
    # each request's first chunk is its prefill's, left out: 99 decode steps, 98 switches
    assert d["switching"]["oscillating"] and d["switching"]["switches"] == 98
    assert sum(d["switching"]["chunks"]) == 40 * 99
    (note,) = [n for n in d["notes"] if n.startswith(NOTE_HEAD)]
    assert note == (f"{NOTE_HEAD} 98 times in the 1 s window (98 a second; off in 51 % of 99 cells of 4+ chunks, "
                    "0 mixed): a threshold that thrashes")
    # two load processes with 20 users each: each alone has cells of one step too; merged, one note
    a, b = _stage(range(20), flip=True), _stage(range(20, 40), flip=True)
    a2, b2 = StageResult.from_dict(a.to_dict()), StageResult.from_dict(b.to_dict())
    a2.merge(b2)
    merged = a2.to_dict()
    assert [n for n in merged["notes"] if n.startswith(NOTE_HEAD)] == [n for n in d["notes"] if n.startswith(NOTE_HEAD)]
    assert merged["switching"]["chunks"] == d["switching"]["chunks"]
    steady = _stage(range(40), flip=False).to_dict()
    assert steady["switching"]["switches"] == 0 and not any(n.startswith(NOTE_HEAD) for n in steady["notes"])


def _phased(flip_in_freetext: bool, phased: bool = True):
    """A 4 s window whose workloads take turns each second (predictable, freetext, ...), 20 users' chunks every
    10 ms: a fixed speculating server drafts in 90 % of predictable's steps and 20 % of freetext's; with
    ``flip_in_freetext`` the freetext phases alternate five verifying and five plain steps (a threshold thrashing;
    one a step is faster than freetext's cells of two steps can tell)."""
    from array import array

    from loadgen.record import RequestRecord
    from loadgen.stage.result import StageAccumulator

    rng = random.Random(5)
    t0 = 10_000_000_000
    acc = StageAccumulator(t0, t0 + 4_000_000_000, 200_000_000)
    for phase in range(4):
        wl, p = ("predictable", 0.9) if phase % 2 == 0 else ("freetext", 0.2)
        for u in range(20):
            rec = RequestRecord("spec", wl, f"r{phase}-{u}", start_ns=t0 + phase * 10**9 - 1_000_000,
                                sent_ns=t0 + phase * 10**9 - 900_000, phase=phase if phased else 0)
            steps = range(phase * 100, phase * 100 + 100)
            rec.chunk_ns = array("q", [t0 + s * STEP_NS + 100_000 + u for s in steps])
            rec.chunk_tokens = array("l", [1 if (flip_in_freetext and wl == "freetext" and s // 5 % 2) or
                                           rng.random() >= p else 2 for s in steps])
            rec.end_ns, rec.output_tokens = rec.chunk_ns[-1] + 1000, sum(rec.chunk_tokens)
            rec.finish_reason = "length"
            acc.add(rec)
    return acc.result(target="spec", url="http://x", protocol="sglang", concurrency=20)


def test_a_phased_window_is_judged_phase_by_phase():
    from loadgen.stage.result import StageResult

    # judged as one window, freetext's 20 % against predictable's 90 % reads as speculation turned off
    mixed_up = _phased(False, phased=False).to_dict()
    assert "phased" not in mixed_up and mixed_up["switching"]["switches"] >= 3
    d = _phased(False).to_dict()
    assert d["phased"] and d["switching"]["switches"] == 0 and not d["switching"]["oscillating"]
    assert not any(n.startswith(NOTE_HEAD) for n in d["notes"])
    # each workload keeps its buckets: reloaded, the stage judges the same
    again = StageResult.from_dict(d).to_dict()
    assert again["switching"] == d["switching"] and again["phased"]
    # a threshold thrashing in the freetext phases only is still seen, at its own level and over its own time
    thrash = _phased(True).to_dict()
    assert thrash["switching"]["oscillating"] and thrash["switching"]["switches"] >= 20
    assert [n for n in thrash["notes"] if n.startswith(NOTE_HEAD)]


def test_second_by_second_the_stream_beside_the_server():
    from loadgen.stage.spectimeline import second_by_second

    # 2.5 s: speculating (3 tokens a chunk) the first second, plain the next, speculating the last half second
    states = ["on"] * 100 + ["off"] * 100 + ["on"] * 50
    b = DraftBuckets()
    for i, st in enumerate(states):
        b.add(np.full(4, i * STEP_NS + 1000, np.int64), np.full(4, 3 if st == "on" else 1))
    server = {"series": {"t_s": [1.001, 1.5, 2.0, 2.5], "running": [7, 8, 9, 8],
                         "accept_length": [3.0, 2.0, None, 3.0], "draft_tokens": [800, 400, 0, 400]}}
    tl = second_by_second(b, 2.5, server)
    assert tl["t_s"] == [1, 2, 3] and tl["chunks"] == [400, 400, 200]
    assert tl["output_tokens"] == [1200, 400, 600] and tl["tokens_per_chunk"] == [3.0, 1.0, 3.0]
    assert tl["drafting"] == [1.0, 0.0, 1.0]
    # a scrape 1 ms past the first second closes it; those at 1.5 and 2.0 s the second one (the later one's figure
    # where it has one); the one at 2.5 s the last (part) second
    assert tl["server_running"] == [7, 9, 8] and tl["server_accept_length"] == [3.0, 2.0, 3.0]
    assert "server_draft_tokens" in tl
    assert second_by_second(b, 2.5)["t_s"] == [1, 2, 3] and "server_running" not in second_by_second(b, 2.5)
    assert second_by_second(_buckets(["off"] * 50), 0.5) is None  # a plain server: nothing to draw
