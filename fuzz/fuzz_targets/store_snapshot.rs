//! `cargo fuzz run store_snapshot`: the store's snapshot decoder (`Store::decode`) over any
//! bytes a snapshot from another member can hold. They decode or fail with a reason, never a
//! panic or an allocation past their length; a store that decodes encodes to bytes that decode
//! to the same store, and encoding is canonical (keys and sessions sorted): encoding the
//! decoded store again gives the same bytes.
#![no_main]

use kairos_fuzz as _;
use kairos_kv::kv::Store;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(store) = Store::decode(data) else { return };
    let mut bytes = Vec::new();
    store.encode(&mut bytes);
    let again = Store::decode(&bytes).expect("an encoded store decodes");
    assert_eq!(again, store);
    let mut twice = Vec::new();
    again.encode(&mut twice);
    assert_eq!(twice, bytes, "encoding is not canonical");
});
