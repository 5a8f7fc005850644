//! The forwarder's failure paths: a configuration it cannot run is an error before any thread
//! starts, never a panicked thread that leaves its caller waiting.

use std::sync::atomic::AtomicBool;

use kairos_fib::{AddrTuple, SeqlockFib};
use kairos_forward::forwarder::{self, ForwarderError};
use kairos_forward::{ForwarderConfig, RingPolicy};
use kairos_io::memory::pair;

fn run(config: &ForwarderConfig, users: u32) -> Result<forwarder::ForwarderStats, ForwarderError> {
    let (_src_out, fwd_in) = pair(64, 64);
    let (fwd_out, _src_in) = pair(64, 64);
    let fib = SeqlockFib::new(0..users, AddrTuple::new(forwarder::NEXT_HOP, 0));
    let (stop, started) = (AtomicBool::new(true), AtomicBool::new(false));
    forwarder::run(config, users, Some(&fib), fwd_in, fwd_out, &stop, &started)
}

/// A keep-latest data ring for no users used to panic the forwarder's thread ("ring sizes are
/// validated: NoKeys") and leave the caller spinning on `started` forever.
#[test]
fn no_users_with_a_keep_latest_ring_is_an_error_not_a_panic() {
    let config = ForwarderConfig { data_policy: RingPolicy::KeepLatest, ..ForwarderConfig::default() };
    match run(&config, 0) {
        Err(ForwarderError::Config(why)) => assert!(why.to_string().contains("at least one user"), "{why}"),
        other => panic!("expected a config error, got {other:?}"),
    }
}

/// A data ring of 2^64 - 1 entries used to panic a thread ("TooLarge") and hang the run.
#[test]
fn a_ring_that_cannot_be_made_is_an_error() {
    let config = ForwarderConfig { data_ring: usize::MAX, ..ForwarderConfig::default() };
    assert!(
        matches!(run(&config, 10), Err(ForwarderError::Config(why)) if why.to_string().contains("data ring"))
    );
}

/// A valid configuration runs and stops when told (here: at once).
#[test]
fn a_valid_configuration_runs_and_stops() {
    let stats = run(&ForwarderConfig::default(), 10).unwrap();
    assert_eq!(stats.rx_packets, 0);
}
