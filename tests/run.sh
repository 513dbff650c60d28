#!/usr/bin/env bash
# The project's test command (README, and .ci/run calls exactly this).
# Installs what the tests need, then runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test]'
# Headless Chromium for the web UI and HTML report tests (Debian package).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "tests/run.sh: could not install chromium; browser tests will say so" >&2
fi
exec python -m pytest -q "$@"
