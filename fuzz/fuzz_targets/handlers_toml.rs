//! `cargo fuzz run handlers_toml`: any text given to `kairos rtu admit` either yields handlers
//! with positive periods, batches, iterations and costs, or is refused with an error; never a
//! panic.
#![no_main]

use kairos_fuzz as _;
use kairos_rtu::file::handlers_from_toml;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(handlers) = handlers_from_toml(text, "fuzz.toml") {
        assert!(!handlers.is_empty(), "an empty handler set was accepted");
        for h in &handlers {
            assert!(
                h.period_ns > 0 && h.batch > 0 && h.iteration > 0 && h.unit_cost_ns > 0,
                "a handler with a zero field was accepted: {h:?}"
            );
        }
    }
});
