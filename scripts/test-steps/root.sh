# Steps of scripts/test: what only root can check of the command itself: signals, the af_packet rings, the host doctor.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

signals() {
step "signals: SIGINT, SIGTERM and SIGHUP mid-run end it with 128 + the signal and undo its children, namespaces and cpusets (release, root)"
root_tests cli "the signal tests" signals::
}

af_packet() {
step "the af_packet rings across two namespaces: TX ring to the peer's RX ring and a UDP socket, with kernel stamps (release, root)"
root_tests af_packet "the af_packet ring tests"
}

doctor() {
step "the host doctor: --apply changes what it records and --revert puts every setting it may touch back (release, root)"
root_tests cli "the doctor's apply and revert test" doctor::
}
