//! Running a member: flags that do not mix refused, a config file whose settings the command
//! line overrides, and the figures served to Prometheus.

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use kairos_testkit::resp::connect;
use kairos_testkit::{Guarded, free_tcp_port, free_udp_port, scratch_dir, stderr};

use super::{one_member, secret_in, wait_for_leader};
use crate::KAIROS;

#[test]
fn lane_hosts_and_udp_addresses_do_not_mix_and_a_lane_member_needs_its_node() {
    let kv = |args: &[&str]| {
        let out = KAIROS.output(["kv", "serve", "--data", "/nonexistent/kairos-kv-test"].iter().chain(args));
        (out.status.code(), stderr(&out))
    };
    let (code, err) = kv(&["--id", "1", "--peers", "1=h0,2=h1,3=h2"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("give --lane-node DIR"), "{err}");
    let (code, err) = kv(&["--id", "1", "--peers", "1=127.0.0.1:1,2=h1", "--lane-node", "/tmp"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("member 1's is 127.0.0.1:1"), "{err}");
    let (code, err) =
        kv(&["--id", "1", "--peers", "1=h0,2=h1", "--lane-node", "/tmp", "--lane-packet-bytes", "64"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--lane-packet-bytes"), "{err}");
    let (code, err) = kv(&["--id", "1", "--peers", "1=h0,2=1.2.3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'1.2.3' is neither"), "{err}");
}

#[test]
fn a_member_serves_its_figures_to_prometheus() {
    let data = scratch_dir("cli-kv");
    let metrics = free_tcp_port();
    let flag = format!("--metrics=127.0.0.1:{metrics}");
    let (_members, port) = one_member(data.path(), &[&flag]);
    let mut con = connect(port);
    for i in 0..10 {
        let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut con).unwrap();
    }
    let scrape = |request: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let text = scrape("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    let value = |name: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("kairos_kv_commands_total{member=\"1\",kind=\"write\"}") >= 10.0);
    assert!(value("kairos_kv_command_duration_seconds_count") >= 10.0);
    assert_eq!(value("kairos_kv_raft_leader{member=\"1\"}"), 1.0);
    assert!(value("kairos_kv_raft_applied_index{member=\"1\"}") >= 10.0);
    assert!(scrape("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    // A reader that sends nothing holds nothing for long, and others are served meanwhile.
    let idle: Vec<_> =
        (0..20).map(|_| std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap()).collect();
    assert!(scrape("GET / HTTP/1.0\r\n\r\n").contains("kairos_kv_raft_term"));
    drop(idle);
}

#[test]
fn a_member_takes_its_settings_from_a_config_file_and_its_flags_win() {
    let data = scratch_dir("cli-kv");
    let (client, raft) = (free_tcp_port(), free_udp_port());
    let config = data.path().join("kv.toml");
    std::fs::write(
        &config,
        format!(
            "id = 1\npeers = [\"1=127.0.0.1:{raft}\"]\nlisten = \"127.0.0.1:1\"\ndata = \"{}\"\nsecret-file = \"{}\"\nfsync = \"never\"\nno-fd = false\n",
            data.path().join("m1").display(),
            secret_in(data.path()).display()
        ),
    )
    .unwrap();
    // The file's listen port (1) is overridden by the command line's.
    let _member = Guarded::spawn(
        KAIROS
            .command()
            .args(["kv", "serve", "--config"])
            .arg(&config)
            .arg(format!("--listen=127.0.0.1:{client}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let mut con = connect(client);
    wait_for_leader(&mut con, 0);
    let _: () = redis::cmd("SET").arg("from").arg("config").query(&mut con).unwrap();

    std::fs::write(&config, "id = 1\nlisen = \"x\"\n").unwrap();
    let out = KAIROS.output(["kv", "serve", "--config", config.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'lisen' is no flag of kairos kv serve"), "{err}");
}
