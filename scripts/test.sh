#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, and runs every test (unit, dist, e2e; gpu
# tests report SKIP where no GPU is present). Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
meson test -C build --print-errorlogs --num-processes 2 "$@"
