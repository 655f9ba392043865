#!/usr/bin/env bash
# Network faults between emulated hosts (tools/netemu): a 2-host data-parallel job (one worker
# per host, the TCP ring between them, CURVE on) under
#   - a slow link (HTB link cap 10 Mbit/s instead of 4 Gbit/s): the job slows down and ends
#     with bit-identical parameters;
#   - a cut link (host 1's eth0 set down mid-job): both workers fail with a timeout naming the
#     other rank within cluster.ring.timeout_s plus a few seconds; neither hangs.
# Root only: exits 77 (Meson SKIP) without root or where network namespaces cannot be created.
# usage: netemu_faults_test.sh PATH/TO/aiacc-netemu PATH/TO/aiacc-train
set -euo pipefail

netemu=$1
program=$2

# shellcheck source=tests/tools/netemu_preconditions.sh
source "$(dirname "${BASH_SOURCE[0]}")/netemu_preconditions.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AIACC_JOB_TOKEN=netemu-faults-test-token-0123456789

# One worker per emulated host; rank = host. The MLP's gradients are ~200 KB a step.
write_config() { # NAME MAX_STEPS
  cat >"$work/$1.yaml" <<EOF
job: {name: $1, run_dir: $work/runs, seed: 7}
model: {type: mlp, mlp: {hidden: [64, 32]}}
data:
  batch_size: 32
  train: {type: synthetic_images, synthetic_images: {size: 4096}}
  test: {type: synthetic_images, synthetic_images: {size: 64}}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 100, max_steps: $2, log_every_steps: 10, eval_each_epoch: false,
        checkpoint: {every_steps: 0, at_end: true, resume: never}}
cluster:
  workers: 2
  launcher: external
  start_timeout_s: 60
  ring: {timeout_s: 5}
EOF
}

# The command each host runs: its rank of the job, listening on its own address (expanded by
# that host's shell, hence the single quotes).
# shellcheck disable=SC2016
rank_command='RANK=$AIACC_NETEMU_HOST WORLD_SIZE=2 MASTER_ADDR=${AIACC_NETEMU_ADDRS%%,*} MASTER_PORT=29731 \
  exec "$0" "$1" --set cluster.ring.interface=$AIACC_NETEMU_ADDR'

seconds_of() { # COMMAND...: runs it, prints its wall time in seconds; output to $work/last.log
  local start end
  start=$(date +%s.%N)
  "$@" >"$work/last.log" 2>&1 || true
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}

# --- a slow link: slower, same result ------------------------------------------------------
write_config fast 40
write_config slow 40
fast_s=$(seconds_of "$netemu" --hosts 2 -- bash -c "$rank_command" "$program" "$work/fast.yaml")
grep -q "done: 40 steps" "$work/last.log" || { cat "$work/last.log"; fail "the job on the fast link did not finish"; }
slow_s=$(seconds_of "$netemu" --hosts 2 --link-gbit 0.01 --flow-gbit 0 -- bash -c "$rank_command" "$program" "$work/slow.yaml")
grep -q "done: 40 steps" "$work/last.log" || { cat "$work/last.log"; fail "the job on the slow link did not finish"; }
echo "40 steps: $fast_s s on 4 Gbit/s links, $slow_s s on 10 Mbit/s links"
# 10 Mbit/s (not 20): the slowdown then stands well clear of the fast run's own spread on a
# loaded 2-core machine (20 Mbit/s gave 1.47x once, under a 1.5x bound).
awk -v f="$fast_s" -v s="$slow_s" 'BEGIN { exit !(s > 1.5 * f) }' ||
  fail "the slow link did not slow the job down ($slow_s s vs $fast_s s)"
cmp -s "$work/runs/fast/checkpoints/step-000000000040/model.safetensors" \
  "$work/runs/slow/checkpoints/step-000000000040/model.safetensors" ||
  fail "the slow link changed the result: the final parameters differ"
echo "final parameters bit-identical"

# --- a cut link: a timeout naming the peer, no hang -----------------------------------------
write_config cut 1000000
# Each host runs its rank in the background; host 1 takes its link down once rank 0 has logged
# step 10, then both wait for their rank to fail.
# shellcheck disable=SC2016
cut_command='RANK=$AIACC_NETEMU_HOST WORLD_SIZE=2 MASTER_ADDR=${AIACC_NETEMU_ADDRS%%,*} MASTER_PORT=29731 \
    "$0" "$1" --set cluster.ring.interface=$AIACC_NETEMU_ADDR > "$2/cut-$AIACC_NETEMU_HOST.log" 2>&1 &
  rank=$!
  if [ "$AIACC_NETEMU_HOST" = 1 ]; then
    for i in $(seq 300); do grep -q "step 10/" "$2/cut-0.log" 2>/dev/null && break; sleep 0.1; done
    ip link set eth0 down
    echo "cut host 1 link"
  fi
  wait $rank; status=$?
  cat "$2/cut-$AIACC_NETEMU_HOST.log"; exit $status'
cut_s=$(seconds_of "$netemu" --hosts 2 -- bash -c "$cut_command" "$program" "$work/cut.yaml" "$work")
grep -E "cut host|error" "$work/last.log" || true
grep -q "cut host 1 link" "$work/last.log" || { cat "$work/last.log"; fail "the link was never cut"; }
for host in 0 1; do
  grep -E "^\[h$host\].*aiacc-train: error: .*timed out after [0-9.]+ s: (send to|recv from) rank $((1 - host))" "$work/last.log" >/dev/null ||
    { cat "$work/last.log"; fail "host $host did not report a timeout naming rank $((1 - host))"; }
done
awk -v c="$cut_s" 'BEGIN { exit !(c < 60) }' || fail "the cut job took $cut_s s to fail"
echo "cut link: both workers failed naming each other; $cut_s s in all (ring.timeout_s 5)"
echo "PASS"
