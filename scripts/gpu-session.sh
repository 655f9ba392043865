#!/usr/bin/env bash
# One device call's worth of GPU checks, in order of what matters most, each logged to $OUT
# (or ./gpu-session-out): the GPU tests; the trainer's NCCL path with 2 ranks on the one GPU
# (emulated hosts, gpu-bundle/emulated-hosts.sh) against the host path, for equal parameters and
# for speed; then the PyTorch comparisons (gpu-bundle/bench.sh). Made here with
#   scripts/build.sh && scripts/gpu-bundle.sh
# and run there (the device tool carries gpu-bundle/):
#   scripts/gpu-session.sh [tests] [nccl] [bench]      # default: all three
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$PWD/gpu-bundle
out=${OUT:-$PWD/gpu-session-out}
mkdir -p "$out"
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(tests nccl bench)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
status=0

if want tests; then
  echo "### GPU tests"
  "$bundle/run.sh" 2>&1 | tee "$out/tests.log" | grep -E '^=== |\[  (PASSED|FAILED|SKIPPED) |FAILED|not found'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

if want nccl; then
  echo "### NCCL in the trainer: 2 emulated hosts on one GPU, nccl against host"
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
  {
    for mode in nccl host; do
      echo "--- small resnet, $mode"
      RUN_DIR=/tmp/emu-$mode timeout 180 "$bundle/emulated-hosts.sh" 2 "$small" --set job.device=cuda \
        --set cluster.ring.device_collectives=$mode 2>&1 | grep -E 'dense gradients|step 20/20|summary|Error|error' 
      echo "rc=${PIPESTATUS[0]}"
    done
    python3 - <<'EOF'
import glob, numpy as np
from safetensors.numpy import load_file
def last(mode):
    return load_file(sorted(glob.glob(f"/tmp/emu-{mode}/small/checkpoints/step-*/model.safetensors"))[-1])
a, b = last("nccl"), last("host")
worst = max(float(np.max(np.abs(a[k] - b[k]))) / max(float(np.max(np.abs(b[k]))), 1e-30) for k in b if a[k].dtype.kind == "f")
print(f"nccl vs host after 20 steps: {len(b)} tensors, worst max|diff|/max|host| = {worst:.3e}",
      "OK" if worst < 1e-3 else "MISMATCH")
EOF
    for mode in nccl host; do
      echo "--- resnet50 bf16, batch 128 per worker, $mode"
      RUN_DIR=/tmp/emu50-$mode timeout 240 "$bundle/emulated-hosts.sh" 2 "$bundle/configs/resnet50_synthetic.yaml" \
        --set job.device=cuda --set job.precision=bf16 --set data.batch_size=128 --set train.max_steps=40 \
        --set train.log_every_steps=10 --set optimizer.schedule.warmup_steps=0 \
        --set cluster.ring.device_collectives=$mode 2>&1 | grep -E 'dense gradients|step (20|30|40)/|summary|Error|error'
      echo "rc=${PIPESTATUS[0]}"
    done
  } 2>&1 | tee "$out/nccl.log"
  grep -q MISMATCH "$out/nccl.log" && status=1
fi

if want bench; then
  echo "### PyTorch comparisons"
  (cd "$bundle" && REPEATS=${REPEATS:-1} PRESETS=${PRESETS:-"resnet50_synthetic wide_deep_flights"} ./bench.sh) 2>&1 \
    | tee "$out/bench.log" | tail -25
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
exit $status
