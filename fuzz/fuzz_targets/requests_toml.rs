//! `cargo fuzz run requests_toml`: any text given to `kairos lane plan --requests` either yields
//! requests that pass their own validation, or is refused with an error; never a panic. The
//! requests are read against the example leaf-spine topology, so that names in the input can
//! resolve to hosts and switches and the checks behind name resolution are reached.
#![no_main]

use std::sync::LazyLock;

use kairos_fuzz as _;
use kairos_te::{Topology, requests_from_toml};
use libfuzzer_sys::fuzz_target;

static TOPOLOGY: LazyLock<Topology> = LazyLock::new(|| {
    Topology::from_toml(include_str!("../../examples/lane/leaf-spine.toml"), "leaf-spine.toml")
        .expect("the example topology loads")
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(requests) = requests_from_toml(text, "fuzz.toml", &TOPOLOGY) {
        for r in &requests {
            r.validate(&TOPOLOGY).expect("a loaded request validates");
        }
    }
});
