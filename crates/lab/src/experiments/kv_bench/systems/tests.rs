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
