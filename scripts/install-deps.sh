#!/usr/bin/env bash
# Installs everything aiacc-train needs to build, test and run on Debian 12. Idempotent: packages
# already present are left alone, and apt's index is refreshed only when something is missing.
# Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config
  libyaml-cpp-dev libzmq3-dev cppzmq-dev libsodium-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  dataset-fashion-mnist
  # Reference checks (ResNet vs torchvision, safetensors files in PyTorch) and the PyTorch
  # speed comparison; OpenBLAS keeps Debian's torch off the slow reference BLAS.
  python3-torch python3-torchvision python3-numpy libopenblas0-pthread
  # aiacc-bench allreduce compares with OpenMPI; tools/netemu needs ip/tc, its selftest iperf3.
  openmpi-bin libopenmpi-dev iproute2 iperf3
)

# Node.js and npm run tools/flights (the flights CTR data); install Debian's only when absent, so an
# existing Node.js installation (e.g. one that bundles npm) is left alone.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
