//! `cargo fuzz run sockperf_log`: any text given as sockperf's full log is either read into
//! samples or refused with an error; never a panic. What is read holds what the experiment
//! relies on: sequence numbers from 0 without gaps, each reply no earlier than its request, no
//! kernel stamp, and no more samples than requests sent. Each input is read with an origin of
//! 0 and with one near the top of the clock, where the placing of stamps must saturate, not
//! overflow.
#![no_main]

use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

use kairos_peers::sockperf;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for origin_ns in [0, u64::MAX - 1_000] {
        let Ok(run) = sockperf::parse(text, origin_ns) else { continue };
        assert!(run.samples.len() as u64 <= run.sent, "more samples than requests sent");
        for (i, sample) in run.samples.iter().enumerate() {
            assert_eq!(sample.seq, i as u64, "sequence numbers with a gap");
            assert!(sample.received_ns >= sample.sent_ns, "a reply before its request: {sample:?}");
            assert!(sample.sent_ns >= origin_ns, "a request before the origin: {sample:?}");
            assert_eq!(sample.kernel_ns, None);
        }
    }
});
