# Steps of scripts/test: the libraries' smoke runs: memcheck, the benchmarks, the examples, the main command, dispatch's cache cost.
# Sourced by scripts/test, which defines `step`, `kairos` (the release binary the test build made) and $KAIROS.
# shellcheck shell=bash

valgrind_stress() {
if command -v valgrind >/dev/null; then
  step "stress test under valgrind memcheck (reduced size)"
  bin=$(cargo test --workspace --release --locked --test stress --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "/crates/rcu#" in m["package_id"]:
        print(m["executable"])')
  [ -x "$bin" ] || { echo "no stress test binary of kairos-rcu found"; exit 1; }
  KAIROS_STRESS_SCALE=0.02 valgrind --error-exitcode=99 --quiet "$bin" --test-threads=1
else
  echo "valgrind not installed (run as root to install it): memcheck run skipped"
fi
}

examples() {
step "the libraries' examples, run as a user would (the store's web app runs against kv cluster below)"
for example in rcu/route_table ring/freshest dispatch/scale_down; do
  out=target/test-results/example-${example#*/}.out
  ./target/release/examples/"${example#*/}" > "$out" 2>&1 \
    || { echo "example $example failed:"; cat "$out"; exit 1; }
  echo "example $example: $(tail -n 1 "$out")"
done
grep -q "^inline .* in [1-9][0-9]* calls of the packet loop" target/test-results/example-route_table.out \
  && grep -q "^offload .* in 0 calls of the packet loop" target/test-results/example-route_table.out \
  || { echo "route_table: the inline reader should free tables and the offload one none"; cat target/test-results/example-route_table.out; exit 1; }
}

main_command() {
step "the main command, quick"
kairos rcu-latency --quick --runs 1 --storm 1660 --results target/test-results >/dev/null
echo "rcu-latency smoke run ok"
}

dispatch_cold() {
step "dispatch: a flow's state costs more fresh from the other core than warm (release: a debug build's own work per packet hides the miss)"
if [ "$(nproc)" -ge 2 ]; then
  kairos dispatch cold --quick --json --results target/test-results > target/test-results/dispatch-cold.json
  python3 - target/test-results/dispatch-cold.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["chained"]
warm, cross = c["warm_ns"]["median"], c["cross_core_ns"]["median"]
# Moving a line between cores is a coherence transaction; touching one's own is not.
if not (0 < warm < cross and r["cold_ns"] > 0):
    print(f"dispatch cold: expected warm < cross-core, got {warm} and {cross} ns ({r['cold_ns']} ns cold)"); sys.exit(1)
print(f"dispatch cold ok: warm {warm:.1f} ns, cross-core {cross:.1f} ns, memory {c['memory_ns']['median']:.1f} ns a packet (chained medians)")
PY
else
  echo "one core: the cross-core cost cannot be measured here"
fi
}
