"""Length control: targets are met, and the prompt keeps its nature while growing or shrinking."""

from __future__ import annotations

import pickle
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.workloads import tokens
from loadgen.errors import LoadgenError
from loadgen.workloads import (
    BuiltinTokenizer,
    ChatParts,
    Length,
    Lengths,
    TextParts,
    prompt_tokens,
    resolve,
)
from loadgen.workloads.lengths import fit_chat, fit_text

TOK = BuiltinTokenizer()


@pytest.mark.parametrize(
    "spec, kind, a, b",
    [("200", "fixed", 200, 0), ("normal:200,50", "normal", 200, 50), ("uniform:100,300", "uniform", 100, 300)],
)
def test_length_parse(spec: str, kind: str, a: float, b: float) -> None:
    length = Length.parse(spec)
    assert (length.kind, length.a, length.b) == (kind, a, b)
    assert str(length) == spec


@pytest.mark.parametrize("spec, why", [
    ("0", "a token count is >= 1, got 0"), ("-3", "a token count is >= 1, got -3"),
    ("abc", "expected a positive integer N, normal:MEAN,STD or uniform:LOW,HIGH"),
    ("normal:200", "expected a positive integer N"), ("normal:x,1", "expected a positive integer N"),
    ("uniform:300,100", "LOW 300 exceeds HIGH 100 (uniform:LOW,HIGH)"), ("uniform:0,5", "takes LOW >= 1"),
    ("gamma:1,2", "expected a positive integer N"), ("normal:nan,1", "takes MEAN >= 1 and STD >= 0"),
])
def test_length_parse_rejects_saying_why(spec: str, why: str) -> None:
    with pytest.raises(LoadgenError, match=f"^prompt tokens '{spec}': .*" + why.replace("(", r"\(").replace(")", r"\)")):
        Length.parse(spec, "prompt tokens")


def test_length_samples_stay_in_range() -> None:
    rng = random.Random(1)
    uniform, normal = Length.parse("uniform:100,300"), Length.parse("normal:5,50")
    assert all(100 <= uniform.sample(rng) <= 300 for _ in range(500))
    assert all(normal.sample(rng) >= 1 for _ in range(500))


@pytest.mark.parametrize("name", ["code", "chat", "predictable", "freetext"])
@pytest.mark.parametrize("target", [150, 800, 3000])
def test_builtins_meet_prompt_target_exactly(name: str, target: int, wl) -> None:
    lengths = Lengths.parse(prompt_tokens=str(target), output_tokens="uniform:10,20")
    for req in wl.take(resolve(name, lengths), 3, 12):
        assert prompt_tokens(req) == target
        assert 10 <= req.max_tokens <= 20


@pytest.mark.parametrize("name", ["code", "chat", "predictable", "freetext"])
def test_small_targets_never_overshoot(name: str, wl) -> None:
    # Below the length of an instruction plus the line introducing its material, the nearest
    # length below the target is the best that keeps the prompt whole.
    for target in (5, 20, 30, 40):
        for req in wl.take(resolve(name, Lengths.parse(prompt_tokens=str(target))), 3, 12):
            assert 1 <= prompt_tokens(req) <= target


def test_shaping_keeps_what_is_asked(wl) -> None:
    """Grown or cut, each request still asks the same thing as its natural version."""
    natural = wl.take(resolve("code:1,chat:1,predictable:1"), 5, 60)
    long = wl.take(resolve("code:1,chat:1,predictable:1", Lengths.parse(prompt_tokens="1500")), 5, 60)
    for a, b in zip(natural, long):
        assert a.workload == b.workload
        if a.messages is not None:
            assert a.messages[-1] == b.messages[-1]  # the question being asked is intact
            roles = [m["role"] for m in b.messages if m["role"] != "system"]
            assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
        elif "```" in a.prompt:
            assert b.prompt.startswith(a.prompt.split("```")[0])  # the instruction is intact
            assert b.prompt.rstrip().endswith("```")  # the code asked about closes the one code block
        elif a.workload == "code":
            assert b.prompt.endswith(a.prompt)  # a "write" task after code given as context
        else:
            assert b.prompt.startswith(a.prompt.splitlines()[0])


def test_padding_is_material_of_the_same_kind(wl) -> None:
    reqs = wl.take(resolve("freetext", Lengths.parse(prompt_tokens="400")), 2, 20)
    for req in reqs:
        notes = req.prompt.split("Some notes you can draw on, or ignore:\n", 1)[1].splitlines()
        assert notes and all(line.startswith("- ") for line in notes[:-1])  # the last one may be cut
    # Sequences grow by their own next terms: a "continue" prompt stays one arithmetic pattern.
    for req in wl.take(resolve("predictable", Lengths.parse(prompt_tokens="300")), 4, 80):
        if "x 1 = " in req.prompt:
            lines = req.prompt.split("\n\n", 1)[1].splitlines()
            m = int(lines[0].split(" x ")[0])
            assert all(line == f"{m} x {i} = {m * i}" for i, line in enumerate(lines[:-1], 1))


def test_generic_padding_for_plain_workloads(plugin_dir) -> None:
    """A third-party workload without drafts is padded with its own other prompts or exchanges."""
    for name in ("echo", "multi"):
        shaped = resolve(name, Lengths.parse(prompt_tokens="200"))
        for req in list(zip(range(5), shaped.requests(1))):
            assert prompt_tokens(req[1]) == 200
    multi = next(iter(resolve("multi", Lengths.parse(prompt_tokens="200")).requests(1)))
    assert multi.messages[-1]["content"] == "Follow-up 0?"


@settings(max_examples=60, deadline=None)
@given(
    head=st.text(min_size=0, max_size=40),
    material=st.text(min_size=0, max_size=200),
    tail=st.text(min_size=0, max_size=40),
    target=st.integers(min_value=1, max_value=300),
    seed=st.integers(0, 2**32),
)
def test_fit_text_never_exceeds_target(head: str, material: str, tail: str, target: int, seed: int) -> None:
    blocks = ["more text of the same kind.", "another line, with punctuation!"]
    parts = TextParts(head=head, tail=tail, material=material, more=lambda r: r.choice(blocks))
    text = fit_text(parts, target, TOK, random.Random(seed))
    assert tokens.count(text) <= target
    # Growing always reaches the target up to a boundary token where the frame's whitespace joins.
    assert tokens.count(text) >= target - 2


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(st.tuples(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60)), max_size=4),
    question=st.text(min_size=1, max_size=60),
    target=st.integers(min_value=1, max_value=200),
)
def test_fit_chat_keeps_alternation(history: list, question: str, target: int) -> None:
    msgs = tuple(m for u, a in history for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a}))
    pair = ({"role": "user", "content": "An earlier question?"}, {"role": "assistant", "content": "An earlier answer."})
    parts = ChatParts(final=({"role": "user", "content": question},), history=msgs, more=lambda r: pair)
    out = fit_chat(parts, target, TOK, random.Random(0))
    roles = [m["role"] for m in out]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
    total = sum(tokens.count(m["content"]) for m in out)
    # Exact unless one token per message is already more than the target.
    assert total == target or (total > target and all(tokens.count(m["content"]) <= 1 for m in out[:-1]))


def test_hf_tokenizer(tmp_path, wl) -> None:
    tk = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    # A small word-level tokenizer trained here on the built-in content: no download needed.
    corpus = [r.prompt or r.as_prompt() for r in wl.take(resolve("code:1,predictable:1,freetext:1"), 0, 300)]
    hf = tk.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    hf.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    folder = tmp_path / "model"
    folder.mkdir()
    hf.save(str(folder / "tokenizer.json"))

    lengths = Lengths.parse(prompt_tokens="120", tokenizer=str(folder))
    assert lengths.tokenizer.name.endswith("tokenizer.json")
    workload = resolve("code:1,predictable:1,freetext:1", lengths)
    for req in wl.take(workload, 0, 20):
        assert prompt_tokens(req, lengths.tokenizer) == 120
    # worker processes receive the workload, tokenizer included, by pickle
    assert wl.dumps(wl.take(pickle.loads(pickle.dumps(workload)), 0, 20)) == wl.dumps(wl.take(workload, 0, 20))


def test_tokenizer_errors(tmp_path, monkeypatch) -> None:
    with pytest.raises(LoadgenError, match="no such file"):
        Lengths.parse(tokenizer=str(tmp_path / "missing"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the optional package were absent
    with pytest.raises(LoadgenError, match=r"pip install 'loadgen\[tokenizers\]'"):
        Lengths.parse(tokenizer=str(bad))
