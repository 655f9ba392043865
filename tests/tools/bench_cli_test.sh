#!/usr/bin/env bash
# aiacc-bench's and aiacc-bench-net's command lines: --help prints a usage text (exit 0); a bad
# value is refused at once (exit 2) naming its flag, before any process starts; a --json file
# that could not be written is refused before any measuring; an empty size range is an error
# rather than a crash; a rank that fails stops the others of its sweep at once instead of
# leaving them waiting at the store for their 120 s start-up timeout; a frozen rank ends the
# sweep after --timeout-s with the error naming the rank waited for; sizes that would not fit in
# this machine's memory are refused naming their flags; aiacc-bench train checks CONFIG with
# aiacc-train --dry-run before any run and puts a failed run's error lines on stderr.
# usage: bench_cli_test.sh PATH/TO/aiacc-bench [PATH/TO/aiacc-bench-net]
#   (aiacc-bench-net: by default the one next to aiacc-bench)
set -uo pipefail

bench=$1
net_bench=${2:-$(dirname "$bench")/aiacc-bench-net}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run_expect PROGRAM STATUS TEXT ARGS...: PROGRAM ARGS exits with STATUS and its stderr holds TEXT.
run_expect() {
  local program=$1 want=$2 text=$3
  shift 3
  local rc=0
  timeout 60 "$program" "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [[ $rc != "$want" ]]; then
    fail "$(basename "$program") $*: exit status $rc, expected $want; stderr: $(tail -3 "$work/err")"
  elif [[ -n $text ]] && ! grep -qF -- "$text" "$work/err"; then
    fail "$(basename "$program") $*: stderr lacks '$text': $(tail -3 "$work/err")"
  fi
}

# expect STATUS TEXT ARGS...: aiacc-bench ARGS exits with STATUS and its stderr holds TEXT.
expect() { run_expect "$bench" "$@"; }
# expect_net STATUS TEXT ARGS...: the same for aiacc-bench-net.
expect_net() { run_expect "$net_bench" "$@"; }

# expect_usage PROGRAM "FLAG..." ARGS...: PROGRAM ARGS exits 0 with a usage text on stdout that
# names every FLAG.
expect_usage() {
  local program=$1 flags=$2
  shift 2
  run_expect "$program" 0 "" "$@"
  local flag
  for flag in $flags; do
    grep -qF -- "$flag" "$work/out" || fail "$(basename "$program") $*: the usage text lacks $flag"
  done
}

[[ -x $net_bench ]] || fail "no aiacc-bench-net at $net_bench"

# Usage texts.
expect_usage "$bench" "allreduce ps train accumulate" --help
expect_usage "$bench" "allreduce ps train accumulate" -h
expect 2 "usage: aiacc-bench" # no subcommand
expect 2 "unknown subcommand 'bogus'" bogus
expect_usage "$bench" "--ranks --streams --max-bytes --timeout-s --mpi --json" allreduce --help
expect_usage "$bench" "--dims --ids --modes --optimizer --table-rows --json" ps --help
expect_usage "$bench" "--dims --ids" ps -h
expect_usage "$bench" "--workers --steps --set --json --ceiling" train --help
expect_usage "$net_bench" "--sizes --max-size --streams --modes --reps --json" --help

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
expect 2 "--timeout-s takes a number above 0" allreduce --timeout-s 0
# Sizes: a T suffix as --help says (up to 1T); the user's values in messages; memory checked first.
expect 2 "--max-bytes takes 4 to 1099511627776 bytes, got 2T" allreduce --mpi none --max-bytes 2T
expect 2 "--min-bytes 6 and --max-bytes 6 leave no size to measure" allreduce --mpi none --min-bytes 6 --max-bytes 6
expect 2 "--min-bytes takes a whole number of bytes, got 1.1K" allreduce --mpi none --min-bytes 1.1K
expect 2 "--min-bytes 1T to --max-bytes 1T with --ranks 64 would need at least 70368744177664 bytes of memory" \
  allreduce --mpi none --ranks 64 --min-bytes 1T --max-bytes 1T
expect 2 "--min-bytes 4 to --max-bytes 1T with --ranks 64 would need at least" allreduce --mpi none --ranks 64 --max-bytes 1T
expect 0 "" allreduce --help
grep -qF "rounded up to whole floats" "$work/out" || fail "aiacc-bench allreduce --help does not say how sizes round"
expect 2 "unknown option '--bogus'" allreduce --bogus

# aiacc-bench ps: refused before any shard or worker starts.
expect 2 "--dims takes 1 to 1048576, got 0" ps --dims 0
expect 2 "--dims takes 1 to 1048576, got -3" ps --dims 8,-3
expect 2 "--dims takes a comma-separated list" ps --dims ,
expect 2 "--optimizer takes sgd, adam, adamw, adagrad, ftrl, got 'bogus'" ps --optimizer bogus
expect 2 "--ids takes 1 to 2147483647, got -5" ps --ids -5
expect 2 "--ids takes 1 to 2147483647, got 0" ps --ids 0
expect 2 "--modes takes a comma-separated list" ps --modes ,
expect 2 "--modes takes pull, push and step, got 'bogus'" ps --modes pull,bogus
expect 2 "--ids 2000000000 with --dims 128 and --workers 2 would need at least" ps --ids 2000000000
expect 2 "--table-rows 1000000000000 would need at least" ps --table-rows 1000000000000
# Each worker draws a request's distinct ids from its own --table-rows / --workers rows.
expect 2 "--table-rows 5 with --ids 100 and --workers 2: each worker draws a request's 100 distinct ids" \
  ps --table-rows 5 --ids 100
expect 2 "--table-rows takes 0 or at least 300 (--ids x --workers)" ps --table-rows 299 --ids 10,100 --workers 3
expect 2 "--json /nonexistent-folder/x.json: the folder /nonexistent-folder does not exist" ps --json /nonexistent-folder/x.json

# aiacc-bench train: keys the bench sets itself are not the user's to override.
expect 2 "job.run_dir is set by aiacc-bench train" train config.yaml --set "job.run_dir=$work"
expect 2 "job.name is set by aiacc-bench train" train config.yaml --set job.name=mine
expect 2 "cluster.workers is set by aiacc-bench train for every run (use --workers" train config.yaml --set cluster.workers=3
expect 2 "the section job holds job.threads, job.run_dir, job.name" train config.yaml --set "job={run_dir: $work}"
expect 2 "--set takes KEY=VALUE, got 'job'" train config.yaml --set job
expect 2 "no CONFIG given" train
expect 2 "$work/nonexist.yaml: cannot open the config file" train "$work/nonexist.yaml"

# aiacc-bench train against the real aiacc-train: a misspelt --set is refused by its dry run,
# with its message, before any run (TMPDIR: the bench's run folders).
real_train=$(dirname "$bench")/aiacc-train
configs=$(cd "$(dirname "$0")/../../configs" && pwd)
mkdir -p "$work/tmp"
if [[ -x $real_train && -f $configs/wide_deep_synthetic.yaml ]]; then
  TMPDIR=$work/tmp expect 2 "optimizer.lrr: unknown key (did you mean 'lr'?)" \
    train "$configs/wide_deep_synthetic.yaml" --set optimizer.lrr=1
  compgen -G "$work/tmp/aiacc-bench-train-*" >/dev/null && fail "train --set optimizer.lrr=1 made a run folder"
else
  fail "no aiacc-train at $real_train or no $configs/wide_deep_synthetic.yaml"
fi

# aiacc-bench train against a stand-in aiacc-train next to a copy of aiacc-bench: its dry run and
# runs exit with the status in dry_status and run_status (0 if absent); a successful run writes
# a summary record where the bench reads it.
fake=$work/fake
mkdir -p "$fake"
cp "$bench" "$fake/aiacc-bench"
cat >"$fake/aiacc-train" <<'FAKE'
#!/usr/bin/env bash
here=$(dirname "$0")
dry=0 run_dir= name= batch= micro=
while (($#)); do
  case $1 in
    --dry-run) dry=1 ;;
    --set) shift
      case $1 in
        job.run_dir=*) run_dir=${1#*=} ;;
        job.name=*) name=${1#*=} ;;
        data.batch_size=*) batch=${1#*=} ;;
        train.gradient_accumulation_steps=*) micro=${1#*=} ;;
      esac ;;
  esac
  shift
done
if ((dry)); then
  echo "2026-12-01 00:00:00.000 I [worker 0] [data] loaded" >&2
  status=$(cat "$here/dry_status" 2>/dev/null || echo 0)
  ((status == 0)) || echo "aiacc-train: config error: fake.key: unknown key" >&2
  exit "$status"
fi
touch "$here/ran"
status=$(cat "$here/run_status" 2>/dev/null || echo 0)
# Per pair R: 1 worker 100 samples/s, 2 workers 160 - 20 R (E 0.7, 0.6), the independent jobs
# 90 + 10 R and 70 + 10 R (ceilings 0.9, 1.0; the slower job over one: 0.8, 0.9).
repeat=${name##*-}
[[ $name == bench-independent-* ]] && { repeat=${name#bench-independent-}; repeat=${repeat%-*}; }
samples=100
[[ $name == bench-2w-* ]] && samples=$((160 - 20 * repeat))
# aiacc-bench accumulate: the whole batch's run holds 40 MB more (its peak memory), the
# micro-batched one is 1.2 x as fast; each says how it was asked to split the batch.
if [[ $name == bench-whole-* || $name == bench-split-* ]]; then
  echo "$name batch $batch micro $micro" >>"$here/splits"
  [[ $name == bench-split-* ]] && samples=120
  [[ $name == bench-whole-* ]] && held=$(head -c 40000000 /dev/zero | tr '\0' a)
fi
if [[ -e $here/one_fails && $name == bench-independent-* ]]; then
  # One independent job fails at once and the other would run on for a minute.
  [[ $name == *-1 ]] && { echo "aiacc-train: error: injected failure" >&2; exit 1; }
  exec sleep 60
fi
if [[ $name == bench-independent-* ]]; then
  # --ceiling's jobs: each says its core, and waits (5 s at most) for the others of its set,
  # which must run at the same time, not one after another.
  samples=$((80 + 10 * repeat))
  # The slower job is the second in the first set and the first in the second, so only the
  # slowest of a set gives the synchronous ceilings below, not the last.
  slower=$((repeat == 1 ? 2 : 1))
  if [[ $name == *-$slower ]]; then samples=$((samples - 10)); else samples=$((samples + 10)); fi
  echo "$name $(awk '/Cpus_allowed_list/ {print $2}' /proc/self/status)" >>"$here/independent"
  touch "$here/started-$name"
  set_prefix=${name%-*}
  for _ in $(seq 50); do
    (($(compgen -G "$here/started-$set_prefix-*" | wc -l) >= 2)) && break
    sleep 0.1
  done
  (($(compgen -G "$here/started-$set_prefix-*" | wc -l) >= 2)) || { echo "the other independent job never started" >&2; exit 3; }
fi
if ((status == 0)); then
  mkdir -p "$run_dir/$name"
  pace=
  [[ $name == bench-2w-* ]] && pace=',"compute_ms_per_step":[0.9,1.2]'
  echo "{\"kind\":\"summary\",\"samples_per_s\":$samples$pace}" >"$run_dir/$name/metrics.jsonl"
  exit 0
fi
echo "2026-12-01 00:00:01.000 I [worker 0] [train] step 1"
echo "2026-12-01 00:00:02.000 E [worker 1] [ring] peer 0 closed the connection"
echo "aiacc-train: error: worker 1 failed with exit status 1"
echo "2026-12-01 00:00:03.000 I [worker 0] [launch] stopped the other workers"
exit "$status"
FAKE
chmod +x "$fake/aiacc-train"
echo "job: {}" >"$work/job.yaml"
train_fake() { TMPDIR=$work/tmp run_expect "$fake/aiacc-bench" "$@"; }
echo 2 >"$fake/dry_status"
train_fake 2 "fake.key: unknown key" train "$work/job.yaml"
[[ -e $fake/ran ]] && fail "train: a run started although the dry run failed"
rm -f "$fake/dry_status"
echo 1 >"$fake/run_status"
train_fake 1 "E [worker 1] [ring] peer 0 closed the connection" train "$work/job.yaml"
grep -qF "aiacc-train: error: worker 1 failed" "$work/err" || fail "train: stderr lacks the run's error line: $(cat "$work/err")"
grep -qF "stopped the other workers" "$work/err" && fail "train: stderr holds the run's non-error lines: $(cat "$work/err")"
log=$(grep -o "$work/tmp/aiacc-bench-train-[0-9]*/bench-1w-1.log (kept)" "$work/err" | cut -d' ' -f1)
[[ -n $log && -f $log ]] || fail "train: the failed run's log was not kept: $(cat "$work/err")"
echo 2 >"$fake/run_status"
train_fake 2 "the 1-worker run failed (exit status 2)" train "$work/job.yaml"
rm -f "$fake/run_status"
rm -rf "$work/tmp"/aiacc-bench-train-*
train_fake 0 "" train "$work/job.yaml"
grep -qF "scaling efficiency E" "$work/out" || fail "train: a good run printed no E: $(cat "$work/out" "$work/err")"
grep -qF "compute per step by worker (training time less communication wait): 0.900 1.200 ms; worker 1 the slowest, 33% above worker 0" "$work/out" ||
  fail "train: the workers' compute per step is missing: $(cat "$work/out")"
grep -qF "removed with its folder when the bench succeeds" "$work/out" || fail "train: the log line does not say the log goes"
compgen -G "$work/tmp/aiacc-bench-train-*" >/dev/null && fail "train: a good bench left its run folder"
grep -qF "ceiling" "$work/out" && fail "train: the ceiling was reported without --ceiling: $(cat "$work/out")"
[[ -e $fake/independent ]] && fail "train: independent jobs ran without --ceiling"
# --ceiling: N independent 1-worker jobs at once, job i on the i-th CPU this process may use;
# their samples/s over N x the pair's 1-worker run's is the pair's ceiling. The median pair by E
# is the second (E 0.6), whose ceiling (1.0) E is set against; the ceilings' own median is 0.9.
train_fake 0 "" train "$work/job.yaml" --ceiling --repeat 2 --json "$work/ceiling.json"
grep -qF "ceiling: 2 independent 1-worker jobs at once reach 0.900 of 2 x one alone (median; range 0.900-1.000); the median pair's E is 0.600 of its ceiling 1.000" "$work/out" ||
  fail "train --ceiling: no ceiling line: $(cat "$work/out" "$work/err")"
# The synchronous ceiling: the slower independent job over the pair's 1-worker run (0.8, 0.9; not
# the jobs' mean), the median pair's E (0.6) against its own (0.9).
grep -qF "synchronous ceiling: the slowest of them reaches 0.800 of one alone (median; range 0.800-0.900), the most E can be when every step waits for the slowest core; the median pair's E is 0.667 of its 0.900" "$work/out" ||
  fail "train --ceiling: no synchronous ceiling line: $(cat "$work/out" "$work/err")"
# The CPUs this test may use, expanded ("0-2,4" -> 0 1 2 4); job i gets the i-th (round robin).
cpus=()
IFS=, read -ra ranges <<<"$(awk '/Cpus_allowed_list/ {print $2}' /proc/self/status)"
for range in "${ranges[@]}"; do
  for ((c = ${range%-*}; c <= ${range#*-}; c++)); do cpus+=("$c"); done
done
first=${cpus[0]} second=${cpus[$((1 % ${#cpus[@]}))]}
[[ $(sort "$fake/independent" | tr '\n' ' ') == "bench-independent-1-1 $first bench-independent-1-2 $second bench-independent-2-1 $first bench-independent-2-2 $second " ]] ||
  fail "train --ceiling: the independent jobs' CPUs ($first, $second expected): $(cat "$fake/independent")"
grep -qF '"ceiling_per_pair": [
  0.9,
  1.0
 ]' "$work/ceiling.json" || fail "train --ceiling: the JSON lacks the ceilings: $(cat "$work/ceiling.json")"
grep -qF '"scaling_efficiency_over_ceiling": 0.6' "$work/ceiling.json" ||
  fail "train --ceiling: the JSON lacks E over the ceiling: $(cat "$work/ceiling.json")"
grep -qF '"sync_ceiling_per_pair": [
  0.8,
  0.9
 ]' "$work/ceiling.json" || fail "train --ceiling: the JSON lacks the synchronous ceilings: $(cat "$work/ceiling.json")"

# aiacc-bench accumulate: one batch of B x K against K micro-batches of B, each run told so;
# samples/s and the largest process's peak memory of each, and their ratios.
expect_usage "$bench" "--batch --micro-batches --workers --steps --set --json" accumulate --help
expect 2 "--micro-batches not given" accumulate config.yaml --batch 4
expect 2 "--micro-batches takes 2 to 1024, got 1" accumulate config.yaml --batch 4 --micro-batches 1
expect 2 "unknown argument '--ceiling'" accumulate config.yaml --batch 4 --micro-batches 2 --ceiling
expect 2 "data.batch_size is set by aiacc-bench accumulate for every run (use --batch)" \
  accumulate config.yaml --batch 4 --micro-batches 2 --set data.batch_size=3
train_fake 0 "" accumulate "$work/job.yaml" --batch 128 --micro-batches 4 --json "$work/accumulate.json"
grep -qF "1 batch of 512" "$work/out" && grep -qF "4 micro-batches of 128" "$work/out" ||
  fail "accumulate: the runs are not named by their batches: $(cat "$work/out" "$work/err")"
grep -qF "micro-batched / whole: samples/s 1.200" "$work/out" || fail "accumulate: no throughput ratio: $(cat "$work/out")"
[[ $(sort "$fake/splits" | tr '\n' ' ') == "bench-split-1 batch 128 micro 4 bench-whole-1 batch 512 micro 1 " ]] ||
  fail "accumulate: the runs' settings: $(cat "$fake/splits")"
python3 - "$work/accumulate.json" <<'PY' || fail "accumulate: peak memory: $(cat "$work/accumulate.json")"
import json, sys
r = json.load(open(sys.argv[1]))
# The whole run held 40 MB more: its peak is measured, and the ratio is the split's over it.
assert r["peak_rss_mib_whole"] > r["peak_rss_mib_micro_batched"] + 30, r
assert abs(r["peak_memory_ratio"] - r["peak_rss_mib_micro_batched"] / r["peak_rss_mib_whole"]) < 1e-9, r
PY
compgen -G "$work/tmp/aiacc-bench-accumulate-*" >/dev/null && fail "accumulate: a good bench left its run folder"
# One job failing stops the others at once: the bench reports it without waiting out the one
# that would run for a minute.
touch "$fake/one_fails"
start=$SECONDS
train_fake 1 "the independent 1-worker job bench-independent-1-1 failed (the others were stopped)" \
  train "$work/job.yaml" --ceiling
((SECONDS - start < 30)) || fail "train --ceiling: a failed independent job did not stop the other"
grep -qF "injected failure" "$work/err" || fail "train --ceiling: the failed job's error line is missing: $(cat "$work/err")"
rm -f "$fake/one_fails"

# aiacc-bench-net.
expect_net 2 "--max-size takes 4 to 1073741824, got 3" --max-size 3
expect_net 2 "--reps takes 1 to 1000, got 0" --reps 0
expect_net 2 "--modes takes copy, zerocopy and default, got 'bogus'" --modes bogus
expect_net 2 "--json /nonexistent-folder/x.json: the folder /nonexistent-folder does not exist" --json /nonexistent-folder/x.json
expect_net 2 "--sizes expects a whole number, got 'abc'" --sizes abc
expect_net 2 "--sizes takes 1 to 1073741824, got -5" --sizes -5
expect_net 2 "--sizes takes a comma-separated list" --sizes 4,,16
expect_net 2 "--streams takes 1 to 64, got -1" --streams -1
expect_net 2 "--reps needs a value" --reps
expect_net 2 "unknown option '--bogus'" --bogus 1
expect_net 0 "" --sizes 4 --streams 1 --modes copy --reps 1 --json "$work/net.json"
grep -q '"latency_us"' "$work/net.json" 2>/dev/null || fail "aiacc-bench-net --json $work/net.json was not written"

# Rank 0 cannot bind its interface: the launcher names it and stops rank 1 at once.
start=$(date +%s)
expect 1 "rank 0 failed with exit status 1" allreduce --mpi none --hierarchical off --interface nosuch0 \
  --seconds 0.05 --repeat 1 --max-bytes 64
elapsed=$(($(date +%s) - start))
((elapsed < 30)) || fail "a failed rank took ${elapsed} s to end the sweep (the store's timeout is 120 s)"

# A good run writes its --json file.
expect 0 "" allreduce --mpi none --repeat 1 --max-bytes 4K --seconds 0.01 --json "$work/ok.json"
grep -q '"busbw_gbs"' "$work/ok.json" 2>/dev/null || fail "--json $work/ok.json was not written"

# A frozen rank: the other one's collective times out after --timeout-s, naming the rank it
# waited for, and the launcher stops the sweep (the default, 60 s, would take a minute).
"$bench" allreduce --mpi none --hierarchical off --repeat 1 --min-bytes 16M --max-bytes 16M --seconds 60 \
  --timeout-s 2 >"$work/out" 2>"$work/err" &
launcher=$!
ranks=()
for _ in $(seq 100); do
  mapfile -t ranks < <(pgrep -P "$launcher")
  ((${#ranks[@]} == 2)) && break
  sleep 0.1
done
if ((${#ranks[@]} == 2)); then
  # Past the ranks' connection set-up (its own, longer timeout), into the timed 16 MiB runs:
  # once rank 1 has used 0.3 s of CPU (setting up takes a few ms of it; a loaded machine may
  # take seconds of wall time for them).
  for _ in $(seq 300); do
    read -r -a stat <"/proc/${ranks[1]}/stat" 2>/dev/null || break
    ((stat[13] + stat[14] >= 30)) && break
    sleep 0.1
  done
  kill -STOP "${ranks[1]}"
  start=$(date +%s)
  # Polled rather than a background watchdog, which would hold the test's output open.
  while kill -0 "$launcher" 2>/dev/null && (($(date +%s) - start < 50)); do sleep 0.2; done
  kill -KILL "$launcher" 2>/dev/null
  rc=0
  wait "$launcher" || rc=$?
  elapsed=$(($(date +%s) - start))
  kill -KILL "${ranks[@]}" 2>/dev/null
  if [[ $rc != 1 ]]; then
    fail "a frozen rank: exit status $rc after ${elapsed} s, expected 1; stderr: $(tail -3 "$work/err")"
  elif ! grep -qE "timed out after [0-9.]+ s.*rank [01]" "$work/err"; then
    fail "a frozen rank: stderr lacks the timeout naming the rank: $(tail -3 "$work/err")"
  fi
  ((elapsed < 20)) || fail "a frozen rank took ${elapsed} s to end the sweep with --timeout-s 2"
else
  kill -KILL "$launcher" "${ranks[@]}" 2>/dev/null
  fail "aiacc-bench allreduce did not start its 2 ranks"
fi

if ((failures > 0)); then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "aiacc-bench and aiacc-bench-net command lines: all checks passed"
