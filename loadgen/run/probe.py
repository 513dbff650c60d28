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
        """Whether the server decodes speculatively; None when its engine does not say.

        SGLang: ``speculative_algorithm`` in ``/server_info``. llama.cpp: every slot of
        ``/slots`` says ``"speculative": true|false`` (None if ``/slots`` is off, ``--no-slots``).
        """
        if self.engine == "sglang":
            return bool(self.server_info.get("speculative_algorithm"))
        if self.engine == "llama.cpp":
            spec = self.server_info.get("speculative")
            return spec if isinstance(spec, bool) else None
        return None

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
            elif out.engine in ("unknown", "llama.cpp"):  # llama.cpp's /v1/models says owned_by "llamacpp"
                props = await _get_json(s, url + "/props")
                if isinstance(props, dict) and "default_generation_settings" in props:
                    out.engine = "llama.cpp"
                    out.server_info = _llama_info(props, await _get_json(s, url + "/slots"))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        out.reachable = False
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return out


def _llama_info(props: dict, slots) -> dict:
    """What llama.cpp's ``/props`` and ``/slots`` say about its configuration and speculation.

    Measured on llama-server b1-0c1e570 (tests/e2e): ``/props`` has no speculative settings
    at all (its ``default_generation_settings.params["speculative.types"]`` reads "none" on an
    n-gram server too); ``/slots`` gives each slot's ``speculative`` flag and, for a slot that
    has served a request, ``params["speculative.types"]`` (e.g. "none,ngram-simple"). The
    draft sizes (n-gram N and M, ``--draft-max``) are reported nowhere; the number of
    per-position acceptance counters on ``/metrics`` (loadgen.serverview) is the draft max.
    """
    info = {k: props[k] for k in ("build_info", "total_slots", "model_path") if k in props}
    if "build_info" in props:
        info["version"] = props["build_info"]
    dgs = props.get("default_generation_settings")
    if isinstance(dgs, dict) and isinstance(dgs.get("n_ctx"), int):
        info["n_ctx_per_slot"] = dgs["n_ctx"]
    if not isinstance(slots, list) or not all(isinstance(x, dict) for x in slots) or not slots:
        info["slots_endpoint"] = False  # --no-slots (501), or an answer we cannot read
        return info
    info["slots_endpoint"] = True
    flags = [x.get("speculative") for x in slots]
    if all(isinstance(f, bool) for f in flags):
        info["speculative"] = any(flags)
        info["speculative_slots"] = sum(flags)
    types: set[str] = set()
    for x in slots:
        params = x.get("params")
        if isinstance(params, dict) and isinstance(params.get("speculative.types"), str):
            types.update(t for t in params["speculative.types"].split(",") if t and t != "none")
    if types:
        # The key SGLang uses for the same fact, so reports name llama.cpp's drafter too.
        info["speculative_types"] = info["speculative_algorithm"] = ",".join(sorted(types))
    return info


def probe_sync(url: str, timeout_s: float = 5.0) -> ServerProbe:
    return asyncio.run(probe(url, timeout_s))


def probe_target(target) -> ServerProbe:
    """Probe a target's server and switch on what its engine needs: SGLang reports acceptance on its
    OpenAI routes only when asked (``spec_details``), so a target there gets it."""
    found = probe_sync(target.url)
    if found.engine == "sglang" and target.protocol != "sglang":
        target.spec_details = True
    return found
