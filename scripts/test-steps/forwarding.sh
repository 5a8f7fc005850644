# Steps of scripts/test: the forwarding sweep and its claims.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

forwarding_sweep() {
step "the forwarding sweep, quick (memory; and packet rings across two namespaces when root, with shorter traces, beside dpdk-testpmd)"
# The sweep's claimed checks (the claims docs/forwarding.md makes) must hold. They compare ages measured on
# this shared machine, so a failed check is run again once (a whole second sweep): a claim fails
# the test only when it fails twice in a row, and both runs' figures are printed.
sweep() {
  local attempt
  for attempt in 1 2; do
    kairos sweep --quick --results target/test-results --json "$@" \
      > target/test-results/sweep.json
    for plot in fig3a_baseline_age fig3b_baseline_batch fig4_age fig4_drops fig4_misaddressed fig4c_per_user_age \
                update_rate_crossover beyond_age beyond_baseline_age age_control age_control_rate; do
      grep -q "$plot.png" target/test-results/sweep.json || { echo "sweep $* did not write $plot.png"; exit 1; }
    done
    grep -q '"checks":\[{' target/test-results/sweep.json || { echo "sweep $* computed no acceptance check"; exit 1; }
    # Observations (checks docs/forwarding.md does not claim, such as the baseline's over UDP, where the
    # kernel and not the forwarder's ring is the bottleneck) are printed but do not fail the test.
    grep -o '{"name":"[^"]*","held":false,"claim":false,"detail":"[^"]*"}' target/test-results/sweep.json \
      | sed 's/^/observation that did not hold: /' || true
    if ! grep -q '"held":false,"claim":true' target/test-results/sweep.json; then
      echo "sweep $* wrote every plot; $(grep -o '"held":true,"claim":true' target/test-results/sweep.json | wc -l) claimed checks held (run $attempt)"
      return 0
    fi
    echo "sweep $* run $attempt: claimed checks that did not hold:"
    grep -o '{"name":"[^"]*","held":false,"claim":true,"detail":"[^"]*"}' target/test-results/sweep.json
  done
  echo "sweep $*: the checks above failed in two runs in a row"; exit 1
}
# Half the quick preset's trace: the claims are about the shape of the curves, which 100,000
# packets a run show as well (the main job, `sweep --quick`, keeps 200,000).
sweep --backend memory --packets 100000
if [ "$(id -u)" = 0 ]; then
  # Across the namespaces on packet rings: Kairos's run-to-completion forwarder beside
  # dpdk-testpmd on the same veth (the UDP backend's runs are in kairos-lab's tests).
  sweep --backend packet --packets 20000
  grep -q '"threading":"run-to-completion"' target/test-results/sweep.json \
    || { echo "the packet sweep has no run-to-completion rows"; exit 1; }
  if command -v dpdk-testpmd >/dev/null; then
    grep -q '"peer":"measured' target/test-results/sweep.json && grep -q '"fib":"dpdk-testpmd"' target/test-results/sweep.json \
      && grep -q '"packet-peer":' target/test-results/sweep.json \
      || { echo "dpdk-testpmd is installed but the packet sweep has no peer rows or no peer maximum rate"; exit 1; }
    python3 - target/test-results/sweep.json <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["experiment"] in ("baseline", "peer-baseline")]
for who, pick in [("Kairos", lambda r: r["fib"] != "dpdk-testpmd"), ("dpdk-testpmd", lambda r: r["fib"] == "dpdk-testpmd")]:
    if not any(pick(r) and r["cpu_ns_per_packet"] > 0 for r in rows):
        print(f"the packet sweep measured no CPU time per packet for {who}"); sys.exit(1)
# Kairos's forwarder times how long it held each packet (receive stamp to send call).
if not any(r["fib"] != "dpdk-testpmd" and r["fwd_held_ns"] > 0 for r in rows):
    print("the packet sweep's Kairos rows have no time held in the forwarder"); sys.exit(1)
PY
    grep -o '{"name":"packet: [^"]*dpdk-testpmd[^"]*","held":[a-z]*,"claim":false,"detail":"[^"]*"}' target/test-results/sweep.json \
      | sed 's/^/against dpdk-testpmd: /'
    echo "the dpdk-testpmd peer ran beside Kairos's run-to-completion forwarder"
  fi
else
  echo "not root: the sweep across namespaces skipped"
fi
}
