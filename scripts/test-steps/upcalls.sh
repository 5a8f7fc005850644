# Steps of scripts/test: the real-time upcalls.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

upcalls() {
step "real-time upcalls: admission of the example set (its second job misses)"
# A refusal is exit code 3 (scripts can tell it from a failure): the example set is refused.
admit_rc=0
kairos rtu admit examples/rtu/handlers.toml --json > target/test-results/rtu-admit.json || admit_rc=$?
[ "$admit_rc" = 3 ] || { echo "rtu admit: expected exit code 3 (refused), got $admit_rc"; exit 1; }
grep -q '"admitted":false' target/test-results/rtu-admit.json \
  && grep -q '"name":"b","priority":1,"utilisation":0.6,"blocking_us":0.0,"response_time_us":11.0,"worst_job":1' target/test-results/rtu-admit.json \
  || { echo "rtu admit: expected b refused at job 1 with a response of 11 us:"; cat target/test-results/rtu-admit.json; exit 1; }
echo "rtu admit ok"
kairos rtu deadlines --quick --json --results target/test-results > target/test-results/rtu-deadlines.json
grep -q 'min_slack.png' target/test-results/rtu-deadlines.json && grep -q '"min_slack_us"' target/test-results/rtu-deadlines.json \
  || { echo "rtu deadlines: expected rows and min_slack.png"; exit 1; }
if grep -q '"stall_watch_realtime":true' target/test-results/rtu-deadlines.json; then
  grep -q '"unexplained_admitted_misses":0' target/test-results/rtu-deadlines.json \
    || { echo "rtu deadlines: an admitted set missed a deadline with no machine stall or demotion to explain it:"; cat target/test-results/rtu-deadlines.json; exit 1; }
  echo "rtu deadlines ok: every miss of an admitted set (if any) coincides with a stall the watch saw or a demoted handler"
else
  echo "rtu deadlines ok (the stall watch was not real-time here, so misses are not attributed)"
fi
kairos rtu switches --quick --json --results target/test-results > target/test-results/rtu-switches.json
grep -q '"switch_ratio"' target/test-results/rtu-switches.json && grep -q '"way":"threads + PI mutex"' target/test-results/rtu-switches.json \
  || { echo "rtu switches: expected both ways and the ratio"; exit 1; }
echo "rtu switches ok"
# Two of --quick's seven points: the rows of every way and the cpusets' undo are what is checked.
kairos rtu sched-deadline --quick --utilisation 0.5,0.9 --json --results target/test-results > target/test-results/rtu-sched-deadline.json
grep -q '"scheduler":"RMDP (one core)"' target/test-results/rtu-sched-deadline.json \
  || { echo "rtu sched-deadline: expected the RMDP rows beside SCHED_DEADLINE's (or its refusal)"; exit 1; }
if [ -f /sys/fs/cgroup/cpuset/cpuset.sched_load_balance ]; then
  # The one-core domain changes a system-wide setting for its points: it must be put back.
  [ "$(cat /sys/fs/cgroup/cpuset/cpuset.sched_load_balance)" = 1 ] && ! ls /sys/fs/cgroup/cpuset | grep -q '^kairos-dl-' \
    || { echo "rtu sched-deadline: the one-core cpusets were not removed, or load balancing not restored"; exit 1; }
fi
echo "rtu sched-deadline ok: $(grep -o '"refused":"[^"]*"' target/test-results/rtu-sched-deadline.json | sort | uniq -c | tr '\n' ' ')$(grep -o '"one_core":"[^"]*"' target/test-results/rtu-sched-deadline.json)"
kairos rtu throughput --quick --json --results target/test-results > target/test-results/rtu-throughput.json
grep -q '"receiver":"plain loop"' target/test-results/rtu-throughput.json && grep -q '"receiver":"rtu + io thread"' target/test-results/rtu-throughput.json && grep -q '"received_pps"' target/test-results/rtu-throughput.json \
  || { echo "rtu throughput: expected rows for the three receivers"; exit 1; }
echo "rtu throughput ok"
kairos rtu partition --quick --json --results target/test-results > target/test-results/rtu-partition.json
grep -q '"spread"' target/test-results/rtu-partition.json && grep -q '"way":"threads"' target/test-results/rtu-partition.json \
  || { echo "rtu partition: expected per-stream rows for both ways"; exit 1; }
echo "rtu partition ok"
}
