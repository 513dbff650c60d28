"""Smoke test of the real llama.cpp servers with plain aiohttp (no loadgen code).

Checks the facts the protocol layer and the load tests rely on: one SSE event per
token (so usage.completion_tokens equals the number of content events that carry
text, also under speculation), usage with ``stream_options.include_usage``, and
``timings.draft_n`` / ``draft_n_accepted`` from the speculative server.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from .prompts import COPY_CHAT, COPY_PROMPTS, CREATIVE_PROMPTS
from .sse import StreamResult, stream

pytestmark = pytest.mark.e2e  # conftest gives these room for the first build on a machine

MAX_TOKENS = 48


def _post(url: str, body: dict) -> StreamResult:
    async def go() -> StreamResult:
        async with aiohttp.ClientSession() as s:
            return await stream(s, url, body)

    return asyncio.run(go())


def _check_one_event_per_token(r: StreamResult) -> None:
    assert r.done, "no data: [DONE]"
    usage = r.usage
    assert usage, f"no usage event in {r.events[-3:]}"
    assert usage["completion_tokens"] > 0
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # llama.cpp sends one event per generated token, so the counts agree exactly
    # (prompts and settings keep the text ASCII and run to max_tokens).
    assert usage["completion_tokens"] == len(r.texts), (usage, len(r.texts), r.text)
    assert r.finish_reason == "length"
    assert usage["completion_tokens"] == MAX_TOKENS
    t = r.timings
    assert t and t["predicted_n"] == usage["completion_tokens"]


@pytest.fixture(params=["baseline", "spec"])
def server_url(request: pytest.FixtureRequest, llama_binary: object) -> str:
    return request.getfixturevalue("llama_baseline" if request.param == "baseline" else "llama_spec")


def test_completions_stream(server_url: str) -> None:
    r = _post(f"{server_url}/v1/completions", {
        "prompt": CREATIVE_PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0.8, "seed": 7,
        "ignore_eos": True, "cache_prompt": False,
    })
    _check_one_event_per_token(r)
    assert r.events[0]["object"] == "text_completion"


def test_chat_completions_stream(server_url: str) -> None:
    r = _post(f"{server_url}/v1/chat/completions", {
        "messages": COPY_CHAT, "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "ignore_eos": True, "cache_prompt": False,
    })
    _check_one_event_per_token(r)
    # role-only first event, then content
    first = r.events[0]["choices"][0]["delta"]
    assert first.get("role") == "assistant" and not first.get("content")
    # the gemma template (not ChatML) rendered the prompt: the model does not babble tags
    assert "<|im_start|>" not in r.text and "<start_of_turn>" not in r.text


def test_spec_reports_drafts_on_copy_prompt(llama_spec: str, llama_baseline: str) -> None:
    body = {"prompt": COPY_PROMPTS[0], "max_tokens": 96, "temperature": 0.0, "cache_prompt": False,
            "ignore_eos": True}
    spec = _post(f"{llama_spec}/v1/completions", body)
    t = spec.timings
    assert t, spec.events[-2:]
    assert t["draft_n"] > 0, t
    assert 0 < t["draft_n_accepted"] <= t["draft_n"], t
    assert t["draft_n_accepted"] / t["draft_n"] > 0.5, t
    # still one event per token when drafts are accepted in bursts
    assert spec.usage["completion_tokens"] == len(spec.texts) == 96
    # speculation is lossless at temperature 0: the baseline server writes the same text
    # (compared on a prefix: batched verification may round differently at a near-tie)
    base = _post(f"{llama_baseline}/v1/completions", body)
    assert not (base.timings or {}).get("draft_n"), base.timings
    assert base.usage["completion_tokens"] == len(base.texts) == 96
    assert base.text[:100] == spec.text[:100]
