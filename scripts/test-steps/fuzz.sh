# Steps of scripts/test: fuzzing every parser of outside input.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash
#
# Every parser of outside input has a fuzz target (fuzz/fuzz_targets), run on the stable toolchain
# (RUSTC_BOOTSTRAP=1 lets cargo-fuzz use its nightly flags), each input bounded in time and memory.
# A crash, a hang or an allocation past the limit fails the test and prints the target and the
# input, to become a regression test.

fuzz_targets=(packet_decode chunk_decode topology_toml requests_toml handlers_toml trace_parse lane_control udp_frame sockperf_log resp_request raft_wire fd_heartbeat grpc_frames member_datagram store_snapshot store_commands)
# Seconds per target: a regression gate, not a campaign (the corpus grows in fuzz/corpus).
fuzz_seconds=5

# The build, run in the background (see scripts/test): cargo-fuzz installed first when missing
# and root. Returns non-zero when there is nothing to fuzz with.
fuzz_build() {
  if ! command -v cargo-fuzz >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
  fi
  command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing and not root: not built"; return 0; }
  RUSTC_BOOTSTRAP=1 cargo fuzz build
}

# One target: its binary on its corpus for $fuzz_seconds, output in target/test-results/fuzz/.
fuzz_one() {
  local t=$1 dict found
  case $t in
    packet_decode | chunk_decode | udp_frame | raft_wire | grpc_frames) dict=() ;;
    trace_parse) dict=(-dict=fuzz/dicts/trace.dict) ;;
    lane_control) dict=(-dict=fuzz/dicts/lane.dict) ;;
    sockperf_log) dict=(-dict=fuzz/dicts/sockperf.dict) ;;
    resp_request) dict=(-dict=fuzz/dicts/resp.dict) ;;
    *) dict=(-dict=fuzz/dicts/toml.dict) ;;
  esac
  found="$PWD/target/test-results/fuzz/$t"
  rm -rf "$found" && mkdir -p "$found"
  if fuzz/target/x86_64-unknown-linux-gnu/release/"$t" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
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
  if ! [ -x fuzz/target/x86_64-unknown-linux-gnu/release/store_commands ]; then
    echo "cargo-fuzz missing and not root (run as root to install it): fuzzing skipped (the decoder's property test ran above)"
    return 0
  fi
  step "fuzz every parser of outside input, $fuzz_seconds s each, $(nproc) at a time"
  # Seeds: the example files each reader is given, and the small files under fuzz/seeds.
  for t in "${fuzz_targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    if [ -d "fuzz/seeds/$t" ]; then cp fuzz/seeds/"$t"/* "fuzz/corpus/$t/"; fi
  done
  cp examples/lane/leaf-spine.toml fuzz/corpus/topology_toml/
  cp examples/lane/requests.toml fuzz/corpus/requests_toml/
  cp examples/rtu/handlers.toml fuzz/corpus/handlers_toml/
  local failed=0 t
  # xargs runs them nproc at a time and waits for all; each prints its own verdict line.
  export -f fuzz_one
  export fuzz_seconds
  printf '%s\n' "${fuzz_targets[@]}" | xargs -P "$(nproc)" -I{} bash -c 'fuzz_one {}' || failed=1
  [ "$failed" = 0 ] || { echo "fuzzing found the failures above"; exit 1; }
}
