# Steps of scripts/test: fuzzing every parser of outside input.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash
#
# Every parser of outside input has a fuzz target (fuzz/fuzz_targets), run on the stable toolchain
# (RUSTC_BOOTSTRAP=1 lets cargo-fuzz use its nightly flags), each input bounded in time and memory.
# A crash, a hang or an allocation past the limit fails the test and prints the target and the
# input, to become a regression test. The targets are built without a sanitizer; the limit on one
# allocation is their allocator's (fuzz/src/lib.rs says why).

# Seconds per target: a regression gate, not a campaign (the corpus grows in fuzz/corpus).
fuzz_seconds=4
# Targets at a time: two a core, so that each has about two seconds of a core, in which it runs
# its corpus again and thousands of new inputs (the slowest, lane_control's TOML with its
# validation, some 20,000).
fuzz_parallel=$((2 * $(nproc)))

# Where cargo-fuzz puts the targets' binaries: the host's triple.
fuzz_bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"
# Written by a build that succeeded in this run: fuzz_run fuzzes nothing older.
fuzz_built=target/test-results/fuzz-built
# Both are read by fuzz_build in the background's shell and by fuzz_one in xargs's.
export fuzz_bin fuzz_built

# The build, run in the background (see scripts/test): cargo-fuzz installed first when missing
# and root. Without cargo-fuzz it builds nothing and says so (fuzz_run then skips).
fuzz_build() {
  rm -f "$fuzz_built"
  if ! command -v cargo-fuzz >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
  fi
  command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing and not root: not built"; return 0; }
  RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer none
  touch "$fuzz_built"
}

# One target: its binary on its corpus for $fuzz_seconds, output in target/test-results/fuzz/.
fuzz_one() {
  local t=$1 dict found
  case $t in
    topology_toml | requests_toml | handlers_toml) dict=(-dict=fuzz/dicts/toml.dict) ;;
    trace_parse) dict=(-dict=fuzz/dicts/trace.dict) ;;
    lane_control) dict=(-dict=fuzz/dicts/lane.dict) ;;
    sockperf_log) dict=(-dict=fuzz/dicts/sockperf.dict) ;;
    resp_request) dict=(-dict=fuzz/dicts/resp.dict) ;;
    *) dict=() ;;
  esac
  found="$PWD/target/test-results/fuzz/$t"
  rm -rf "$found" && mkdir -p "$found"
  if "$fuzz_bin/$t" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$found/" "${dict[@]}" "fuzz/corpus/$t" > "$found.log" 2>&1; then
    echo "$t: no crash in $fuzz_seconds s ($(grep -o 'Done [0-9]* runs' "$found.log"))"
  else
    echo "fuzz target $t failed (log: $found.log):"
    grep -m 1 -A 6 -E 'panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer' "$found.log" || tail -n 20 "$found.log"
    for input in "$found"/*; do
      [ -f "$input" ] && echo "the input ($(basename "$input")), base64: $(base64 -w 0 "$input")"
    done
    return 1
  fi
}

# Every target, as many at once as there are cores (each fuzzer is one thread).
fuzz_run() {
  if ! [ -f "$fuzz_built" ]; then
    echo "cargo-fuzz missing and not root (run as root to install it): fuzzing skipped (the decoder's property test ran above)"
    return 0
  fi
  # Every target cargo-fuzz knows (fuzz/Cargo.toml's [[bin]]s), so a new one is fuzzed too.
  local fuzz_targets
  mapfile -t fuzz_targets < <(cargo fuzz list)
  step "fuzz every parser of outside input (${#fuzz_targets[@]} targets), $fuzz_seconds s each, $fuzz_parallel at a time"
  # Seeds: the example files each reader is given, and the small files under fuzz/seeds.
  for t in "${fuzz_targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    if [ -d "fuzz/seeds/$t" ]; then cp fuzz/seeds/"$t"/* "fuzz/corpus/$t/"; fi
  done
  cp examples/lane/leaf-spine.toml fuzz/corpus/topology_toml/
  cp examples/lane/requests.toml fuzz/corpus/requests_toml/
  cp examples/rtu/handlers.toml fuzz/corpus/handlers_toml/
  local failed=0 t
  # xargs runs them $fuzz_parallel at a time and waits for all; each prints its own verdict line.
  export -f fuzz_one
  export fuzz_seconds
  printf '%s\n' "${fuzz_targets[@]}" | xargs -P "$fuzz_parallel" -I{} bash -c 'fuzz_one {}' || failed=1
  [ "$failed" = 0 ] || { echo "fuzzing found the failures above"; exit 1; }
}
