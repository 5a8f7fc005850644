use super::*;

#[test]
fn systems_are_named_as_the_rows_name_them() {
    let names: Vec<&str> = SystemKind::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["redis", "redis+wait", "redis-aof+wait", "etcd", "kairos"]);
    for s in SystemKind::ALL {
        assert_eq!(SystemKind::from_name(s.name()), Ok(s));
        assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.name()));
    }
    assert!(SystemKind::from_name("memcached").unwrap_err().to_string().contains("redis+wait"));
    let setup = Setup { system: SystemKind::Kairos, members: 5, fsync: Fsync::Never, storage: Storage::Disk };
    assert_eq!(
        (setup.label().as_str(), setup.slug().as_str()),
        ("kairos, 5 members, fsync never", "kairos-5-never")
    );
}

#[test]
fn free_ports_are_all_different() {
    let (tcp, udp) = free_ports(8, 8).unwrap();
    let mut tcp_sorted = tcp.clone();
    tcp_sorted.sort_unstable();
    tcp_sorted.dedup();
    assert_eq!(tcp_sorted.len(), 8);
    assert_eq!(udp.len(), 8);
}

#[test]
fn a_pinned_start_gives_the_child_the_cores() {
    let mut child =
        spawn_pinned(Command::new("sh").args(["-c", "sleep 5"]).stdout(Stdio::null()), "sleeper", &[0])
            .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let cores = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
    assert_eq!(cores, "0");
    child.kill().unwrap();
}
