//! `cargo fuzz run store_commands`: every command handler of the store over words no client
//! would send (names from the command table, options, numbers and ranges from a vocabulary,
//! and raw bytes), applied as the log applies them. No handler panics, two members that
//! apply the same entries agree, and a member restored from a snapshot halfway agrees with
//! both (`Store::check_any_commands`).
#![no_main]

use kairos_fuzz as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kairos_kv::kv::store::check_any_commands(data);
});
