# Steps of scripts/test: the express lane: the planner, the testbed, the nodes, the latency experiment.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

lane_plan() {
step "the express lane: plan and validate the example, exit 3 on a refusal, refuse bad files (exit 2), the tightness report (quick)"
kairos lane plan --topology examples/lane/leaf-spine.toml --requests examples/lane/requests.toml \
  --validate 200 --json > target/test-results/lane-plan.json
[ "$(grep -o '"admitted":true' target/test-results/lane-plan.json | wc -l)" = 3 ] \
  && grep -q '"violations":0,"drops":0' target/test-results/lane-plan.json \
  || { echo "lane plan: expected 3 tunnels admitted and validated without violation or drop"; exit 1; }
printf '[[request]]\nname = "jumbo"\nsender = "h0_0"\nreceivers = ["h1_0"]\npacket_bytes = 70000\nperiod_ns = 1e6\n' \
  > target/test-results/refused.toml
code=0
kairos lane plan --topology examples/lane/leaf-spine.toml --requests target/test-results/refused.toml \
  > target/test-results/refused.out || code=$?
[ "$code" = 3 ] && grep -q "jumbo .* refused: no room for 70000 B" target/test-results/refused.out \
  || { echo "lane plan: expected exit 3 and the refusal of a packet larger than every queue, got $code:"; cat target/test-results/refused.out; exit 1; }
printf '[[node]]\nname = "a"\nkind = "host"\n[[link]]\nfrom = "a"\nto = "b"\nbandwidth_bps = 1e9\nqueue_bytes = 1000\nmin_delay_ns = 0\nmax_jitter_ns = 0\n' \
  > target/test-results/bad.toml
code=0
kairos lane plan --topology target/test-results/bad.toml --requests examples/lane/requests.toml \
  2> target/test-results/bad.err || code=$?
[ "$code" = 2 ] || { echo "lane plan: a topology with a link to an unknown node should exit 2 (usage), got $code"; exit 1; }
[ "$(wc -l < target/test-results/bad.err)" = 1 ] && grep -q "line 6: unknown node 'b'" target/test-results/bad.err \
  || { echo "lane plan: expected a one-line error naming line 6, got:"; cat target/test-results/bad.err; exit 1; }
code=0
kairos lane plan --topology /dev/zero --requests examples/lane/requests.toml 2> target/test-results/zero.err || code=$?
[ "$code" = 2 ] && [ "$(wc -l < target/test-results/zero.err)" = 1 ] \
  && grep -q "/dev/zero: is a device, expected a file" target/test-results/zero.err \
  || { echo "lane plan: expected /dev/zero refused in one line with exit 2, got $code:"; cat target/test-results/zero.err; exit 1; }
kairos lane tightness --quick --json --results target/test-results > target/test-results/lane-tightness.json
grep -q '"violations":0,"drops":0' target/test-results/lane-tightness.json \
  && grep -q 'jitter_ratio.png' target/test-results/lane-tightness.json \
  || { echo "lane tightness: expected no violation, no drop, and its plots"; exit 1; }
echo "lane plan and tightness ok: $(cat target/test-results/bad.err)"
# Policing: the offender hears BW_EXCEEDED and loses its excess.
# How many periods BW_EXCEEDED took is printed, not checked: a timing on a shared machine.
kairos lane police --quick --json --results target/test-results > target/test-results/lane-police.json
police=target/test-results/lane-police.json
grep -q '"bw_exceeded_after_first_drop_periods":null' "$police" \
  && { echo "lane police: the offender never heard BW_EXCEEDED"; cat "$police"; exit 1; }
grep -q '"excess_dropped":0,' "$police" \
  && { echo "lane police: the offender's excess was not dropped"; cat "$police"; exit 1; }
echo "lane police ok: $(grep -o '"bw_exceeded_after_first_drop_periods":[0-9.]*' "$police"), $(grep -o '"excess_dropped":[0-9]*' "$police"), $(grep -o '"p999_ratio":{[^}]*}' "$police")"
}

lane_testbed() {
step "the lane testbed: lane probes keep their latency through a bulk flood at both egresses (release, root)"
root_tests lane_testbed "the lane testbed's strict-priority test" --nocapture
}

lane_node_packet() {
step "the lane's nodes on the packet-ring transport: messages cross a two-host testbed with kernel stamps in the lane class, an unresolved peer counted (release, root)"
root_tests node_packet "the lane's packet-transport node test"
}

lane_latency_peers() {
step "the lane latency experiment's peer rows and load: four peers idle and under an iperf3 flood and stress-ng, nothing left (release, root)"
root_tests lane_latency "the lane latency peers' test" --nocapture
}

lane_e2e() {
step "the express lane end to end: testbed, controller, three nodes, applications; every message within the bound its node promised (or during a stall), strangers refused, a controller SIGKILLed and restarted (release, root)"
root_tests cli "the lane's end-to-end test" --nocapture lane_e2e::
}

lane_latency() {
step "the lane latency experiment, quick: every row idle and under the flood, each with its figures, the lane on a path of its own and on the shared one (release, root)"
if [ "$(id -u)" = 0 ]; then
  latency=target/test-results/lane-latency.json
  kairos lane latency --quick --json --results target/test-results > "$latency"
  for name in "kairos lane" "kairos lane, shared receive path" "kairos lane, no host tuning" "udp blocking" "udp busy-poll" "priority only" "sockperf"; do
    for load in idle flood; do
      # sockperf sends for whole seconds, and fewer when a round trip outlasts the period.
      sent=3000; [ "$name" = sockperf ] && sent='[1-9][0-9]*'
      # Without the host's tuning the flood may take every message (the row is there to show
      # what an untuned host suffers): a row all lost is a figure, with a latency of none.
      all_lost='$^'
      [ "$name" = "kairos lane, no host tuning" ] && all_lost="\"lost\":$sent,\"latency_ns\":{\"min\":0"
      grep -qE "\{\"name\":\"$name\",\"load\":\"$load\",\"packets\":$sent,(\"lost\":[0-9]*,\"latency_ns\":\{\"min\":[1-9]|$all_lost)" "$latency" \
        || { echo "lane latency: no row \"$name\" ($load) with its messages and a latency"; cat "$latency"; exit 1; }
    done
  done
  # Every lane row checked its messages against the tunnel's bound (a number, not null).
  [ "$(grep -o '"bound_violations":[0-9][0-9]*' "$latency" | wc -l)" = 6 ] \
    || { echo "lane latency: the six lane rows must each count bound violations"; cat "$latency"; exit 1; }
  for plot in latency_over_time_flood.png jitter_flood.png latency_tail_flood.png; do
    grep -q "$plot" "$latency" || { echo "lane latency: no plot $plot"; exit 1; }
  done
  echo "lane latency ok: $(grep -o '"goals":{[^}]*}' "$latency")"
else
  echo "not root: the lane latency experiment skipped"
fi
}
