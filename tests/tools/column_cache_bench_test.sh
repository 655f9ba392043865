#!/usr/bin/env bash
# tools/bench/column_cache_bench.sh: --help and bad arguments, then a real run on a small
# Criteo-style file (300k lines) with 2 workers: three runs (parsed, cache built, cache mapped) with their
# loads, memory and samples/s, the mapped run's load far below the parse's, and nothing left
# behind in /tmp.
# usage: column_cache_bench_test.sh PATH/TO/aiacc-train PATH/TO/column_cache_bench.sh
set -uo pipefail

export AIACC_TRAIN=$1
bench=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

"$bench" --help >"$work/out" 2>&1 || fail "--help exited $?"
grep -q "usage: tools/bench/column_cache_bench.sh CONFIG" "$work/out" || fail "--help prints no usage: $(head -3 "$work/out")"
rc=0
"$bench" >"$work/out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "no arguments: exit $rc, expected 2"
rc=0
"$bench" "$work/none.yaml" >"$work/out" 2>&1 || rc=$?
[[ $rc == 2 ]] || fail "a missing config: exit $rc, expected 2"
grep -q "none.yaml: no such file" "$work/out" || fail "a missing config is not named: $(cat "$work/out")"

# 300k lines: a parse long enough (a tenth of a second or more) for its log's two decimals.
awk 'BEGIN { for (i = 0; i < 300000; i++)
  printf "%d\t%d\t\t%d\t%08x\t%08x\n", (i % 3 == 0), i % 13, i * 7 % 100, i % 37, i % 11 }' >"$work/train.tsv"
head -200 "$work/train.tsv" >"$work/test.tsv"
cat >"$work/job.yaml" <<YAML
job: {name: bench, seed: 3}
model: {type: wide_deep, wide_deep: {embedding_dim: 4, hidden: [8]}}
data:
  batch_size: 16
  train: {type: criteo_tsv, criteo_tsv: {train_file: $work/train.tsv, num_integer: 3, num_categorical: 2}}
  test: {type: criteo_tsv, criteo_tsv: {test_file: $work/test.tsv, num_integer: 3, num_categorical: 2}}
train: {epochs: 100}
cluster: {workers: 2}
YAML
before=$(ls -d /tmp/aiacc-column-cache-bench-* 2>/dev/null | wc -l)
rc=0
"$bench" "$work/job.yaml" --steps 6000 >"$work/out" 2>&1 || rc=$?
[[ $rc == 0 ]] || fail "the bench exited $rc: $(tail -20 "$work/out")"
for row in "parsed in every worker" "cache built (first start)" "cache mapped (later starts)"; do
  line=$(grep -F "$row" "$work/out")
  [[ -n $line ]] || { fail "no row '$row': $(cat "$work/out")"; continue; }
  # load (s), Pss MB, anonymous MB, samples/s: numbers, memory above 0.
  read -r load pss _ anon _ rate <<<"${line#"$row"}"
  [[ $load =~ ^[0-9.]+$ && $rate =~ ^[0-9.]+$ ]] || fail "row '$row' lacks figures: $line"
  [[ $pss =~ ^[0-9]+$ && $pss -gt 0 && $anon =~ ^[0-9]+$ && $anon -gt 0 ]] || fail "row '$row' lacks memory: $line"
done
ratio=$(sed -n 's/.*load \([0-9.]*\)x$/\1/p' "$work/out")
awk -v r="${ratio:-9}" 'BEGIN { exit !(r < 0.5) }' || fail "the mapped run's load is not below the parse's: $(cat "$work/out")"
after=$(ls -d /tmp/aiacc-column-cache-bench-* 2>/dev/null | wc -l)
[[ $after == "$before" ]] || fail "the bench left its folder in /tmp"

if ((failures > 0)); then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "column_cache_bench: all checks passed"
