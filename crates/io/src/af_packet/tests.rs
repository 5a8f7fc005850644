use super::*;

const ARP: &str = "IP address       HW type     Flags       HW address            Mask     Device
10.211.0.2       0x1         0x2         aa:bb:cc:dd:ee:0f     *        ks1x0
10.211.0.3       0x1         0x0         00:00:00:00:00:00     *        ks1x0
10.211.0.4       0x1         0x6         02:00:00:00:00:04     *        ks1x0
10.211.0.2       0x1         0x2         02:00:00:00:00:99     *        other0
";

#[test]
fn neighbours_are_read_from_complete_entries_of_the_interface() {
    let ip = |last| Ipv4Addr::new(10, 211, 0, last);
    assert_eq!(arp_table_entry(ARP, ip(2), "ks1x0"), Some([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x0f]));
    assert_eq!(arp_table_entry(ARP, ip(2), "other0"), Some([2, 0, 0, 0, 0, 0x99]));
    assert_eq!(arp_table_entry(ARP, ip(3), "ks1x0"), None, "incomplete");
    assert_eq!(arp_table_entry(ARP, ip(4), "ks1x0"), Some([2, 0, 0, 0, 0, 4]), "permanent");
    assert_eq!(arp_table_entry(ARP, ip(5), "ks1x0"), None, "absent");
    assert_eq!(arp_table_entry("", ip(2), "ks1x0"), None);
    assert_eq!(arp_table_entry("title\n10.211.0.2 0x1 zz aa:bb:cc:dd:ee:ff * ks1x0", ip(2), "ks1x0"), None);
    assert_eq!(parse_mac("aa:bb:cc:dd:ee"), None);
    assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    assert_eq!(parse_mac("aa:bb:cc:dd:ee:f"), None);
    assert_eq!(parse_mac("+a:bb:cc:dd:ee:ff"), None);
}

#[test]
fn an_unknown_neighbour_is_an_error_that_says_what_to_do() {
    let mut neighbours = Neighbours { table: Err(io::Error::other("no procfs")), cache: HashMap::new() };
    let err = neighbours.resolve(Ipv4Addr::new(10, 0, 0, 9), "ks1x0").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no hardware address for 10.0.0.9") && text.contains("no procfs"), "{text}");
    assert!(text.contains("sends no ARP"), "{text}");
    neighbours.cache.insert(Ipv4Addr::new(10, 0, 0, 9), [1; 6]);
    assert_eq!(neighbours.resolve(Ipv4Addr::new(10, 0, 0, 9), "ks1x0").unwrap(), [1; 6]);
}
