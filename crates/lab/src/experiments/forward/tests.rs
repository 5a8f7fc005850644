use super::*;

#[test]
fn the_sender_defaults_to_another_core_than_the_forwarders_when_that_is_known() {
    let last = kairos_sys::proc::last_core();
    let pinned = |core| {
        let mut c = ForwardConfig::default();
        c.forwarder.pin_core = core;
        c
    };
    assert_eq!(pinned(None).default_source_core(), None, "no forwarder core, no pin");
    if last == 0 {
        assert_eq!(pinned(Some(0)).default_source_core(), None, "one core: nowhere else");
        return;
    }
    assert_eq!(pinned(Some(0)).default_source_core(), Some(1));
    assert_eq!(pinned(Some(last)).default_source_core(), Some(0));
    // testpmd polls on the last core, whatever the pinned core says.
    let peer = ForwardConfig { peer: Some(Peer::DpdkTestpmd), ..pinned(Some(0)) };
    assert_eq!((peer.forwarder_core(), peer.default_source_core()), (Some(last), Some(0)));
}
