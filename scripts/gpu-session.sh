#!/usr/bin/env bash
# One device call's worth of GPU checks, in order of what matters most, each logged to $OUT
# (or ./gpu-session-out): the GPU tests; the trainer's NCCL path with 2 ranks on the one GPU
# (emulated hosts, gpu-bundle/emulated-hosts.sh) against the host path, for equal parameters and
# for speed; then the PyTorch comparisons (gpu-bundle/bench.sh). Made here with
#   scripts/build.sh && scripts/gpu-bundle.sh
# and run there (the device tool carries gpu-bundle/):
#   scripts/gpu-session.sh [tests] [nccl] [nccl-faults] [nccl-speed] [profile] [bench]   # default: all
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$PWD/gpu-bundle
out=${OUT:-$PWD/gpu-session-out}
mkdir -p "$out"
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(tests nccl nccl-faults nccl-speed profile bench)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
status=0

if want tests; then
  echo "### GPU tests"
  "$bundle/run.sh" 2>&1 | tee "$out/tests.log" | grep -E '^=== |\[  (PASSED|FAILED|SKIPPED) |FAILED|not found'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

# The small job of the nccl and nccl-faults parts.
small=$out/small_resnet.yaml
cat > "$small" <<'EOF'
job: {name: small, seed: 3}
model: {type: resnet, resnet: {depth: 20}}
data:
  batch_size: 64
  train: {type: synthetic_images, synthetic_images: {channels: 3, height: 32, width: 32, num_classes: 10, size: 4096}}
  test: {type: synthetic_images, synthetic_images: {channels: 3, height: 32, width: 32, num_classes: 10, size: 256}}
optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
train: {epochs: 1, max_steps: 20, log_every_steps: 5, eval_each_epoch: false}
EOF

if want nccl; then
  echo "### NCCL in the trainer: 2 emulated hosts on one GPU, nccl against host"
  # Two models. An MLP (cuBLAS GEMMs in strict fp32: every run of a path computes the same
  # bits) must end where the host path ends, to 1e-6, after 1 step and after 20. A ResNet's
  # cuDNN algorithm search may pick other algorithms (Winograd, FFT) from run to run, with
  # other rounding (TF32 is off), so its one-step update is judged against the noise floor of
  # two host-path runs. lr 1e-30 gives the initial parameters; batch-norm running statistics
  # are left out (the same forward on every path: their change is rounding noise).
  small_run() {  # MODEL NAME MODE STEPS [--set ...]
    local model=$1 name=$2 mode=$3 steps=$4; shift 4
    echo "--- small $model, $name: $mode, $steps steps"
    rm -rf "/tmp/emu/$model-$name"  # a rerun must not resume the last session's checkpoint
    NVIDIA_TF32_OVERRIDE=0 RUN_DIR=/tmp/emu/$model-$name timeout 120 "$bundle/emulated-hosts.sh" 2 "$small" \
      --set model.type="$model" --set job.device=cuda --set cluster.ring.device_collectives="$mode" \
      --set train.max_steps="$steps" "$@" 2>&1 | grep -E 'dense gradients|step [0-9]+/[0-9]+ loss|summary|rror'
    local rc=${PIPESTATUS[0]}
    echo "rc=$rc"
    [[ $rc -eq 0 ]] || echo "MISMATCH: the $model $name run failed"
  }
  {
    for model in mlp resnet; do
      small_run $model init host 1 --set optimizer.lr=1e-30
      small_run $model nccl1 nccl 1
      small_run $model host1 host 1
      small_run $model host1b host 1
      small_run $model nccl20 nccl 20
      small_run $model host20 host 20
    done
    python3 - <<'EOF' || echo "MISMATCH: the comparison failed (a missing checkpoint?)"
import glob, json, struct, numpy as np
def last(name):  # the newest checkpoint's tensors (safetensors: u64 header size, JSON header, data)
    path = sorted(glob.glob(f"/tmp/emu/{name}/small/checkpoints/step-*/model.safetensors"))[-1]
    blob = open(path, "rb").read()
    size = struct.unpack("<Q", blob[:8])[0]
    types = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}
    out = {}
    for k, v in json.loads(blob[8:8 + size]).items():
        if k == "__metadata__" or v["dtype"] not in types: continue
        lo, hi = v["data_offsets"]
        out[k] = np.frombuffer(blob[8 + size + lo:8 + size + hi], dtype=types[v["dtype"]]).reshape(v["shape"])
    return out
def rel(a, b, base):  # per parameter: |(a - base) - (b - base)| / |b - base| (2-norms), worst first
    out = []
    for k in b:
        if b[k].dtype.kind != "f" or "running_" in k: continue
        x, y = a[k].astype(np.float64) - base[k], b[k].astype(np.float64) - base[k]
        if np.linalg.norm(y) > 0: out.append((np.linalg.norm(x - y) / np.linalg.norm(y), k))
    return sorted(out, reverse=True)
def show(label, r):
    print(f"{label}: {len(r)} parameters, worst {r[0][0]:.2e} ({r[0][1]}), median {r[len(r) // 2][0]:.2e}")
    return r
for model in ("mlp", "resnet"):
    init = last(f"{model}-init")
    paths = show(f"{model}: step 1 update, nccl vs host", rel(last(f"{model}-nccl1"), last(f"{model}-host1"), init))
    floor = show(f"{model}: step 1 update, host vs host", rel(last(f"{model}-host1b"), last(f"{model}-host1"), init))
    later = show(f"{model}: step 20 change, nccl vs host", rel(last(f"{model}-nccl20"), last(f"{model}-host20"), init))
    if model == "mlp":
        ok = paths[0][0] <= 1e-6 and later[0][0] <= 1e-6
        print("NCCL path (mlp):", "OK (equal to the host path)" if ok else "MISMATCH (beyond 1e-6)")
    else:
        ok = np.median([x for x, _ in paths]) <= 3 * max(np.median([x for x, _ in floor]), 1e-6)
        print("NCCL path (resnet):", "within the noise floor" if ok else
              "beyond 3x this run's noise floor (cuDNN picked other algorithms: see the mlp line)")
EOF
  } 2>&1 | tee "$out/nccl.log"
  grep -q MISMATCH "$out/nccl.log" && status=1
fi

if want nccl-faults; then
  # What a worker on the NCCL path does when its peer goes silent (SIGSTOP: a hung host) or dies
  # (SIGKILL) mid-training, left to find out by itself (WAIT_ALL: the script does not end it):
  # it must fail with an error naming the peer (the stall check, ring/device_collective.h), within
  # cluster.ring.timeout_s and the check's 5 s (its window is at most the timeout) for a silent peer.
  echo "### NCCL in the trainer: a peer goes silent or dies mid-training"
  rank_pid() {  # the aiacc-train process of torchrun rank $1 (its environment's RANK)
    local p
    for p in $(pgrep -x aiacc-train); do
      tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$1" && { echo "$p"; return; }
    done
  }
  {
    # SIGNAL VICTIM: a silent and a dead rank 1, and a silent rank 0 (which serves the store)
    for fault in "STOP 1" "KILL 1" "STOP 0"; do
      read -r sig rank <<< "$fault"
      other=$(( 1 - rank ))
      log=$out/nccl-fault-$sig-$rank.log
      rm -rf "/tmp/emuf-$sig-$rank"
      WAIT_ALL=1 NVIDIA_TF32_OVERRIDE=0 RUN_DIR=/tmp/emuf-$sig-$rank timeout 150 "$bundle/emulated-hosts.sh" 2 "$small" \
        --set model.type=resnet --set job.device=cuda --set cluster.ring.device_collectives=nccl \
        --set train.epochs=1000 --set train.max_steps=100000 --set train.log_every_steps=10 \
        --set train.checkpoint.every_steps=0 --set cluster.ring.timeout_s=5 > "$log" 2>&1 &
      job=$!
      for _ in $(seq 90); do grep -q ' step 30/' "$log" && break; sleep 1; done
      victim=$(rank_pid "$rank") survivor=$(rank_pid "$other")
      if [[ -z $victim || -z $survivor ]]; then
        echo "MISMATCH: the job did not reach step 30 with both ranks"; tail -5 "$log"
        kill -KILL $job 2>/dev/null; wait $job; continue
      fi
      echo "--- rank $rank gets SIG$sig after step 30; rank $other must end with an error naming it (ring timeout 5 s)"
      t0=$(date +%s%N)
      kill -"$sig" "$victim"
      while kill -0 "$survivor" 2>/dev/null && (( $(date +%s%N) - t0 < 60000000000 )); do sleep 0.1; done
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      if kill -0 "$survivor" 2>/dev/null; then
        echo "MISMATCH: rank $other still runs 60 s after rank $rank's SIG$sig"
      else
        echo "rank $other ended $((ms / 1000)).$((ms % 1000 / 100)) s after the signal"
      fi
      kill -KILL "$victim" "$survivor" 2>/dev/null
      wait $job
      grep -a '^aiacc-train' "$log" | tail -2
      if (( rank == 1 )); then named='stall check: rank 1 did not come'; else named='rendezvous store did not answer'; fi
      grep -aq "$named" "$log" || echo "MISMATCH: rank $other's error does not name rank $rank"
    done
  } 2>&1 | tee "$out/nccl-faults.log"
  grep -q MISMATCH "$out/nccl-faults.log" && status=1
fi

if want nccl-speed; then
  echo "### NCCL in the trainer: ResNet-50 on 2 emulated hosts sharing one GPU, nccl against host"
  {
    for mode in nccl host; do
      echo "--- resnet50 bf16, batch 128 per worker, $mode"
      rm -rf /tmp/emu50-$mode
      RUN_DIR=/tmp/emu50-$mode timeout 240 "$bundle/emulated-hosts.sh" 2 "$bundle/configs/resnet50_synthetic.yaml" \
        --set job.device=cuda --set job.precision=bf16 --set data.batch_size=128 --set train.max_steps=40 \
        --set train.log_every_steps=10 --set optimizer.schedule.warmup_steps=0 \
        --set data.train.synthetic_images.size=20480 \
        --set cluster.ring.device_collectives=$mode 2>&1 | grep -E 'dense gradients|step (20|30|40)/|summary|Error|error'
      echo "rc=${PIPESTATUS[0]}"
    done
    for mode in nccl host; do
      echo "--- wide_deep_flights, 2 workers x 256, $mode"
      rm -rf /tmp/emuwd-$mode
      (cd "$bundle" && RUN_DIR=/tmp/emuwd-$mode timeout 120 ./emulated-hosts.sh 2 configs/wide_deep_flights.yaml \
        --set job.device=cuda --set train.max_steps=300 --set train.log_every_steps=100 \
        --set train.eval_each_epoch=false --set cluster.ring.device_collectives=$mode 2>&1) \
        | grep -E 'dense gradients|step (200|300)/|summary|rror'
      echo "rc=${PIPESTATUS[0]}"
    done
  } 2>&1 | tee "$out/nccl-speed.log"
  grep -q '^rc=[1-9]' "$out/nccl-speed.log" && status=1
fi

if want profile; then
  echo "### Wide&Deep on flights, per-op GPU times (AIACC_PROFILE_OPS), bags on the device"
  rm -rf /tmp/profile
  (cd "$bundle" && AIACC_PROFILE_OPS=1 ./aiacc-train.sh configs/wide_deep_flights.yaml --set job.device=cuda \
    --set cluster.workers=1 --set data.batch_size=512 --set train.max_steps=200 --set train.log_every_steps=100 \
    --set train.eval_each_epoch=false --set job.run_dir=/tmp/profile 2>&1) | tee "$out/profile.log" | tail -30
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

if want bench; then
  echo "### PyTorch comparisons"
  (cd "$bundle" && REPEATS=${REPEATS:-1} PRESETS=${PRESETS:-"resnet50_synthetic wide_deep_flights wide_deep_flights_host_bags"} ./bench.sh) 2>&1 \
    | tee "$out/bench.log" | tail -25
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
exit $status
