//! `cargo fuzz run topology_toml`: any text given to `kairos lane plan --topology` either loads
//! or is refused with an error; never a panic. A topology that loads is written back with
//! `to_toml` and must load again to the same nodes and links, since plans are saved that way.
#![no_main]

use kairos_fuzz as _;
use kairos_te::Topology;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(topo) = Topology::from_toml(text, "fuzz.toml") else { return };
    let written = topo.to_toml();
    let again = Topology::from_toml(&written, "written.toml")
        .unwrap_or_else(|e| panic!("to_toml wrote a file from_toml refuses: {e}\n{written}"));
    assert_eq!(again.nodes(), topo.nodes(), "nodes changed through to_toml");
    assert_eq!(again.links(), topo.links(), "links changed through to_toml");
});
