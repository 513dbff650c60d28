#!/usr/bin/env bash
# The GPU side of bench/gpu: build llama-server with CUDA, assemble the model, run `loadgen crossover`
# 1 -> 256 streams against a baseline and an n-gram speculative llama-server on one port, bring back results.
#
#   bash bench/gpu/device.sh STEP [ARG] [STEP [ARG] ...]      steps run in order, e.g.
#   bash bench/gpu/device.sh recv 4 model run wait 560 collect
#
# Steps (each idempotent: run it again and it does only what is left, printing what it found):
#   recv N       check and copy the carried folder .gpu/callN (made by bench/gpu/prepare.py) into $G;
#                the call holding the sources unpacks them and starts the build in the background
#   build        start the build if it is not running or done (recv does this)
#   model        join the model pieces, decompress, check the sha256
#   run          install the wheels, wait for the build, start `loadgen crossover` (and a /metrics
#                scraper) in the background, in their own session so they outlive this call
#   wait S       sleep until S seconds after this command started, or until the run (or build) ends
#   collect [D]  copy the results into D (default $OUT, else $G/collect): at most 8 files, and
#                print the cross-check table (bench/gpu/crosscheck.py)
#   try          start the baseline and the speculative server in turn with GPU_HARNESS_SERVER_EXTRA, send
#                each 8 concurrent copy-style chat requests: do they serve, and does the spec one draft?
#                (prints tok/s and drafts accepted/proposed; fails if either does not). Before a run, e.g.
#                GPU_HARNESS_SERVER_EXTRA=--backend-sampling bash bench/gpu/device.sh try
#   status       what is there and what is running
#   stop         end the run this harness started (its process group), keep what it wrote
#   again        set the last run aside ($G/run.N) so that the next `run` starts afresh (e.g. new settings)
#
# Everything lives in $G (GPU_HARNESS_DIR, default /tmp/gpu), which survives between device calls only
# while the machine stays warm (about 30 s idle). Knobs, all environment variables (defaults for one H200):
#   GPU_HARNESS_LLAMA_SERVER=path  use this binary, no build     GPU_HARNESS_MODEL=path  use this GGUF
#   GPU_HARNESS_CUDA=1|0           -DGGML_CUDA=ON or a CPU build; GPU_HARNESS_CUDA_ARCH (90: H100/H200)
#   GPU_HARNESS_CONFIGURE_ONLY=1   stop the build after cmake's configure (a check of the sources)
#   GPU_HARNESS_JOBS (nproc)       GPU_HARNESS_BUILD_WAIT (480: `run` waits for the build until this many
#                                  seconds after the command started, then fails so the call can end)
#   GPU_HARNESS_PORT (8080)  _NGL (99)  _CTX (524288)  _NP (256)  _THREADS (8)  _SERVER_EXTRA (none; e.g. --backend-sampling, untried with speculation)
#   GPU_HARNESS_SERVER_CPUS (0-7)  _CLIENT_CPUS (8-15): taskset lists; "" for no pinning
#   GPU_HARNESS_LADDER (1,4,16,64,256)  _WORKLOADS (predictable,freetext)  _MAX_TOKENS (uniform:32,64)
#   GPU_HARNESS_DURATION (10s)  _WARMUP (3s)  _MAX_RUN_TIME (780s)  _MAX_STAGE_TIME (100s): the budgets
#                                  the H200 run was made with (20 stages in 12 min; docs/real-servers.md)
#   GPU_HARNESS_LOADGEN_EXTRA      more `loadgen crossover` flags, e.g. "--processes 2"
#   GPU_HARNESS_HARD_LIMIT (MAX_RUN_TIME + 120 s): SIGTERM to loadgen after this (it then analyses the
#                                  finished stages), SIGKILL 60 s later
#   GPU_HARNESS_SCRAPE_INTERVAL (0.25)  GPU_HARNESS_PYTHON (python3)
set -u
set -o pipefail

T0=$(date +%s)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
G=${GPU_HARNESS_DIR:-/tmp/gpu}
CARRY=${GPU_HARNESS_CARRY:-$REPO/.gpu}
PY=${GPU_HARNESS_PYTHON:-python3}
mkdir -p "$G"

say() { echo "[gpu $(date +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
die() { say "FAILED: $*"; exit 1; }
tailf() { [ -f "$1" ] && { echo "----- tail -n ${2:-30} $1"; tail -n "${2:-30}" "$1" | cut -c1-400; echo "-----"; }; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }   # a pid file whose process still runs
planval() { sed -n "s/^$1=//p" "$G/in/plan1.txt" 2>/dev/null | head -1; }

# ----------------------------------------------------------------------------- recv / build

step_recv() {
  local n=${1:?recv needs the call number}
  local d="$CARRY/call$n"
  [ -d "$d" ] || die "recv $n: no $d here: name .gpu/call$n in this call's carry"
  (cd "$d" && sha256sum -c --quiet MANIFEST.sha256) || die "recv $n: $d does not match its MANIFEST.sha256 (transfer broke?)"
  mkdir -p "$G/in"
  if [ "$n" != 1 ] && [ ! -f "$G/in/plan1.txt" ]; then
    say "WARNING: $G holds no call 1: this machine is a fresh one (the last went back while idle)."
    say "WARNING: everything must be carried again, starting with call 1."
  fi
  local prepared; prepared=$(sed -n 's/^prepared=//p' "$d/plan.txt")
  if [ -f "$G/in/plan1.txt" ] && [ "$(planval prepared)" != "$prepared" ]; then
    die "recv $n: $d was prepared at $prepared but call 1 here at $(planval prepared): run prepare.py once, carry all calls"
  fi
  cp "$d/plan.txt" "$G/in/plan$n.txt"
  local piece; piece=$(sed -n 's/^piece=//p' "$d/plan.txt")
  cp "$d/$piece" "$G/in/$piece.tmp" && mv "$G/in/$piece.tmp" "$G/in/$piece"
  say "recv $n: $piece ($(stat -c %s "$G/in/$piece") bytes) checked and copied"
  if [ -d "$d/wheels" ]; then
    mkdir -p "$G/wheels" && cp "$d"/wheels/*.whl "$G/wheels/" && say "recv $n: $(ls "$d"/wheels | wc -l) wheels"
  fi
  if [ -f "$d/llama-src.tar.xz" ]; then
    if [ ! -f "$G/src/llama.cpp/CMakeLists.txt" ]; then
      rm -rf "$G/src.tmp" && mkdir -p "$G/src.tmp"
      "$PY" -c 'import sys, tarfile; t = tarfile.open(sys.argv[1]); t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' \
        "$d/llama-src.tar.xz" "$G/src.tmp" || die "recv $n: could not unpack llama-src.tar.xz"
      rm -rf "$G/src" && mv "$G/src.tmp" "$G/src"
      say "recv $n: sources unpacked into $G/src/llama.cpp"
    fi
    step_build
  fi
  step_status_short
}

server_bin() {
  if [ -n "${GPU_HARNESS_LLAMA_SERVER:-}" ]; then echo "$GPU_HARNESS_LLAMA_SERVER"; else echo "$G/build/bin/llama-server"; fi
}

step_build() {
  if [ -n "${GPU_HARNESS_LLAMA_SERVER:-}" ] && [ -z "${GPU_HARNESS_CONFIGURE_ONLY:-}" ]; then
    say "build: skipped, GPU_HARNESS_LLAMA_SERVER=$GPU_HARNESS_LLAMA_SERVER"; return 0
  fi
  if alive "$G/build.pid"; then say "build: already running (pid $(cat "$G/build.pid"), $(( $(date +%s) - $(stat -c %Y "$G/build.pid") )) s)"; return 0; fi
  if [ -f "$G/build.rc" ] && [ "$(cat "$G/build.rc")" = 0 ]; then say "build: already done"; return 0; fi
  [ -f "$G/src/llama.cpp/CMakeLists.txt" ] || die "build: no sources in $G/src (recv 1 first)"
  local cuda=${GPU_HARNESS_CUDA:-1} jobs=${GPU_HARNESS_JOBS:-$(nproc)} gen="" pybin
  # cmake and ninja may be the Python packages of the interpreter's environment, nvcc under /usr/local/cuda
  pybin=$(dirname "$(command -v "$PY")")
  export PATH="$PATH:$pybin"
  if [ "$cuda" = 1 ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
  command -v cmake >/dev/null || die "build: no cmake on PATH (nor beside $PY)"
  if [ "$cuda" = 1 ]; then
    command -v nvcc >/dev/null || die "build: CUDA build asked (GPU_HARNESS_CUDA=1) but no nvcc on PATH or in /usr/local/cuda/bin"
    say "build: $(nvcc --version | tail -n 2 | head -n 1); $(command -v nvidia-smi >/dev/null && nvidia-smi -L | head -n 2 | tr '\n' ' ')"
  fi
  command -v ninja >/dev/null && gen="-G Ninja"
  local flags="-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF"
  # the commit the sdist vendors (prepare.py read it from the sdist's git metadata, which is not carried)
  local commit; commit=$(planval llama_commit)
  [ -n "$commit" ] && [ "$commit" != unknown ] && flags="$flags -DLLAMA_BUILD_COMMIT=$commit -DLLAMA_BUILD_NUMBER=1"
  if [ "$cuda" = 1 ]; then flags="$flags -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${GPU_HARNESS_CUDA_ARCH:-90}"; else flags="$flags -DGGML_CUDA=OFF"; fi
  rm -f "$G/build.rc"
  cat > "$G/build.sh" <<EOF
#!/usr/bin/env bash
set -o pipefail
export PATH="$PATH"
echo "===== configure \$(date +%T) with \$(cmake --version | head -n 1)"
cmake -S "$G/src/llama.cpp" -B "$G/build" $gen $flags || { echo \$? > "$G/build.rc"; exit 1; }
if [ -n "${GPU_HARNESS_CONFIGURE_ONLY:-}" ]; then
  cmake --build "$G/build" --target llama-ui-assets || { echo \$? > "$G/build.rc"; exit 1; }
  echo "===== configure-only: done \$(date +%T)"; echo 0 > "$G/build.rc"; exit 0
fi
echo "===== build \$(date +%T)"
cmake --build "$G/build" --target llama-server -j $jobs || { echo \$? > "$G/build.rc"; exit 1; }
"$G/build/bin/llama-server" --version || { echo 99 > "$G/build.rc"; exit 1; }
echo "===== done \$(date +%T)"
echo 0 > "$G/build.rc"
EOF
  setsid nohup bash "$G/build.sh" > "$G/build.log" 2>&1 < /dev/null &
  echo $! > "$G/build.pid"
  say "build: started in the background (pid $!, CUDA=$cuda, -j $jobs${gen:+, ninja}); log $G/build.log"
}

build_state() {  # done | running | failed | none (a build started here counts, also beside GPU_HARNESS_LLAMA_SERVER)
  if [ -f "$G/build.rc" ]; then [ "$(cat "$G/build.rc")" = 0 ] && echo done || echo failed; return; fi
  if alive "$G/build.pid"; then echo running; return; fi
  if [ -f "$G/build.pid" ]; then echo failed; return; fi
  [ -n "${GPU_HARNESS_LLAMA_SERVER:-}" ] && echo done || echo none
}

wait_build() {  # until GPU_HARNESS_BUILD_WAIT s after this command started, so that the call ends in time
  local limit=${GPU_HARNESS_BUILD_WAIT:-480} last=0
  while [ "$(build_state)" = running ]; do
    if [ $(( $(date +%s) - T0 )) -ge "$limit" ]; then die "build still running $limit s after this command started: call again with 'run wait 560 collect'; tail: $(tail -n 3 "$G/build.log")"; fi
    if [ $(( $(date +%s) - last )) -ge 30 ]; then
      last=$(date +%s); say "waiting for the build: $(grep -o '^\[[0-9]*/[0-9]*\]' "$G/build.log" | tail -1) $(tail -n 1 "$G/build.log" | cut -c1-120)"
    fi
    sleep 3
  done
  case $(build_state) in
    done) ;;
    none) die "no build: recv 1 (the call with the sources) has not run on this machine" ;;
    *) tailf "$G/build.log" 40; die "build failed (rc $(cat "$G/build.rc" 2>/dev/null || echo '?'))" ;;
  esac
  [ -x "$(server_bin)" ] || die "no executable $(server_bin)"
}

# ----------------------------------------------------------------------------- model

model_path() {
  if [ -n "${GPU_HARNESS_MODEL:-}" ]; then echo "$GPU_HARNESS_MODEL"; else echo "$G/model/$(planval model_name)"; fi
}

step_model() {
  if [ -n "${GPU_HARNESS_MODEL:-}" ]; then
    [ -f "$GPU_HARNESS_MODEL" ] || die "model: GPU_HARNESS_MODEL=$GPU_HARNESS_MODEL is not a file"
    say "model: using $GPU_HARNESS_MODEL"; return 0
  fi
  [ -f "$G/in/plan1.txt" ] || die "model: no call 1 on this machine (recv 1 first)"
  local calls sha m; calls=$(planval calls); sha=$(planval model_sha256); m=$(model_path)
  if [ -f "$m" ] && [ -f "$m.ok" ]; then say "model: $m already checked"; return 0; fi
  local missing="" k
  for k in $(seq 1 "$calls"); do [ -f "$G/in/model.gguf.xz.$(printf %02d "$k")" ] || missing="$missing $k"; done
  [ -z "$missing" ] || die "model: pieces of calls$missing not received (recv them first)"
  mkdir -p "$G/model"
  "$PY" - "$G/in" "$calls" "$m.tmp" <<'EOF' || die "model: decompression failed"
import lzma, sys
src, calls, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
d = lzma.LZMADecompressor()
with open(dst, "wb") as out:
    for k in range(1, calls + 1):
        with open(f"{src}/model.gguf.xz.{k:02d}", "rb") as f:
            while block := f.read(1 << 22):
                out.write(d.decompress(block))
if not d.eof:
    sys.exit("model: the xz stream ends early (a piece is short)")
EOF
  local got; got=$(sha256sum "$m.tmp" | cut -d' ' -f1)
  [ "$got" = "$sha" ] || die "model: sha256 $got, expected $sha"
  mv "$m.tmp" "$m" && touch "$m.ok"
  say "model: $m ($(stat -c %s "$m") bytes, sha256 ok)"
}

# ----------------------------------------------------------------------------- run

port_open() { "$PY" -c 'import socket, sys; s = socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))) != 0)' "$1"; }

pin() { [ -n "$1" ] && command -v taskset >/dev/null && echo "taskset -c $1 "; }

SPEC_ARGS="--spec-type ngram-simple --spec-ngram-simple-size-n 6 --spec-ngram-simple-size-m 16"

server_args() {  # MODEL PORT: the flags both servers share
  echo "-m $1 --host 127.0.0.1 --port $2 -ngl ${GPU_HARNESS_NGL:-99} -c ${GPU_HARNESS_CTX:-524288} \
-np ${GPU_HARNESS_NP:-256} -t ${GPU_HARNESS_THREADS:-8} --no-webui --metrics --no-jinja --chat-template gemma \
${GPU_HARNESS_SERVER_EXTRA-}"
}

step_try() {
  [ -f "$(model_path)" ] || step_model
  wait_build
  local bin model port sp; bin=$(server_bin); model=$(model_path); port=${GPU_HARNESS_PORT:-8080}
  sp=$(pin "${GPU_HARNESS_SERVER_CPUS-0-7}")
  port_open "$port" && die "try: something already listens on 127.0.0.1:$port"
  local kind bad=""
  for kind in baseline spec; do
    local extra=""; [ "$kind" = spec ] && extra=$SPEC_ARGS
    # shellcheck disable=SC2086
    setsid $sp"$bin" $(server_args "$model" "$port") $extra > "$G/try-$kind.log" 2>&1 < /dev/null &
    local pid=$! t=0
    until "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' \
        "http://127.0.0.1:$port" 2>/dev/null; do
      t=$((t + 1)); [ $t -gt 120 ] || ! kill -0 $pid 2>/dev/null && break; sleep 1
    done
    "$PY" - "http://127.0.0.1:$port" "$kind" <<'PYEOF' || bad="$bad $kind"
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, kind = sys.argv[1], sys.argv[2]
text = "The quick brown fox jumps over the lazy dog. " * 12
def one(i):
    body = {"model": "gemma", "max_tokens": 64, "temperature": 0, "messages": [
        {"role": "user", "content": f"Copy this text exactly, {i}: {text}"}]}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())
t0 = time.monotonic()
with ThreadPoolExecutor(8) as ex:
    got = list(ex.map(one, range(8)))
dt = time.monotonic() - t0
toks = sum(g["usage"]["completion_tokens"] for g in got)
tim = [g.get("timings") or {} for g in got]
drafts = sum(t.get("draft_n", 0) for t in tim); acc = sum(t.get("draft_n_accepted", 0) for t in tim)
print(f"try {kind}: 8 requests, {toks} tokens in {dt:.2f} s ({toks / dt:.0f} tok/s); drafts accepted {acc} of {drafts}")
sys.exit(0 if toks > 0 and (kind == "baseline" or drafts > 0) else 1)
PYEOF
    kill -TERM -- "-$pid" 2>/dev/null; wait $pid 2>/dev/null
    for _ in $(seq 30); do port_open "$port" || break; sleep 1; done
    case " $bad " in *" $kind "*) tailf "$G/try-$kind.log" 20 ;; esac
  done
  [ -z "$bad" ] || die "try:$bad did not serve (or did not draft) with '${GPU_HARNESS_SERVER_EXTRA-}'"
  say "try: both served with '${GPU_HARNESS_SERVER_EXTRA-}'"
}

step_run() {
  mkdir -p "$G/run"
  if alive "$G/run/run.pid"; then say "run: already running (pid $(cat "$G/run/run.pid"))"; return 0; fi
  if [ -f "$G/run/rc" ]; then say "run: already finished (rc $(cat "$G/run/rc")); delete $G/run to run again"; return 0; fi
  # wheels loadgen needs and the GPU image lacks (prepare.py chose them)
  if ls "$G"/wheels/*.whl >/dev/null 2>&1 && [ ! -f "$G/site/.ok" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$G/site" "$G"/wheels/*.whl \
      || die "run: pip could not install the wheels from $G/wheels"
    touch "$G/site/.ok"; say "run: wheels installed into $G/site"
  fi
  # the run reads its own copy of the checkout: each device call re-sends the working tree, and a module
  # imported late (the analysis, the report) must be the one the run started with
  rm -rf "$G/repo" && mkdir -p "$G/repo" && (cd "$REPO" && tar --exclude=./.gpu --exclude=./.git -cf - .) | tar -xf - -C "$G/repo" \
    || die "run: could not copy the checkout to $G/repo"
  local REPO="$G/repo"
  export PYTHONPATH="$REPO:$G/site${PYTHONPATH:+:$PYTHONPATH}"
  "$PY" -c 'import orjson, hdrh.histogram, tomli, aiohttp, numpy, matplotlib, loadgen.cli.crossover, loadgen.report.html' \
    || die "run: loadgen does not import here (PYTHONPATH=$PYTHONPATH)"
  [ -f "$(model_path)" ] || step_model
  wait_build
  local bin model port url
  bin=$(server_bin); model=$(model_path); port=${GPU_HARNESS_PORT:-8080}; url="http://127.0.0.1:$port"
  port_open "$port" && die "run: something already listens on 127.0.0.1:$port (set GPU_HARNESS_PORT)"
  "$bin" --version > "$G/run/server-version.txt" 2>&1 || { cat "$G/run/server-version.txt"; die "run: $bin --version failed"; }
  local sp cp; sp=$(pin "${GPU_HARNESS_SERVER_CPUS-0-7}"); cp=$(pin "${GPU_HARNESS_CLIENT_CPUS-8-15}")
  local base spec
  base="${sp}$bin $(server_args "$model" "$port")"
  spec="$base $SPEC_ARGS"
  local run_time=${GPU_HARNESS_MAX_RUN_TIME:-780s} stage_time=${GPU_HARNESS_MAX_STAGE_TIME:-100s}
  local args=(crossover --protocol chat --model gemma --ladder "${GPU_HARNESS_LADDER:-1,4,16,64,256}"
    --workload "${GPU_HARNESS_WORKLOADS:-predictable,freetext}" --max-tokens "${GPU_HARNESS_MAX_TOKENS:-uniform:32,64}"
    --duration "${GPU_HARNESS_DURATION:-10s}" --warmup "${GPU_HARNESS_WARMUP:-3s}" --seed 1 --out "$G/run/out"
    --url "$url" --start "baseline=$base" --start "spec=$spec"   # one port: loadgen starts each server in turn
    --max-run-time "$run_time" --max-stage-time "$stage_time")
  # shellcheck disable=SC2206
  [ -n "${GPU_HARNESS_LOADGEN_EXTRA:-}" ] && args+=(${GPU_HARNESS_LOADGEN_EXTRA})
  local secs=${run_time%s}; secs=${secs%.*}
  local hard=${GPU_HARNESS_HARD_LIMIT:-$(( secs + 120 ))}
  {
    echo "#!/usr/bin/env bash"
    echo "cd $(printf %q "$REPO")"
    echo "ulimit -n 65536 2>/dev/null || ulimit -n 4096 2>/dev/null"  # 256 streams, their retries, the scraper
    echo "export PYTHONPATH=$(printf %q "$PYTHONPATH") PYTHONUNBUFFERED=1"
    echo "${cp}$PY $(printf %q "$REPO/bench/gpu/scrape.py") $url $(printf %q "$G/run/scrape.jsonl") ${GPU_HARNESS_SCRAPE_INTERVAL:-0.25} &"
    echo "scraper=\$!"
    echo "date +%s > $(printf %q "$G/run/started")"
    printf '%s' "${cp}timeout -s TERM -k 60 $hard $PY -m loadgen"; printf ' %q' "${args[@]}"; echo
    echo "rc=\$?"
    echo "kill \$scraper; wait \$scraper"
    echo "sleep 2; $PY -c 'import socket, sys; s = socket.socket(); s.settimeout(1); sys.exit(s.connect_ex((\"127.0.0.1\", $port)) == 0)' || echo 'WARNING: a server still listens on $url after loadgen ended'"
    echo "echo \$rc > $(printf %q "$G/run/rc")"
  } > "$G/run/launch.sh"
  rm -rf "$G/run/out" "$G/run/scrape.jsonl"
  setsid nohup bash "$G/run/launch.sh" > "$G/run/loadgen.log" 2>&1 < /dev/null &
  echo $! > "$G/run/run.pid"
  say "run: started (pid $!, hard limit $hard s); the command is in $G/run/launch.sh, output in $G/run/loadgen.log"
  sed -n '/-m loadgen/p' "$G/run/launch.sh" | cut -c1-2000
  sleep 5
  alive "$G/run/run.pid" || { tailf "$G/run/loadgen.log" 40; die "run: loadgen ended within 5 s (rc $(cat "$G/run/rc" 2>/dev/null))"; }
}

progress() {  # one line: stages begun, the last stage line and the live progress line
  local log="$G/run/loadgen.log"
  [ -f "$log" ] || { echo "no run log"; return; }
  local stage last
  stage=$(tr '\r' '\n' < "$log" | grep -E '^loadgen: \[[0-9]+/[0-9]+\]' | tail -1 | cut -c1-110)
  last=$(tr '\r' '\n' < "$log" | grep -v '^\s*$' | tail -1 | cut -c1-150)
  echo "${stage:-no stage yet} | $last"
}

step_wait() {
  local until=${1:?wait needs seconds}
  local last=0 told=""
  while [ $(( $(date +%s) - T0 )) -lt "$until" ]; do
    if [ -z "$told" ] && grep -q 'stages, estimated' "$G/run/loadgen.log" 2>/dev/null; then
      told=1; say "wait: $(grep -m1 'stages, estimated' "$G/run/loadgen.log" | cut -c1-300)"
    fi
    if [ -f "$G/run/rc" ]; then say "wait: the run ended (rc $(cat "$G/run/rc"))"; return 0; fi
    if [ ! -f "$G/run/run.pid" ] && [ "$(build_state)" != running ]; then say "wait: nothing running"; return 0; fi
    if [ -f "$G/run/run.pid" ] && ! alive "$G/run/run.pid"; then say "wait: the run's process is gone without an exit code"; return 0; fi
    if [ $(( $(date +%s) - last )) -ge 30 ]; then
      last=$(date +%s)
      if [ -f "$G/run/run.pid" ]; then say "wait: run $(( $(date +%s) - $(cat "$G/run/started" 2>/dev/null || date +%s) )) s: $(progress)"
      else say "wait: build: $(tail -n 1 "$G/build.log" | cut -c1-120)"; fi
    fi
    sleep 2
  done
  say "wait: $until s reached; still running: $(progress)"
}

# ----------------------------------------------------------------------------- collect

step_collect() {
  local dest=${1:-${OUT:-$G/collect}}
  mkdir -p "$dest"
  local o="$G/run/out" n=0
  step_status_short > "$G/status.txt" 2>&1
  for f in run.json crossover.json report.html; do
    if [ -f "$o/$f" ]; then
      if [ "$(stat -c %s "$o/$f")" -gt 15000000 ]; then gzip -c "$o/$f" > "$dest/$f.gz"; else cp "$o/$f" "$dest/$f"; fi
      n=$((n + 1))
    fi
  done
  [ -f "$G/run/loadgen.log" ] && tr '\r' '\n' < "$G/run/loadgen.log" > "$dest/loadgen.log" && n=$((n + 1))
  [ -f "$G/run/scrape.jsonl" ] && gzip -c "$G/run/scrape.jsonl" > "$dest/scrape.jsonl.gz" && n=$((n + 1))
  # the rest in two tarballs: logs (servers, build, harness) and whatever else loadgen wrote (plots)
  local logs=() f
  mkdir -p "$G/collect-logs" && rm -f "$G/collect-logs"/*
  for f in "$o"/*.server.log "$G/build.log"; do  # a 256-slot server logs every request: keep head and tail
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt 40000000 ]; then
      { head -n 3000 "$f"; echo "..... $(wc -l < "$f") lines in all, cut here by device.sh collect ....."; tail -n 20000 "$f"; } > "$G/collect-logs/$(basename "$f")"
    else cp "$f" "$G/collect-logs/"; fi
  done
  for f in "$G"/collect-logs/* "$G/status.txt" "$G/run/launch.sh" "$G/run/server-version.txt"; do
    [ -f "$f" ] && logs+=("$f")
  done
  [ ${#logs[@]} -gt 0 ] && tar -czf "$dest/logs.tar.gz" --transform 's,.*/,,' "${logs[@]}" 2>/dev/null && n=$((n + 1))
  if [ -d "$o" ]; then
    local rest; rest=$(cd "$o" && find . -type f ! -name run.json ! -name crossover.json ! -name report.html ! -name '*.server.log' | sort)
    [ -n "$rest" ] && (cd "$o" && echo "$rest" | tar -czf "$dest/extras.tar.gz" -T -) && n=$((n + 1))
  fi
  if [ -f "$o/run.json" ]; then
    "$PY" "$REPO/bench/gpu/crosscheck.py" "$G/run" > "$dest/crosscheck.txt" 2>&1; cat "$dest/crosscheck.txt"; n=$((n + 1))
  else
    say "collect: no run.json yet"; tailf "$G/run/loadgen.log" 25
  fi
  say "collect: $n files in $dest:"; ls -la "$dest" | tail -n +2
  local big; big=$(find "$dest" -type f -size +16M)
  [ -z "$big" ] || say "WARNING: over 16 MiB, will not come back: $big"
}

# ----------------------------------------------------------------------------- status / stop

step_status_short() {
  local k calls; calls=$(planval calls); local got=""
  for k in $(seq 1 "${calls:-0}"); do [ -f "$G/in/model.gguf.xz.$(printf %02d "$k")" ] && got="$got $k"; done
  say "status: pieces received:${got:- none} of ${calls:-?}; build $(build_state)$( [ "$(build_state)" = running ] && echo ": $(grep -o '^\[[0-9]*/[0-9]*\]' "$G/build.log" | tail -1)"); model $( [ -f "$(model_path).ok" ] || [ -n "${GPU_HARNESS_MODEL:-}" ] && echo ready || echo 'not yet'); run $( [ -f "$G/run/rc" ] && echo "ended rc $(cat "$G/run/rc")" || { alive "$G/run/run.pid" && echo running || echo 'not started'; })"
  [ "$(build_state)" = failed ] && tailf "$G/build.log" 30
  return 0
}

step_status() {
  step_status_short
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader
  [ -f "$G/run/run.pid" ] && say "run: $(progress)"
  tailf "$G/build.log" 5; tailf "$G/run/loadgen.log" 15
  return 0
}

step_again() {  # keep the last run as run.1, run.2, ... so that `run` starts a new one
  alive "$G/run/run.pid" && die "again: a run is still going (stop it first)"
  [ -d "$G/run" ] || { say "again: no earlier run"; return 0; }
  local k=1; while [ -e "$G/run.$k" ]; do k=$((k + 1)); done
  mv "$G/run" "$G/run.$k" && say "again: the last run is now $G/run.$k"
}

step_stop() {
  if alive "$G/run/run.pid"; then kill -TERM -- "-$(cat "$G/run/run.pid")"; say "stop: sent SIGTERM to the run's process group"; else say "stop: no run"; fi
}

# ----------------------------------------------------------------------------- main

[ $# -gt 0 ] || { sed -n '2,36p' "$0"; exit 2; }
is_step() { case $1 in recv|build|model|try|run|wait|collect|status|stop|again) return 0 ;; *) return 1 ;; esac; }
failed=""
while [ $# -gt 0 ]; do
  s=$1; shift
  arg=""
  case $s in
    recv|wait) arg=${1:-}; [ -n "$arg" ] || die "$s needs a number"; shift ;;
    collect) if [ $# -gt 0 ] && ! is_step "$1"; then arg=$1; shift; fi ;;
    build|model|try|run|status|stop|again) ;;
    *) die "unknown step '$s' (recv N | build | model | try | run | wait S | collect [DIR] | status | stop | again)" ;;
  esac
  if [ -n "$failed" ] && [ "$s" != collect ] && [ "$s" != status ]; then say "skipped: $s (after the failed step '$failed')"; continue; fi
  # each step in a subshell: a failing one ends only itself, and collect still brings the logs back
  ( "step_$s" $arg ) || failed=$s
done
[ -z "$failed" ] || { say "FAILED step: $failed"; exit 1; }
