#!/usr/bin/env bash
# Longer fuzzing with libFuzzer: configures $FUZZ_BUILD_DIR (default build-clangfuzz: clang,
# -Dfuzz=true, every library instrumented for coverage with ASan + UBSan), builds the
# <target>_libfuzzer programs of tests/fuzz/ and runs each for $FUZZ_SECONDS (default 60) from
# its seed corpus (tests/fuzz/corpus/<target>/). Prints the executions of every target and each
# finding (crash, sanitizer report, leak, timeout, out-of-memory: the input is saved under
# $FUZZ_OUT/<target>/); exits non-zero when any target found something.
#   scripts/fuzz.sh                      every target
#   scripts/fuzz.sh idx safetensors      some of them
#   FUZZ_SECONDS=600 scripts/fuzz.sh     longer
# Replay a finding: $FUZZ_BUILD_DIR/tests/fuzz/<target>_libfuzzer <saved input>
# Other knobs: FUZZ_BUILD_DIR, FUZZ_OUT (default $FUZZ_BUILD_DIR/fuzz-out: new corpus entries and
# findings), FUZZ_MAX_LEN (default 4096 bytes), FUZZ_NICE (default 19), FUZZ_ARGS (more libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD_DIR:-build-clangfuzz}
out=${FUZZ_OUT:-$build/fuzz-out}
max_len=${FUZZ_MAX_LEN:-4096}
nice_level=${FUZZ_NICE:-19}
all=(config criteo idx safetensors checkpoint ps_table_config ps_request ps_shard_checkpoint net_hello rendezvous)
if [[ $# -gt 0 ]]; then targets=("$@"); else targets=("${all[@]}"); fi

if [[ ! -f $build/build.ninja ]]; then
  # fuzzer-no-link: coverage feedback from the parsers themselves, not only from the harness;
  # -fno-sanitize-recover: a UBSan report stops the run like an ASan one (a finding).
  CC=clang CXX=clang++ nice -n "$nice_level" meson setup "$build" \
    -Dfuzz=true -Dwerror=false -Dbenchmarks=false -Dcuda=disabled -Dcudnn=disabled -Dnccl=disabled \
    -Dbuildtype=debugoptimized -Db_ndebug=false -Db_sanitize=address,undefined -Db_lundef=false \
    "-Dcpp_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
fi
programs=()
for target in "${targets[@]}"; do programs+=("tests/fuzz/${target}_libfuzzer"); done
mkdir -p "$out"
if ! nice -n "$nice_level" ninja -C "$build" "${programs[@]}" >"$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  echo "fuzz.sh: building the fuzz targets failed (log: $out/build.log)" >&2
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for target in "${targets[@]}"; do
  work=$out/$target
  mkdir -p "$work/corpus"
  log=$work/fuzz.log
  echo "== $target: ${seconds} s"
  dict=()
  if [[ -f tests/fuzz/dict/$target.dict ]]; then dict=(-dict="tests/fuzz/dict/$target.dict"); fi
  set +e
  # New inputs go to $work/corpus; the seeds are read, never written.
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  nice -n "$nice_level" "$build/tests/fuzz/${target}_libfuzzer" "$work/corpus" "tests/fuzz/corpus/$target" \
    -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/" "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  if [[ $rc -ne 0 ]]; then
    status=1
    summary+=("$target: FINDING (exit $rc) after ${execs:-?} executions; log $log")
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*deadly signal|.*Test unit written to|.*out-of-memory|.*Timeout|.*ALARM|.*uncaught|.*terminate called|.*what\(\))' "$log" | head -20 || true
  else
    summary+=("$target: ${execs:-?} executions in ${seconds} s, ${cov:-no coverage line}, no finding")
  fi
done
echo
echo "== libFuzzer summary (${seconds} s per target)"
printf '  %s\n' "${summary[@]}"
exit $status
