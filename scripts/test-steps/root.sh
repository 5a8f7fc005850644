# Steps of scripts/test: what only root can check of the command itself: signals, the af_packet rings, the host doctor.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

signals() {
step "signals: SIGINT, SIGTERM and SIGHUP mid-run end it with 128 + the signal and undo its children, namespaces and cpusets (release, root)"
if [ "$(id -u)" = 0 ]; then
  cargo test --release --locked -q --workspace --test signals -- --ignored --test-threads=1
else
  echo "not root: the signal tests skipped"
fi
}

af_packet() {
step "the af_packet rings across two namespaces: TX ring to the peer's RX ring and a UDP socket, with kernel stamps (release, root)"
if [ "$(id -u)" = 0 ]; then
  cargo test --release --locked -q --workspace --test af_packet -- --ignored --test-threads=1
else
  echo "not root: the af_packet ring tests skipped"
fi
}

doctor() {
step "the host doctor: --apply changes what it records and --revert puts every setting it may touch back (release, root)"
if [ "$(id -u)" = 0 ]; then
  cargo test --release --locked -q --workspace --test doctor -- --ignored --test-threads=1
else
  echo "not root: the doctor's apply and revert test skipped"
fi
}
