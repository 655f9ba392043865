# Sourced by the netemu tests: skip() and fail(), and the checks every one of them needs first.
# Exits 77 (Meson SKIP) without root, without iproute2, or where network namespaces cannot be
# created (an unprivileged container).

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

((EUID == 0)) || skip "needs root (network namespaces and qdiscs)"
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  skip "needs iproute2 (ip, tc)"
fi
netemu_probe="aiacc-probe-$$"
if ! netemu_probe_error=$(ip netns add "$netemu_probe" 2>&1); then
  skip "cannot create a network namespace (no CAP_SYS_ADMIN?): $netemu_probe_error"
fi
ip netns del "$netemu_probe"
