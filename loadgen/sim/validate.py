"""Request bodies in, a neutral ``Job`` out, with SGLang's error messages for bad input.

Three error kinds, because SGLang answers each differently (protocol doc §4):
``SchemaError`` (the /generate schema gate: 400 ``{"error": "<str>"}``),
``BadRequest`` (OpenAI pydantic validation: flat 400 "Bad Request") and
``ValueError`` (semantic: context length, duplicate rid; route-specific shape).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.workloads import tokens


class SchemaError(Exception):
    pass


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class Job:
    route: str
    """generate, completions or chat."""
    prompt: str
    """The prompt as text: what is classified, echoed and tokenized."""
    prompt_tokens: int
    max_new_tokens: int | None
    stream: bool
    rid: str | None
    temperature: float = 1.0
    min_new_tokens: int = 0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    no_stop_trim: bool = False
    sampling_seed: int | None = None
    model: str = "default"
    include_usage: bool = False
    continuous_usage: bool = False
    spec_details: bool = False
    return_meta_info: bool = False


_NUM = (int, float)
# sampling_params keys SGLang 0.5.23 accepts, with the JSON types it takes (None = anything)
_SAMPLING: dict[str, tuple | None] = {
    "max_new_tokens": (int, type(None)),
    "temperature": _NUM,
    "top_p": _NUM,
    "top_k": (int,),
    "min_p": _NUM,
    "frequency_penalty": _NUM,
    "presence_penalty": _NUM,
    "repetition_penalty": _NUM,
    "min_new_tokens": (int,),
    "n": (int,),
    "stop": (str, list, type(None)),
    "stop_token_ids": (list, type(None)),
    "stop_regex": (str, list, type(None)),
    "ignore_eos": (bool,),
    "skip_special_tokens": (bool,),
    "spaces_between_special_tokens": (bool,),
    "no_stop_trim": (bool,),
    "json_schema": (str, type(None)),
    "regex": (str, type(None)),
    "ebnf": (str, type(None)),
    "structural_tag": (str, type(None)),
    "logit_bias": (dict, type(None)),
    "sampling_seed": (int, type(None)),
    "custom_params": None,
    "beam_width": (int,),
    "watermark": None,
    "stream_interval": (int, type(None)),
}
_TYPE_NAMES = {int: "i32", float: "f32", str: "a string", bool: "a boolean", list: "a sequence", dict: "a map"}


def _json_kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{str(v).lower()}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, list):
        return "sequence"
    return "map"


def _typed(value: object, types: tuple) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number
    return isinstance(value, types)


def _schema_check(key: str, value: object, types: tuple | None) -> None:
    if types is not None and not _typed(value, types):
        want = _TYPE_NAMES.get(types[0], types[0].__name__)
        raise SchemaError(f"invalid type: {_json_kind(value)}, expected {want} at `{key}`")


def _stop_list(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    return tuple(s for s in stop if isinstance(s, str) and s)


def parse_generate(body: object) -> Job:
    if not isinstance(body, dict):
        raise SchemaError(f"invalid type: {_json_kind(body)}, expected struct GenerateRequest")
    text, ids = body.get("text"), body.get("input_ids")
    for key, types in (("stream", (bool,)), ("rid", (str, type(None))), ("sampling_params", (dict, list, type(None)))):
        if key in body:
            _schema_check(key, body[key], types)
    sp = body.get("sampling_params") or {}
    if isinstance(sp, list):
        raise ValueError("Batch requests (a list of sampling_params) are not supported by the simulator.")
    for key, value in sp.items():
        if key not in _SAMPLING:
            expected = ", ".join(f"`{k}`" for k in _SAMPLING)
            raise SchemaError(f"unknown field `{key}`, expected one of {expected}")
        _schema_check(key, value, _SAMPLING[key])
    if text is None and ids is None and body.get("input_embeds") is None:
        raise ValueError("Either text, input_ids or input_embeds should be provided.")
    if isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list)):
        raise ValueError("Batch requests (a list of prompts) are not supported by the simulator.")
    if text is not None:
        if not isinstance(text, str):
            raise SchemaError(f"invalid type: {_json_kind(text)}, expected a string at `text`")
        prompt, n_prompt = text, tokens.count(text)
    elif ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise SchemaError("invalid type: expected a sequence of integers at `input_ids`")
        prompt, n_prompt = "", len(ids)
    else:
        raise ValueError("input_embeds are not supported by the simulator.")
    max_new = sp.get("max_new_tokens", 128)
    if max_new is not None and max_new < 0:
        raise ValueError(f"max_new_tokens must be at least 0, got {max_new}.")
    if sp.get("n", 1) != 1:
        raise ValueError("n > 1 is not supported by the simulator.")
    temperature = float(sp.get("temperature", 1.0))
    if temperature < 0:
        raise ValueError(f"temperature must be non-negative, got {temperature}.")
    return Job(
        route="generate",
        prompt=prompt,
        prompt_tokens=n_prompt,
        max_new_tokens=max_new,
        stream=bool(body.get("stream", False)),
        rid=body.get("rid"),
        temperature=temperature,
        min_new_tokens=int(sp.get("min_new_tokens", 0)),
        ignore_eos=bool(sp.get("ignore_eos", False)),
        stop=_stop_list(sp.get("stop")),
        no_stop_trim=bool(sp.get("no_stop_trim", False)),
        sampling_seed=sp.get("sampling_seed"),
    )


def _need(body: dict, key: str, types: tuple, what: str) -> None:
    if key in body and body[key] is not None and not _typed(body[key], types):
        raise BadRequest(f"1 validation error:\n  {{'type': '{what}', 'loc': ('body', '{key}'), 'msg': 'Input should be a valid {what}', 'input': {body[key]!r}}}")


def _common_openai(body: object, route: str) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("1 validation error:\n  {'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from'}")
    for key, types, what in (
        ("model", (str,), "string"),
        ("stream", (bool,), "boolean"),
        ("temperature", _NUM, "number"),
        ("top_p", _NUM, "number"),
        ("max_tokens", (int,), "integer"),
        ("max_completion_tokens", (int,), "integer"),
        ("min_tokens", (int,), "integer"),
        ("n", (int,), "integer"),
        ("ignore_eos", (bool,), "boolean"),
        ("rid", (str,), "string"),
        ("seed", (int,), "integer"),
        ("stream_options", (dict,), "dictionary"),
        ("stop", (str, list), "string"),
        ("return_spec_tokens_details", (bool,), "boolean"),
        ("return_meta_info", (bool,), "boolean"),
    ):
        _need(body, key, types, what)
    for key in ("max_tokens", "max_completion_tokens"):
        if body.get(key) is not None and body[key] <= 0:
            raise BadRequest(f"{key} must be positive, got {body[key]}")
    if body.get("n", 1) not in (1, None):
        raise BadRequest("n > 1 is not supported by the simulator")
    if body.get("temperature") is not None and body["temperature"] < 0:
        raise BadRequest("temperature must be non-negative")
    so = body.get("stream_options") or {}
    stream = bool(body.get("stream", False))
    if body.get("return_meta_info") and stream:
        raise BadRequest("return_meta_info is not supported with stream=true")
    return dict(
        stream=stream,
        rid=body.get("rid"),
        model=body.get("model") or "default",
        ignore_eos=bool(body.get("ignore_eos", False)),
        min_new_tokens=int(body.get("min_tokens") or 0),
        stop=_stop_list(body.get("stop")),
        no_stop_trim=bool(body.get("no_stop_trim", False)),
        sampling_seed=body.get("seed"),
        include_usage=stream and bool(so.get("include_usage", False)),
        continuous_usage=stream and bool(so.get("continuous_usage_stats", False)),
        spec_details=bool(body.get("return_spec_tokens_details", False)),
    )


def parse_completions(body: object) -> Job:
    common = _common_openai(body, "completions")
    prompt = body.get("prompt")
    if prompt is None or prompt == "" or prompt == []:
        raise BadRequest("Prompt cannot be empty")
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            raise BadRequest("Batch prompts are not supported by the simulator")
    if isinstance(prompt, str):
        text, n_prompt = prompt, tokens.count(prompt)
    elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        text, n_prompt = "", len(prompt)
    else:
        raise BadRequest("1 validation error: prompt must be a string, a list of strings or of token ids")
    t = body.get("temperature")
    return Job(
        route="completions",
        prompt=text,
        prompt_tokens=n_prompt,
        max_new_tokens=body.get("max_tokens") if body.get("max_tokens") is not None else 16,
        temperature=1.0 if t is None else float(t),
        **common,
    )


def _content(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise BadRequest("1 validation error: message content must be a string or a list of parts")


def chat_prompt(messages: list[dict]) -> str:
    """The simulator's chat template; same as loadgen.request.GenRequest.as_prompt, so a client
    can predict prompt_tokens with loadgen.workloads.tokens.count."""
    parts = [f"{str(m.get('role', 'user')).capitalize()}: {_content(m.get('content'))}" for m in messages]
    return "\n".join(parts) + "\nAssistant:"


def parse_chat(body: object) -> Job:
    common = _common_openai(body, "chat")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("1 validation error: messages: Field required" if messages is None else "1 validation error: messages must be a list")
    if not messages:
        raise BadRequest("Messages cannot be empty.")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise BadRequest("1 validation error: every message needs a string role")
    text = chat_prompt(messages)
    max_new = body.get("max_completion_tokens")
    if max_new is None:
        max_new = body.get("max_tokens")
    t = body.get("temperature")
    return Job(
        route="chat",
        prompt=text,
        prompt_tokens=tokens.count(text),
        max_new_tokens=max_new,
        temperature=1.0 if t is None else float(t),
        return_meta_info=bool(body.get("return_meta_info", False)),
        **common,
    )


def check_context(job: Job, context_length: int) -> int:
    """The request's max new tokens after SGLang's context checks (ValueError if it cannot fit)."""
    if job.prompt_tokens >= context_length:
        raise ValueError(
            f"The input ({job.prompt_tokens} tokens) is longer than the model's context length ({context_length} tokens)."
        )
    if job.max_new_tokens is None:
        return context_length - job.prompt_tokens
    total = job.prompt_tokens + job.max_new_tokens
    if total > context_length:
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
            f"You requested a total of {total} tokens: {job.prompt_tokens} tokens from the input messages and "
            f"{job.max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
    return job.max_new_tokens
