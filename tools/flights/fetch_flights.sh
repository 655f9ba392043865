#!/usr/bin/env bash
# Fetches the flights data (npm package vega-datasets: flights-3m.parquet) and converts it to
# Criteo-format TSV for the criteo_tsv dataset: OUT_DIR/train.tsv (~90%) and OUT_DIR/test.tsv.
#
#   tools/flights/fetch_flights.sh [OUT_DIR]      default OUT_DIR: <repo>/data-cache/flights
#
# Node packages go to $FLIGHTS_NPM_DIR (default <repo>/data-cache/flights-npm, gitignored), never
# into the source tree. Idempotent: npm runs only when the pinned lock file changed, and the
# conversion only when an output is missing (delete OUT_DIR to redo it). Needs node >= 18 and
# npm with access to the npm registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:-$repo/data-cache/flights}"
npm_dir="${FLIGHTS_NPM_DIR:-$repo/data-cache/flights-npm}"

if [[ -s "$out_dir/train.tsv" && -s "$out_dir/test.tsv" ]]; then
  echo "flights: $out_dir/train.tsv and test.tsv exist; nothing to do (delete them to convert again)"
  exit 0
fi
command -v node >/dev/null || { echo "flights: node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "flights: npm is not installed" >&2; exit 1; }

# Install the pinned packages (package-lock.json) unless this exact lock is installed already.
mkdir -p "$npm_dir"
if ! cmp -s "$here/package-lock.json" "$npm_dir/.installed-lock.json" || [[ ! -d "$npm_dir/node_modules" ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
  echo "flights: npm ci in $npm_dir"
  (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/package-lock.json" "$npm_dir/.installed-lock.json"
fi
# ES modules resolve packages next to the importing script, so the converter runs from npm_dir.
cp "$here/flights_to_criteo.mjs" "$npm_dir/"
node "$npm_dir/flights_to_criteo.mjs" "$npm_dir/node_modules/vega-datasets/data/flights-3m.parquet" "$out_dir"
