#!/usr/bin/env bash
# End-to-end test of tools/netemu/aiacc-netemu: isolation, connectivity, environment, output
# prefixes, exit-status propagation and cleanup (normal exit and SIGTERM). Root only: exits 77
# (Meson SKIP) without root or where network namespaces cannot be created.
# usage: netemu_test.sh [PATH/TO/aiacc-netemu]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tool=${1:-$here/../../tools/netemu/aiacc-netemu}
subnet=10.231.77 # not the default, so the option is exercised

# shellcheck source=tests/tools/netemu_preconditions.sh
source "$here/netemu_preconditions.sh"
[[ -x $tool ]] || fail "tool not found or not executable: $tool"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs the tool in the background (so that its pid, which names its namespaces, is known) and
# waits; sets tool_pid and tool_rc, output in $work/out and $work/err.
run_tool() {
  tool_rc=0
  "$tool" "$@" >"$work/out" 2>"$work/err" &
  tool_pid=$!
  wait "$tool_pid" || tool_rc=$?
}

expect_no_namespaces() {
  local left
  left=$(ip netns list | awk -v p="aiacc-$1-" 'index($1, p) == 1 { print $1 }')
  [[ -z $left ]] || fail "namespaces left behind by pid $1: $left"
}

show() {
  echo "--- stdout"
  cat "$work/out"
  echo "--- stderr"
  cat "$work/err"
}

# --- 1. isolation, environment and connectivity --------------------------------------------

# Addresses of the root namespace other than loopback's (which every namespace has on its own lo).
root_addrs=$(ip -o addr show | awk '$2 != "lo" { split($4, a, "/"); print a[1] }' | paste -sd' ')

# Per host: only lo and eth0 exist; no root-namespace address is visible; the environment is
# complete; the other host answers (a TCP connect to a closed port is refused, which proves the
# SYN and the RST crossed both shaped links); with python3, 2 MiB go host 0 -> host 1 and back.
cat >"$work/host.sh" <<'EOF'
set -euo pipefail
i=$AIACC_NETEMU_HOST
links=$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort | paste -sd' ')
[[ $links == "eth0 lo" ]] || { echo "unexpected interfaces: $links"; exit 10; }
for a in $ROOT_ADDRS; do
  if ip -o addr show | grep -qF " $a/"; then echo "root address $a visible"; exit 11; fi
done
IFS=, read -r -a addrs <<<"$AIACC_NETEMU_ADDRS"
[[ ${#addrs[@]} == "$AIACC_NETEMU_HOSTS" && ${addrs[i]} == "$AIACC_NETEMU_ADDR" ]] ||
  { echo "bad environment: $AIACC_NETEMU_ADDRS / $AIACC_NETEMU_ADDR"; exit 12; }
ip -o -4 addr show dev eth0 | grep -qF " $AIACC_NETEMU_ADDR/24 " || { echo "no address"; exit 13; }
peer=${addrs[1 - i]}
err=$( (exec 3<>"/dev/tcp/$peer/9") 2>&1 || true)
[[ $err == *refused* ]] || { echo "peer $peer unreachable: $err"; exit 14; }
echo "reached $peer"
if command -v python3 >/dev/null; then
  python3 - "$i" "$peer" "$AIACC_NETEMU_ADDR" <<'PY'
import socket, sys, time
i, peer, me = int(sys.argv[1]), sys.argv[2], sys.argv[3]
n = 2 << 20
if i == 1:  # echo server: returns everything it receives
    s = socket.create_server((me, 7077))
    s.settimeout(10)
    c, _ = s.accept()
    got = 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        c.sendall(b)
        got += len(b)
    c.close()
    print("echoed", got)
else:
    deadline = time.time() + 10
    while True:
        try:
            c = socket.create_connection((peer, 7077), timeout=10)
            break
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    c.sendall(b"x" * n)
    c.shutdown(socket.SHUT_WR)
    back = 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        back += len(b)
    assert back == n, (back, n)
    print("round trip", back)
PY
fi
echo "host $i ok"
EOF

ROOT_ADDRS=$root_addrs run_tool --hosts 2 --subnet "$subnet" -- bash "$work/host.sh"
((tool_rc == 0)) || {
  show
  fail "host checks failed (exit $tool_rc)"
}
for i in 0 1; do
  grep -qx "\[h$i\] host $i ok" "$work/out" || {
    show
    fail "missing '[h$i] host $i ok' line"
  }
done
grep -qx "\[h0\] reached $subnet.2" "$work/out" || {
  show
  fail "host 0 did not reach $subnet.2"
}
expect_no_namespaces "$tool_pid"
echo "ok: isolation, environment, connectivity, prefixes"

# --- 2. exit status and stderr prefixes ----------------------------------------------------

# shellcheck disable=SC2016 # expanded by the host's bash
run_tool --hosts 2 --subnet "$subnet" -- \
  bash -c 'echo "to stderr $AIACC_NETEMU_HOST" >&2; exit $((AIACC_NETEMU_HOST == 1 ? 3 : 0))'
((tool_rc == 3)) || {
  show
  fail "expected exit status 3 from host 1, got $tool_rc"
}
grep -qx "\[h1\] to stderr 1" "$work/err" || {
  show
  fail "host stderr not prefixed on stderr"
}
expect_no_namespaces "$tool_pid"
echo "ok: exit status 3 propagated"

run_tool --hosts 3 --flow-gbit 0 -- true
((tool_rc == 0)) || {
  show
  fail "'true' on 3 hosts without a flow cap exited $tool_rc"
}
expect_no_namespaces "$tool_pid"
echo "ok: 3 hosts, link cap only"

# --- 3. cleanup on SIGTERM -----------------------------------------------------------------

"$tool" --hosts 2 --subnet "$subnet" -- sleep 60 >"$work/out" 2>"$work/err" &
tool_pid=$!
sleepers=()
for ((t = 0; t < 100; t++)); do # up to 10 s for both hosts to start sleeping
  mapfile -t sleepers < <(ip netns pids "aiacc-$tool_pid-h0" 2>/dev/null
    ip netns pids "aiacc-$tool_pid-h1" 2>/dev/null)
  ((${#sleepers[@]} < 2)) || break
  sleep 0.1
done
((${#sleepers[@]} >= 2)) || {
  kill "$tool_pid" 2>/dev/null || true
  fail "host commands did not start"
}
kill -TERM "$tool_pid"
tool_rc=0
wait "$tool_pid" || tool_rc=$?
((tool_rc == 143)) || {
  show
  fail "expected exit status 143 after SIGTERM, got $tool_rc"
}
for p in "${sleepers[@]}"; do
  ! kill -0 "$p" 2>/dev/null || fail "host process $p survived SIGTERM cleanup"
done
expect_no_namespaces "$tool_pid"
echo "ok: SIGTERM cleans up"
echo "PASS"
