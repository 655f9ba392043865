#!/usr/bin/env bash
# The column cache (data.*.criteo_tsv.cache_dir) against parsing in every worker, for a
# criteo_tsv job: runs CONFIG three times with the same settings, first without a cache, then
# with a fresh cache folder (one worker parses and writes, the others wait and map), then again
# (every worker maps). For each run it prints the longest load of a split (from the workers'
# log lines), the peak over the run of the workers' summed proportional memory (Pss, from
# /proc/PID/smaps_rollup every 0.05 s once training starts: a page two workers share counts half
# to each) and of their anonymous memory, and the job's samples/s; then the ratios of the mapped
# run to the parsed one. A run too short to be sampled prints '?' for its memory.
#
# usage: tools/bench/column_cache_bench.sh CONFIG [--steps N] [aiacc-train args...]
#   --steps N          train.max_steps of each run (default 3000)
#   other arguments go to aiacc-train (e.g. --set cluster.workers=4)
# Needs build/tools/aiacc-train (scripts/build.sh), or the program AIACC_TRAIN names. The cache
# folder is a temporary one, removed at the end; the runs' folders too.
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit $([[ $# -lt 1 ]] && echo 2 || echo 0)
fi
config=$1
shift
steps=3000
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
program=${AIACC_TRAIN:-$root/build/tools/aiacc-train}  # AIACC_TRAIN: another build's program
[[ -x $program ]] || { echo "column_cache_bench: $program is missing: run scripts/build.sh" >&2; exit 2; }
[[ -f $config ]] || { echo "column_cache_bench: $config: no such file" >&2; exit 2; }
work=$(mktemp -d /tmp/aiacc-column-cache-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

# run NAME [cache args...]: prints "load_s pss_mb anon_mb samples_per_s"
run() {
  local name=$1
  shift
  local log=$work/$name.log
  "$program" "$config" --set "train.max_steps=$steps" --set train.log_every_steps=100000 \
    --set train.eval_each_epoch=false --set train.checkpoint.at_end=false --set "job.run_dir=$work" \
    --set "job.name=$name" "${extra[@]}" "$@" >"$log" 2>&1 &
  local launcher=$!
  # Memory is sampled from the time a worker logs that training starts until the job ends.
  local waited=0
  until grep -q "\[trainer\] training " "$log" 2>/dev/null || ! kill -0 "$launcher" 2>/dev/null; do
    sleep 0.05
    waited=$((waited + 1))
    ((waited < 12000)) || break
  done
  local peak_pss=-1 peak_anon=-1 pids pss anon pid
  while kill -0 "$launcher" 2>/dev/null; do
    pids=$(pgrep -P "$launcher" || true)
    [[ -n $pids ]] || pids=$launcher  # one worker runs in the launcher's own process
    pss=0 anon=0
    for pid in $pids; do
      read -r p a < <(awk '/^Pss:/{p=$2} /^Anonymous:/{a=$2} END{print p+0, a+0}' "/proc/$pid/smaps_rollup" 2>/dev/null ||
                      echo "0 0")
      pss=$((pss + p)) anon=$((anon + a))
    done
    kill -0 "$launcher" 2>/dev/null || break  # ended while being read: that sample may be partial
    ((pss > peak_pss)) && peak_pss=$pss
    ((anon > peak_anon)) && peak_anon=$anon
    sleep 0.05
  done
  if ! wait "$launcher"; then
    echo "column_cache_bench: the run '$name' failed; its log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  local load rate
  load=$(grep "\[data\] criteo_tsv" "$log" | sed -n 's/.* in \([0-9.]*\) s .*/\1/p' | sort -g | tail -1)
  rate=$(sed -n 's/.*done: .* training, \([0-9.]*\) samples\/s after the first step.*/\1/p' "$log" | tail -1)
  if ((peak_pss < 0)); then
    echo "${load:-?} ? ? ${rate:-?}"
  else
    echo "${load:-?} $((peak_pss / 1024)) $((peak_anon / 1024)) ${rate:-?}"
  fi
}

echo "$config: $steps steps a run; memory: the peak of the workers' sums over each run"
parsed=$(run parsed)
cache="$work/cache"
built=$(run built --set "data.train.criteo_tsv.cache_dir=$cache" --set "data.test.criteo_tsv.cache_dir=$cache")
mapped=$(run mapped --set "data.train.criteo_tsv.cache_dir=$cache" --set "data.test.criteo_tsv.cache_dir=$cache")
printf '%-28s %10s %14s %16s %12s\n' run "load (s)" "workers' Pss" "workers' anon" samples/s
for row in "parsed in every worker:$parsed" "cache built (first start):$built" "cache mapped (later starts):$mapped"; do
  read -r load pss anon rate <<<"${row#*:}"
  printf '%-28s %10s %11s MB %13s MB %12s\n' "${row%%:*}" "$load" "$pss" "$anon" "$rate"
done
read -r p_load p_pss p_anon p_rate <<<"$parsed"
read -r m_load m_pss m_anon m_rate <<<"$mapped"
awk -v a="$m_pss" -v b="$p_pss" -v c="$m_rate" -v d="$p_rate" -v e="$m_load" -v f="$p_load" 'BEGIN {
  number = "^[0-9.]+$"
  printf "mapped / parsed: Pss %s, samples/s %s, load %s\n",
         (a ~ number && b ~ number && b > 0 ? sprintf("%.2fx", a / b) : "?"),
         (c ~ number && d ~ number && d > 0 ? sprintf("%.2fx", c / d) : "?"),
         (e ~ number && f ~ number && f > 0 ? sprintf("%.4fx", e / f) : "?") }'
