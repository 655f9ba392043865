#!/usr/bin/env bash
# aiacc-bench's command lines: a bad value is refused at once (exit 2) naming its flag, a --json
# file that could not be written is refused before any measuring, an empty size range is an
# error rather than a crash, and a rank that fails stops the others of its sweep at once instead
# of leaving them waiting at the store for their 120 s start-up timeout.
# usage: bench_cli_test.sh PATH/TO/aiacc-bench
set -uo pipefail

bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect STATUS TEXT ARGS...: aiacc-bench ARGS exits with STATUS and its stderr holds TEXT.
expect() {
  local want=$1 text=$2
  shift 2
  local rc=0
  timeout 60 "$bench" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [[ $rc != "$want" ]]; then
    fail "aiacc-bench $*: exit status $rc, expected $want; stderr: $(tail -3 "$work/err")"
  elif [[ -n $text ]] && ! grep -qF -- "$text" "$work/err"; then
    fail "aiacc-bench $*: stderr lacks '$text': $(tail -3 "$work/err")"
  fi
}

expect 2 "--ranks expects a whole number, got 'abc'" allreduce --ranks abc
expect 2 "--seconds takes a number above 0" allreduce --seconds -1
expect 2 "--streams takes 1 to 64, got -2" allreduce --streams -2
expect 2 "--chunk-bytes takes 1024" allreduce --chunk-bytes 0
expect 2 "--mpi takes tcp, shm, tcp,shm or none, got 'tpc'" allreduce --mpi tpc
expect 2 "--wire: unknown wire type 'fp8'" allreduce --wire fp8
expect 2 "leave no size to measure" allreduce --mpi none --min-bytes 4K --max-bytes 1K
expect 2 "--max-bytes takes 4 to" allreduce --mpi none --max-bytes 0
expect 2 "the folder $work/missing does not exist" allreduce --mpi none --json "$work/missing/out.json"
expect 2 "is a folder, not a file" allreduce --mpi none --json "$work"
expect 2 "aiacc-bench ps: --seconds expects a number, got 'abc'" ps --seconds abc
expect 2 "aiacc-bench ps: --json $work: is a folder" ps --json "$work"
expect 2 "--workers expects a whole number, got 'abc'" train config.yaml --workers abc
expect 2 "the folder $work/missing does not exist" train config.yaml --json "$work/missing/t.json"

# Rank 0 cannot bind its interface: the launcher names it and stops rank 1 at once.
start=$(date +%s)
expect 1 "rank 0 failed with exit status 1" allreduce --mpi none --hierarchical off --interface nosuch0 \
  --seconds 0.05 --repeat 1 --max-bytes 64
elapsed=$(($(date +%s) - start))
((elapsed < 30)) || fail "a failed rank took ${elapsed} s to end the sweep (the store's timeout is 120 s)"

# A good run writes its --json file.
expect 0 "" allreduce --mpi none --repeat 1 --max-bytes 4K --seconds 0.01 --json "$work/ok.json"
grep -q '"busbw_gbs"' "$work/ok.json" 2>/dev/null || fail "--json $work/ok.json was not written"

if ((failures > 0)); then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "aiacc-bench command lines: all checks passed"
