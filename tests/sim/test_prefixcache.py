"""The simulator's prefix cache (loadgen.sim.prefixcache): exact matches, LRU eviction that keeps chains whole,
prefixes shared between sequences."""

from __future__ import annotations

import pytest

from loadgen.sim.prefixcache import PrefixCache, chain
from loadgen.workloads import tokens


def toks(text: str) -> list[str]:
    return tokens.split(text)


def test_a_cached_sequence_matches_all_but_its_last_token():
    c = PrefixCache(1000)
    seq = toks("System: be brief\nUser: hello there\nAssistant:")
    assert c.match(seq) == 0
    c.insert(seq)
    assert len(c) == len(seq)
    # the engine computes the last prompt token whatever is cached
    assert c.match(seq) == len(seq) - 1
    # an extension matches the whole cached sequence, and no further
    longer = seq + toks(" Hi.\nUser: more")
    assert c.match(longer) == len(seq)
    # a sequence that differs at token 3 matches its first two
    other = seq[:2] + ["X"] + seq[3:]
    assert c.match(other) == 2
    assert c.match([]) == 0 and c.match(seq[:1]) == 0


def test_two_sequences_share_their_common_prefix():
    c = PrefixCache(1000)
    system = toks("System: answer in one line, always\n")
    a = system + toks("Ask: what is a token?\nAssistant:")
    b = system + toks("Why: batch requests?\nAssistant:")
    c.insert(a)
    assert c.match(b) == len(system)
    c.insert(b)
    # one entry per distinct prefix: the shared part is stored once
    assert len(c) == len(a) + len(b) - len(system)
    assert c.match(a) == len(a) - 1 and c.match(b) == len(b) - 1


def test_eviction_takes_the_least_recent_leaves_and_keeps_chains_whole():
    system = toks("System: one two three four five six seven eight\n")
    a = system + toks("alpha beta gamma")
    b = system + toks("delta epsilon zeta")
    tail_a, tail_b = len(a) - len(system), len(b) - len(system)
    c = PrefixCache(len(system) + tail_a + tail_b)
    c.insert(a)
    c.insert(b)
    assert len(c) == c.capacity_tokens and c.evicted == 0
    # a third sequence over capacity evicts a's tail first (the least recent leaves), never the shared system
    d = toks("x y")
    assert len(d) < tail_a
    c.insert(d)
    assert len(c) == c.capacity_tokens and c.evicted == len(d)
    assert c.match(d + ["!"]) == len(d)
    assert c.match(b + ["!"]) == len(b)
    kept_a = c.match(a + ["!"])
    assert len(system) <= kept_a == len(a) - len(d)
    # whatever is kept of a chain is a prefix of it: every kept hash has its parent
    hashes = set(c._lru)
    for seq in (a, b, d):
        kept = [h in hashes for h in chain(seq)]
        assert kept == sorted(kept, reverse=True)


def test_a_match_makes_its_prefix_recent():
    a, b = toks("aa bb cc dd"), toks("ee ff gg hh")
    c = PrefixCache(len(a) + len(b))
    c.insert(a)
    c.insert(b)
    assert c.match(a + ["!"]) == len(a)  # a is now the more recent: b goes first
    c.insert(toks("zz"))
    assert c.match(a + ["!"]) == len(a) and c.match(b + ["!"]) == len(b) - 1


def test_a_sequence_longer_than_the_capacity_keeps_its_head():
    seq = toks("w " * 50)
    c = PrefixCache(10)
    c.insert(seq)
    assert len(c) == 10 and c.match(seq) == 10


def test_clear_and_capacity():
    c = PrefixCache(100)
    c.insert(toks("one two three"))
    c.clear()
    assert len(c) == 0 and c.match(toks("one two three")) == 0
    with pytest.raises(ValueError):
        PrefixCache(0)
