"""A minimal closed-loop driver for checking the simulator itself (tests, bench, calibration).

Not loadgen's measuring client: it only counts tokens and wall time, the way the
calibration table was measured (total output tokens / wall time of C users each
sending the next request as soon as the previous one ends).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

_TOPICS = (
    "a refrigerator keeps food cold", "plants turn sunlight into food", "the moon changes shape",
    "airplanes stay in the air", "bread rises in the oven", "people learn a second language",
    "bees make honey", "the tides work", "a bicycle stays upright", "rain clouds form",
    "my cat sleeps so much", "coffee keeps people awake", "the internet sends messages",
    "volcanoes erupt", "leaves change colour in autumn", "a compass finds north",
)  # fmt: skip
_OPENERS = (
    "Hi there! Could you explain to me how {t}? I would like a friendly answer, please.",
    "Hello, I was wondering how {t}. Can you tell me a little about it in plain words?",
    "Can you help me understand how {t}? My friend asked me today and I did not know.",
    "Good morning! I am curious how {t}. What would you say to someone who is new to it?",
)  # fmt: skip


def conversational_prompts(n: int, seed: int = 0) -> list[str]:
    """About 30-token chat questions (the traffic the pcie profile was calibrated with)."""
    rng = random.Random(seed)
    return [rng.choice(_OPENERS).format(t=rng.choice(_TOPICS)) for _ in range(n)]


@dataclass
class LoopResult:
    concurrency: int
    requests: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    chunks: int = 0
    ttft_s: list[float] = field(default_factory=list)

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0


async def _one(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int, stream: bool, res: LoopResult) -> None:
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True},
        "stream": stream,
    }
    t0 = time.perf_counter()
    async with session.post(url + "/generate", data=orjson.dumps(body)) as resp:
        if not stream:
            data = orjson.loads(await resp.read())
            res.ttft_s.append(time.perf_counter() - t0)
            res.output_tokens += data["meta_info"]["completion_tokens"]
            res.chunks += 1
            return
        first = True
        last = None
        buf = b""
        async for chunk in resp.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if ev == b"data: [DONE]":
                    continue
                if first:
                    res.ttft_s.append(time.perf_counter() - t0)
                    first = False
                res.chunks += 1
                last = ev
        if last is not None:
            res.output_tokens += orjson.loads(last[6:])["meta_info"]["completion_tokens"]


async def closed_loop(
    url: str,
    concurrency: int,
    per_user: int,
    *,
    max_tokens: int = 200,
    stream: bool = False,
    seed: int = 0,
) -> LoopResult:
    """``concurrency`` users each send ``per_user`` requests back to back; all start together."""
    prompts = conversational_prompts(concurrency * per_user, seed)
    res = LoopResult(concurrency)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def user(i: int) -> None:
            for k in range(per_user):
                await _one(session, url, prompts[i * per_user + k], max_tokens, stream, res)
                res.requests += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(user(i) for i in range(concurrency)))
        res.wall_s = time.perf_counter() - t0
    return res
