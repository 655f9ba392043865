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
  # Without TF32 (cuDNN and cuBLAS would pick it per run), so two correct runs differ only by
  # the order of cuDNN's atomic sums. lr 1e-30 gives the initial parameters; after one step the two
  # paths' updates must agree; after 20 steps, compare with a second host run (the noise floor).
  small_run() {  # NAME MODE STEPS [--set ...]
    local name=$1 mode=$2 steps=$3; shift 3
    echo "--- small resnet, $name: $mode, $steps steps"
    NVIDIA_TF32_OVERRIDE=0 RUN_DIR=/tmp/emu/$name timeout 120 "$bundle/emulated-hosts.sh" 2 "$small" \
      --set job.device=cuda --set cluster.ring.device_collectives="$mode" --set train.max_steps="$steps" "$@" 2>&1 \
      | grep -E 'dense gradients|step [0-9]+/[0-9]+ loss|summary|rror'
    echo "rc=${PIPESTATUS[0]}"
  }
  {
    small_run init host 1 --set optimizer.lr=1e-30
    small_run nccl1 nccl 1
    small_run host1 host 1
    small_run nccl20 nccl 20
    small_run host20 host 20
    small_run host20b host 20
    python3 - <<'EOF'
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
def rel(a, b, base=None):  # per float tensor: |a - b| / |b - base| (2-norms), worst first
    out = []
    for k in b:
        if b[k].dtype.kind != "f": continue
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if base is not None: x, y = x - base[k], y - base[k]
        d = np.linalg.norm(y)
        if d > 0: out.append((np.linalg.norm(x - y) / d, k))
    return sorted(out, reverse=True)
init = last("init")
one = rel(last("nccl1"), last("host1"), init)
print(f"step 1, update of nccl vs host: {len(one)} tensors, worst {one[0][0]:.2e} ({one[0][1]}), median {one[len(one)//2][0]:.2e}",
      "OK" if one[0][0] < 1e-3 else "MISMATCH")
for a, b in (("nccl20", "host20"), ("host20b", "host20")):
    r = rel(last(a), last(b), init)
    print(f"step 20, change from init of {a} vs {b}: worst {r[0][0]:.2e} ({r[0][1]}), median {r[len(r)//2][0]:.2e}")
EOF
    for mode in nccl host; do
      echo "--- resnet50 bf16, batch 128 per worker, $mode"
      RUN_DIR=/tmp/emu50-$mode timeout 240 "$bundle/emulated-hosts.sh" 2 "$bundle/configs/resnet50_synthetic.yaml" \
        --set job.device=cuda --set job.precision=bf16 --set data.batch_size=128 --set train.max_steps=40 \
        --set train.log_every_steps=10 --set optimizer.schedule.warmup_steps=0 \
        --set data.train.synthetic_images.size=20480 \
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
