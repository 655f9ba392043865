#!/usr/bin/env bash
# Packs the GPU test programs of ./build (gpu_*_test and the NCCL backend's test), with the Debian libraries they load that a bare GPU
# machine lacks (yaml-cpp, ZeroMQ, spdlog, fmt, ...), into one folder (default gpu-bundle/)
# that fits a device call's 64 MiB, and writes gpu-bundle/run.sh, which runs them there.
#
#   scripts/build.sh && scripts/gpu-bundle.sh            # here
#   gpu-bundle/run.sh [gpu_conv2d_test ...]              # on the GPU machine (default: all)
#   gpu-bundle/aiacc-train.sh CONFIG --set job.device=cuda   # a training job there
#   gpu-bundle/bench.sh                                   # ResNet-50 against PyTorch there
#   gpu-bundle/emulated-hosts.sh 2 CONFIG --set job.device=cuda   # NCCL between 2 ranks on one GPU
#
# CUDA's own libraries (cudart, cuBLAS, cuDNN, NCCL) are not packed: cuBLAS alone is over
# 500 MiB. run.sh puts the GPU machine's on the library path (the NVIDIA Python wheels'
# site-packages/nvidia/*/lib folders, then /usr/local/cuda/lib64), lists any library that is
# still missing (a CUDA major version other than the build's shows up here), and then runs
# each program, printing its gtest output and a PASS / FAIL / SKIP line.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
limit_mib=60

programs=(build/tests/gpu_*_test)
# The NCCL backend's test (world 1 runs on one GPU; two ranks need two).
[[ -x build/tests/ring_nccl_allreduce_test ]] && programs+=(build/tests/ring_nccl_allreduce_test)
[[ -x ${programs[0]} ]] || { echo "gpu-bundle: no build/tests/gpu_*_test: run scripts/build.sh first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/train"
cp "${programs[@]}" "$out/bin/"
# aiacc-train with its CUDA plugin (found next to it) and the example configs, for GPU jobs:
#   gpu-bundle/aiacc-train.sh gpu-bundle/configs/resnet50_synthetic.yaml --set job.device=cuda
trainer=()
if [[ -x build/tools/aiacc-train && -f build/tools/libaiacc_cuda.so ]]; then
  cp build/tools/aiacc-train build/tools/libaiacc_cuda.so "$out/train/"
  cp -r configs "$out/configs"
  # Issue 8's benchmark against PyTorch (bench.sh below runs it).
  mkdir -p "$out/tools/bench/pytorch"
  cp tools/bench/compare_pytorch.py "$out/tools/bench/"
  cp tools/bench/pytorch/*.py "$out/tools/bench/pytorch/"
  trainer=(build/tools/aiacc-train build/tools/libaiacc_cuda.so)
  # The Wide&Deep comparison's data, cut to what its timed steps read (250 steps of 512 on each
  # side; the twin stops at the end of the file).
  if [[ -f data-cache/flights/train.tsv ]]; then
    mkdir -p "$out/data-cache/flights"
    head -n 250000 data-cache/flights/train.tsv > "$out/data-cache/flights/train.tsv"
    head -n 20000 data-cache/flights/test.tsv > "$out/data-cache/flights/test.tsv"
  fi
fi

# Symbols are not needed there, and the 64 MiB a call carries is tight.
strip --strip-unneeded "$out"/bin/* "$out"/train/* 2>/dev/null || true

# Every library the programs load, except the C runtime (present everywhere, and must match the
# machine's loader) and CUDA's (from the GPU machine).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libgcc_s\.so|libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink)'
for program in "${programs[@]}" "${trainer[@]}"; do
  ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$out/lib/$name"
done

cat > "$out/env.sh" <<'EOF'
# Sourced by run.sh and aiacc-train.sh: the bundle's libraries, then the GPU machine's CUDA ones.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
paths=("$here/lib")
for python in python3 python; do
  command -v "$python" >/dev/null 2>&1 || continue
  site=$("$python" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null) || continue
  while read -r dir; do
    for lib in "$dir"/nvidia/*/lib; do [[ -d $lib ]] && paths+=("$lib"); done
  done <<< "$site"
  break
done
[[ -d /usr/local/cuda/lib64 ]] && paths+=(/usr/local/cuda/lib64)
export LD_LIBRARY_PATH=$(IFS=:; echo "${paths[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
EOF

cat > "$out/aiacc-train.sh" <<'EOF'
#!/usr/bin/env bash
# aiacc-train on this machine with the bundle's libraries (see scripts/gpu-bundle.sh).
source "$(dirname "$0")/env.sh"
exec "$here/train/aiacc-train" "$@"
EOF
chmod +x "$out/aiacc-train.sh"

cat > "$out/bench.sh" <<'EOF'
#!/usr/bin/env bash
# ResNet-50 (224x224, batch 256) on this machine's GPU against PyTorch in one run, and the
# ratios: bf16 (aiacc-train's job.precision: bf16 against bf16 autocast with channels_last),
# then fp32 on both sides; then Wide&Deep on flights when the bundle holds its data (tables on
# the host for aiacc-train, on the GPU for PyTorch). PYTHON: the Python with torch; PRESETS: a
# subset.
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
presets="resnet50_synthetic resnet50_synthetic_fp32"
[[ -f $here/data-cache/flights/train.tsv ]] && presets+=" wide_deep_flights"
exec "$python" "$here/tools/bench/compare_pytorch.py" ${PRESETS:-$presets} \
  --device cuda --binary "$here/aiacc-train.sh" --python "$python" --threads "$(nproc)" --repeats "${REPEATS:-2}" "$@"
EOF
chmod +x "$out/bench.sh"

cat > "$out/emulated-hosts.sh" <<'EOF'
#!/usr/bin/env bash
# N workers on this machine's one GPU as N emulated hosts, so the trainer's NCCL path
# (cluster.ring.device_collectives: nccl) runs with several ranks where NCCL would refuse two
# ranks on one GPU: each worker runs in a PID namespace of its own (the ring's host identity,
# ring/communicator.cc: each is local rank 0, on cuda:0) with its own NCCL_HOSTID (NCCL then
# takes the peers for other hosts and all-reduces over its socket transport on loopback, as
# between two nodes without InfiniBand). Needs root (unshare --pid). torchrun-style variables;
# the job's outputs go to RUN_DIR (default /tmp/emulated-hosts). WAIT_ALL=1 waits for every rank
# instead of ending the others at the first failure (to see how the others find out by themselves).
#   emulated-hosts.sh N CONFIG [--set KEY=VALUE ...]
set -uo pipefail
source "$(dirname "$0")/env.sh"
workers=$1; shift
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(( 20000 + RANDOM % 20000 ))
pids=()
# The ranks go with this script (Ctrl-C, timeout, a failed rank): background jobs ignore
# SIGINT, and a rank left alone would wait in the rendezvous until its start timeout, or train
# on. unshare blocks SIGTERM while it waits for its child, and a namespace's first process
# ignores signals it has no handler for, so it takes SIGKILL: unshare dies, and --kill-child
# sends its child the same.
trap 'kill -KILL -- "${pids[@]}" 2>/dev/null' EXIT INT TERM
for (( rank = 0; rank < workers; ++rank )); do
  RANK=$rank WORLD_SIZE=$workers MASTER_ADDR=127.0.0.1 MASTER_PORT=$port AIACC_JOB_TOKEN=$token \
    NCCL_HOSTID=emulated-host-$rank NCCL_SOCKET_IFNAME=lo \
    unshare --pid --mount-proc --fork --kill-child "${AIACC_TRAIN:-$here/train/aiacc-train}" "$@" \
      --set cluster.launcher=external --set cluster.workers="$workers" --set cluster.servers=0 \
      --set job.run_dir="${RUN_DIR:-/tmp/emulated-hosts}" &
  pids+=($!)
done
status=0
for (( left = workers; left > 0; --left )); do
  # The next rank to end (only ranks run in the background); the first failure ends the others
  # (trap) unless WAIT_ALL is set.
  wait -n || { status=1; [[ ${WAIT_ALL:-0} == 1 ]] || break; }
done
exit $status
EOF
chmod +x "$out/emulated-hosts.sh"

cat > "$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the packed GPU tests on this machine (see scripts/gpu-bundle.sh). Exit status: 0 when
# every program passed or skipped, 1 otherwise.
set -uo pipefail
source "$(dirname "$0")/env.sh"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

if [[ $# -gt 0 ]]; then programs=("$@"); else programs=($(cd "$here/bin" && ls)); fi
missing=$(for p in "${programs[@]}"; do ldd "$here/bin/$p" | grep 'not found'; done | sort -u)
if [[ -n $missing ]]; then
  echo "run.sh: libraries not found (the build linked CUDA 13, cuDNN 9, NCCL 2):"
  echo "$missing"
fi
status=0
for p in "${programs[@]}"; do
  echo "=== $p"
  "$here/bin/$p"
  rc=$?
  case $rc in
    0) echo "=== $p: PASS" ;;
    77) echo "=== $p: SKIP" ;;
    *) echo "=== $p: FAIL (exit $rc)"; status=1 ;;
  esac
done
exit $status
EOF
chmod +x "$out/run.sh"

size_mib=$(du -sm "$out" | cut -f1)
echo "gpu-bundle: $out: ${#programs[@]} programs, $(ls "$out/lib" | wc -l) libraries, ${size_mib} MiB"
if (( size_mib > limit_mib )); then
  echo "gpu-bundle: $out is over ${limit_mib} MiB: a device call carries 64 MiB at most" >&2
  exit 1
fi
