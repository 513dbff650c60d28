"""JSONL and ShareGPT files as workloads, and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.workloads.files import load_jsonl, load_sharegpt
from loadgen.errors import LoadgenError
from loadgen.workloads import Lengths, prompt_tokens, resolve


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_prompt_and_messages(tmp_path, wl) -> None:
    path = write(
        tmp_path / "mine.jsonl",
        json.dumps({"prompt": "Summarise the plot of Hamlet in three sentences.", "max_tokens": 90}),
        "",
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there?"}]}),
    )
    records = load_jsonl(path)
    assert records[0].prompt.startswith("Summarise") and records[0].max_tokens == 90
    assert records[1].messages[-1] == {"role": "user", "content": "Hi there?"} and records[1].max_tokens is None
    reqs = wl.take(resolve(str(path)), 0, 10)
    assert {r.workload for r in reqs} == {"mine"}
    assert {r.max_tokens for r in reqs} == {90, 256}
    assert sum(r.prompt is not None for r in reqs) == 5  # shuffled rounds: each record once per round


def test_jsonl_padding_uses_other_records(tmp_path, wl) -> None:
    lines = [json.dumps({"prompt": f"Question number {i}: what is {i} plus {i}?"}) for i in range(5)]
    path = write(tmp_path / "q.jsonl", *lines)
    for req in wl.take(resolve(str(path), Lengths.parse(prompt_tokens="60")), 1, 10):
        assert prompt_tokens(req) == 60
        assert req.prompt.startswith("Question number")
        assert set(req.prompt.split("\n\n")[:-1]) <= {json.loads(line)["prompt"] for line in lines}


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"prompt": "ok"}', "{not json"], r"bad\.jsonl:2: not valid JSON"),
        (['{"prompt": "ok"}', '{"text": "no prompt here"}'], r"bad\.jsonl:2: no prompt"),
        (['{"prompt": ""}'], r"bad\.jsonl:1: no prompt"),
        (['["a", "list"]'], r"bad\.jsonl:1: expected a JSON object"),
        (['{"prompt": "a", "messages": []}'], r"bad\.jsonl:1: give 'prompt' or 'messages', not both"),
        (['{"messages": [{"role": "user"}]}'], r"bad\.jsonl:1: message 1 needs string 'role' and 'content'"),
        (['{"prompt": "a", "max_tokens": 0}'], r"bad\.jsonl:1: 'max_tokens' must be a positive integer"),
        (['{"prompt": "a", "max_tokens": true}'], r"bad\.jsonl:1: 'max_tokens' must be a positive integer"),
        ([""], r"bad\.jsonl: no requests"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, lines: list[str], message: str) -> None:
    path = write(tmp_path / "bad.jsonl", *lines)
    with pytest.raises(LoadgenError, match=message) as info:
        resolve(str(path))
    assert "\n" not in str(info.value)


def test_missing_and_wrong_files(tmp_path) -> None:
    with pytest.raises(LoadgenError, match=r"nope\.jsonl: no such file"):
        resolve(str(tmp_path / "nope.jsonl"))
    with pytest.raises(LoadgenError, match=r"nope\.json: no such file"):
        resolve(f"sharegpt:{tmp_path / 'nope.json'}")
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(LoadgenError, match="is a directory"):
        resolve(str(tmp_path / "dir.jsonl"))
    with pytest.raises(LoadgenError, match=r"\.jsonl .*or ShareGPT \.json"):
        resolve(str(tmp_path / "data.csv"))
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(LoadgenError, match=r"latin1\.jsonl:1: not UTF-8"):
        resolve(str(tmp_path / "latin1.jsonl"))


SHAREGPT = [
    {"id": "a", "conversations": [
        {"from": "human", "value": "What is the capital of Portugal?"},
        {"from": "gpt", "value": "Lisbon is the capital of Portugal."},
        {"from": "human", "value": "And its largest city?"},
        {"from": "gpt", "value": "Lisbon again: it is both the capital and the largest city."},
    ]},
    {"id": "b", "conversations": [
        {"from": "system", "value": "You answer in one sentence."},
        {"from": "human", "value": "Why is the sea salty?"},
        {"from": "gpt", "value": "Rivers carry dissolved minerals from rocks into the sea, and evaporation leaves the salt behind."},
    ]},
    {"id": "empty", "conversations": []},
]


def test_sharegpt_array_and_lines(tmp_path, wl) -> None:
    array = tmp_path / "share.json"
    array.write_text(json.dumps(SHAREGPT))
    lines = write(tmp_path / "share_lines.jsonl", *(json.dumps(c) for c in SHAREGPT))
    a, b = load_sharegpt(array), load_sharegpt(lines)
    assert a == b and len(a) == 2  # the empty conversation is skipped
    first = a[0]
    assert [m["role"] for m in first.messages] == ["user", "assistant", "user"]
    assert first.reply.startswith("Lisbon again") and first.max_tokens > 5
    assert a[1].messages[0]["role"] == "system"
    # a .json path and sharegpt:PATH name the same workload
    assert wl.dumps(wl.take(resolve(str(array)), 3, 6)) == wl.dumps(wl.take(resolve(f"sharegpt:{array}"), 3, 6))
    assert wl.take(resolve(f"sharegpt:{lines}"), 0, 1)[0].workload == "share_lines"


def test_sharegpt_padding_uses_reference_replies(tmp_path, wl) -> None:
    path = tmp_path / "share.json"
    path.write_text(json.dumps(SHAREGPT))
    for req in wl.take(resolve(str(path), Lengths.parse(prompt_tokens="120")), 0, 6):
        assert prompt_tokens(req) == 120
        roles = [m["role"] for m in req.messages if m["role"] != "system"]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("[{\"conversations\": [}]", r"s\.json:1: not valid JSON"),
        (json.dumps([{"conversations": "text"}]), r"s\.json: record 1: expected an object with a 'conversations' list"),
        (json.dumps([{"conversations": [{"from": "alien", "value": "hi"}]}]), r"record 1: turn 1 has unknown speaker 'alien'"),
        (json.dumps([{"conversations": [{"from": "gpt", "value": "hi"}]}]), r"s\.json: no conversation with a human turn"),
    ],
)
def test_sharegpt_errors(tmp_path, content: str, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(LoadgenError, match=message):
        resolve(str(path))
