"""What is behind a URL: which engine, its configuration, whether it answers at all.

Recorded in every results file (so a report says which server config produced
which numbers), and used to switch on SGLang-only request fields.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
import orjson


@dataclass
class ServerProbe:
    url: str
    reachable: bool = False
    error: str = ""
    engine: str = "unknown"
    """"sglang", "vllm", "llama.cpp" or "unknown"."""
    server_info: dict = field(default_factory=dict)
    models: list = field(default_factory=list)

    @property
    def speculative(self) -> bool | None:
        algo = self.server_info.get("speculative_algorithm")
        return None if self.engine != "sglang" else bool(algo)

    def to_dict(self) -> dict:
        return {"url": self.url, "reachable": self.reachable, "error": self.error, "engine": self.engine,
                "speculative": self.speculative, "models": self.models, "server_info": self.server_info}


async def _get_json(session: aiohttp.ClientSession, url: str):
    async with session.get(url) as r:
        if r.status != 200:
            return None
        try:
            return orjson.loads(await r.read())
        except orjson.JSONDecodeError:
            return None


async def probe(url: str, timeout_s: float = 5.0) -> ServerProbe:
    out = ServerProbe(url)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as s:
            models = await _get_json(s, url + "/v1/models")
            out.reachable = True
            if isinstance(models, dict):
                out.models = [m.get("id") for m in models.get("data", []) if isinstance(m, dict)]
                owners = {m.get("owned_by") for m in models.get("data", []) if isinstance(m, dict)}
                if "vllm" in owners:
                    out.engine = "vllm"
                elif "llamacpp" in owners:
                    out.engine = "llama.cpp"
            info = await _get_json(s, url + "/server_info")
            if info is None:
                info = await _get_json(s, url + "/get_server_info")
            if isinstance(info, dict) and ("internal_states" in info or "speculative_algorithm" in info):
                out.engine = "sglang"
                out.server_info = info
            elif out.engine == "unknown":
                props = await _get_json(s, url + "/props")
                if isinstance(props, dict) and "default_generation_settings" in props:
                    out.engine = "llama.cpp"
                    out.server_info = {k: props[k] for k in ("build_info", "total_slots", "model_path") if k in props}
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        out.reachable = False
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return out


def probe_sync(url: str, timeout_s: float = 5.0) -> ServerProbe:
    return asyncio.run(probe(url, timeout_s))
