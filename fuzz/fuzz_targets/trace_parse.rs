//! `cargo fuzz run trace_parse`: any text in a trace file either loads or is refused with an
//! error; never a panic. A trace that loads is written back with `write_text` and must load
//! again to the same trace, since a sweep replays saved traces to repeat a run exactly.
#![no_main]

use kairos_forward::trace::Trace;
use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(trace) = Trace::parse(text, "fuzz.trace") else { return };
    let mut written = Vec::new();
    trace.write_text(&mut written).expect("writing to memory cannot fail");
    let written = String::from_utf8(written).expect("write_text writes UTF-8");
    let again = Trace::parse(&written, "written.trace")
        .unwrap_or_else(|e| panic!("write_text wrote a trace parse refuses: {e}\n{written}"));
    assert_eq!(again, trace, "the trace changed through write_text");
});
