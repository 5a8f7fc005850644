//! What the store refuses: a flood of forged Raft fragments (held by no one), clients past
//! their user's rights, plain text on a TLS port and clients without the authority's
//! certificate, and long requests from a client that has not authenticated.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use kairos_testkit::resp::connect;
use kairos_testkit::{scratch_dir, wait_until};

use super::{lone_member, number, three_members, wait_for_leader};

/// Resident memory of a process, KB.
fn resident_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_flood_of_forged_fragments_is_refused_and_held_by_no_one() {
    let data = scratch_dir("cli-kv");
    let (members, client_ports, raft_ports, _) = three_members(data.path(), |_| &[]);
    let mut con = connect(client_ports[0]);
    wait_for_leader(&mut con, 0);
    let _: () = redis::cmd("SET").arg("before").arg("flood").query(&mut con).unwrap();
    let pids: Vec<u32> = members.0.iter().map(|m| m.as_ref().unwrap().id()).collect();
    let before: Vec<u64> = pids.iter().map(|&p| resident_kb(p)).collect();

    // 100 MB of fragments of 60 KB, each the first of a 1,000-fragment message (which an
    // unauthenticated member would begin to assemble, up to 60 MB per sender id), under
    // random sender ids (a quarter naming real members) and seals made up.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (fragment, total) = (60_000usize, 100_000_000usize);
    for k in 0..total / fragment {
        let from = if k % 4 == 0 { 1 + next() % 3 } else { next() };
        // The first of 1,000 one-byte fragments, grown to the size of a real one.
        let mut d =
            kairos_services::frame::fragments_of(from, next(), &[0x5a; 1_000], 1).unwrap().swap_remove(0);
        d.resize(kairos_services::frame::HEADER_BYTES + fragment, 0x5a);
        d.extend_from_slice(&from.to_le_bytes());
        d.extend_from_slice(&next().to_le_bytes());
        d.extend_from_slice(&[0xa5; 16]);
        let _ = socket.send_to(&d, ("127.0.0.1", raft_ports[k % 3]));
        if k % 30 == 29 {
            // Room for the members to read: a flood the kernel drops tests nothing.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(200));

    let mut refused = 0;
    let mut growth = Vec::new();
    for (i, &pid) in pids.iter().enumerate() {
        let grown = resident_kb(pid).saturating_sub(before[i]);
        assert!(grown < 20_000, "member {} grew by {grown} KB under the flood", i + 1);
        growth.push(grown);
        let info: String = redis::cmd("INFO").arg("stats").query(&mut connect(client_ports[i])).unwrap();
        let count = |f| number(&info, f);
        refused += count("raft_refused_strangers") + count("raft_refused_forged");
        assert_eq!(count("raft_malformed"), 0, "a forged datagram reached the decoder");
    }
    // Most of the 1,666 datagrams reached a member and were refused there.
    assert!(refused > 1_000, "only {refused} datagrams were refused");
    // The cluster still answers, and took no forged word.
    let _: () = redis::cmd("SET").arg("after").arg("flood").query(&mut con).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("before").query(&mut connect(client_ports[2])).unwrap();
    assert_eq!(v.as_deref(), Some("flood"));
    eprintln!(
        "{refused} forged datagrams refused; resident memory before {before:?} KB, grown by {growth:?} KB under the flood"
    );
}

#[test]
fn clients_authenticate_and_run_only_what_their_user_may() {
    let data = scratch_dir("cli-kv");
    let (pass, users) = (data.path().join("pass"), data.path().join("users"));
    std::fs::write(&pass, "admin-pw\n").unwrap();
    std::fs::write(
        &users,
        "user reader on >r-pw ~* +@read +@connection\nuser app on >a-pw ~* +@all -@admin\n",
    )
    .unwrap();
    let auth =
        [format!("--requirepass-file={}", pass.display()), format!("--users-file={}", users.display())];
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    let (_members, client_ports, _, _) = three_members(data.path(), |_| &auth);
    let mut admin = connect(client_ports[0]);
    let _: () = redis::cmd("AUTH").arg("admin-pw").query(&mut admin).unwrap();
    wait_for_leader(&mut admin, 0);

    let error = |con: &mut redis::Connection, cmd: &[&str]| {
        let mut c = redis::cmd(cmd[0]);
        for a in &cmd[1..] {
            c.arg(*a);
        }
        c.query::<redis::Value>(con).map(|v| format!("{v:?}")).unwrap_or_else(|e| e.to_string())
    };
    let mut con = connect(client_ports[1]);
    assert!(
        error(&mut con, &["GET", "k"]).contains("Authentication required"),
        "a stranger is asked to AUTH"
    );
    assert!(error(&mut con, &["AUTH", "reader", "wrong"]).contains("invalid username-password pair"));
    let _: () = redis::cmd("AUTH").arg("reader").arg("r-pw").query(&mut con).unwrap();
    let got: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(got, None);
    assert!(error(&mut con, &["SET", "k", "v"]).contains("no permissions to run the 'set' command"));
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut con).unwrap();
    assert_eq!(who, "reader");
    let _: () = redis::cmd("AUTH").arg("app").arg("a-pw").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    assert!(error(&mut con, &["KAIROS.MEMBER", "LIST"]).contains("no permissions"), "app is not @admin");
    let members: Vec<String> = redis::cmd("KAIROS.MEMBER").arg("LIST").query(&mut admin).unwrap();
    assert_eq!(members.len(), 3);

    let info: String = redis::cmd("INFO").arg("stats").query(&mut admin).unwrap();
    let count = |f| number(&info, f);
    let info2: String =
        redis::cmd("INFO").arg("stats").query(&mut connect_as(client_ports[1], "admin-pw")).unwrap();
    let count2 = |f| number(&info2, f);
    // One wrong password, two commands refused; the commands a stranger ran are counted apart
    // (with whatever the client library sent on connecting).
    assert_eq!(count("acl_access_denied_auth") + count2("acl_access_denied_auth"), 1);
    assert_eq!(count("acl_access_denied_cmd") + count2("acl_access_denied_cmd"), 2);
    assert!(count("acl_access_denied_noauth") + count2("acl_access_denied_noauth") >= 1);
}

fn connect_as(port: u16, password: &str) -> redis::Connection {
    let mut con = connect(port);
    let _: () = redis::cmd("AUTH").arg(password).query(&mut con).unwrap();
    con
}

/// `redis-cli ARGS...` and what it printed, or `None` when it is not installed.
fn redis_cli(args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new("redis-cli").args(args).stdin(Stdio::null()).output().ok()?;
    Some((out.status.success(), String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

#[test]
fn redis_cli_speaks_tls_to_a_member_with_a_certificate() {
    let data = scratch_dir("cli-kv");
    let (cert, key) = (data.path().join("cert.pem"), data.path().join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) || redis_cli(&["--version"]).is_none() {
        eprintln!("skipped: needs openssl and redis-cli (Debian's redis-tools)");
        return;
    }
    let flags = [format!("--tls-cert={}", cert.display()), format!("--tls-key={}", key.display())];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (_members, client) = lone_member(1, data.path(), &flags);
    let port = client.to_string();
    let tls = |args: &[&str]| {
        let mut all = vec!["--tls", "--cacert", cert.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port];
        all.extend_from_slice(args);
        redis_cli(&all).unwrap()
    };
    // Until the member has elected itself and taken the write.
    let written = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        tls(&["SET", "k", "over tls"]) == (true, "OK".to_string())
    });
    assert!(written, "redis-cli --tls never got OK");
    assert_eq!(tls(&["GET", "k"]), (true, "over tls".to_string()));
    // A large value crosses many records both ways.
    // (One argument of a program may not pass 128 KB.)
    let big = "x".repeat(100_000);
    assert_eq!(tls(&["SET", "big", &big]).1, "OK");
    assert_eq!(tls(&["STRLEN", "big"]).1, "100000");
    assert_eq!(tls(&["GET", "big"]).1, big);
    // Plain text on the TLS port is no request: nothing is answered.
    let (_, plain) = redis_cli(&["-p", &port, "PING"]).unwrap();
    assert_ne!(plain, "PONG");
    // A client that does not trust the member's certificate gets nowhere.
    let other = data.path().join("other.pem");
    Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-days", "1", "-subj", "/CN=other", "-keyout", "/dev/null", "-out"])
        .arg(&other)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let (_, refused) =
        redis_cli(&["--tls", "--cacert", other.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port, "PING"])
            .unwrap();
    assert_ne!(refused, "PONG");

    // With --tls-ca-cert, a member takes only clients whose certificate that authority signed.
    let openssl = |args: &[&str]| {
        let ok = Command::new("openssl").args(args).current_dir(data.path()).stderr(Stdio::null()).status();
        assert!(ok.unwrap().success(), "openssl {args:?}");
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[&["req"][..], &ec, &["-subj", "/CN=client", "-keyout", "client.key", "-out", "client.csr"]]
            .concat(),
    );
    // A version 3 certificate for client authentication (webpki takes no other).
    std::fs::write(
        data.path().join("client.ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-days",
        "1",
        "-extfile",
        "client.ext",
        "-out",
        "client.pem",
    ]);
    let mut flags = flags.clone();
    let ca = format!("--tls-ca-cert={}", data.path().join("ca.pem").display());
    flags.push(&ca);
    let (_second, client2) = lone_member(2, data.path(), &flags);
    let port2 = client2.to_string();
    let (client_cert, client_key) = (data.path().join("client.pem"), data.path().join("client.key"));
    let with_cert = |args: &[&str]| {
        let mut all =
            vec!["--tls", "--cacert", cert.to_str().unwrap(), "--cert", client_cert.to_str().unwrap()];
        all.extend_from_slice(&["--key", client_key.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port2]);
        all.extend_from_slice(args);
        redis_cli(&all).unwrap()
    };
    let served = wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        with_cert(&["PING"]) == (true, "PONG".to_string())
    });
    assert!(served, "a client with a certificate from the authority was not served");
    let without =
        redis_cli(&["--tls", "--cacert", cert.to_str().unwrap(), "-h", "127.0.0.1", "-p", &port2, "PING"]);
    assert_ne!(without.unwrap().1, "PONG", "a client without a certificate was served");
}

#[test]
fn a_stranger_may_send_only_short_requests_before_it_authenticates() {
    let data = scratch_dir("cli-kv");
    let pass = data.path().join("pass");
    std::fs::write(&pass, "pw").unwrap();
    let flag = format!("--requirepass-file={}", pass.display());
    let (_members, client) = lone_member(1, data.path(), &[&flag]);
    let mut admin = connect(client);
    let _: () = redis::cmd("AUTH").arg("pw").query(&mut admin).unwrap();
    wait_for_leader(&mut admin, 0);
    // A 100 KB argument from a client that has not authenticated: refused at its length line.
    let mut raw = TcpStream::connect(("127.0.0.1", client)).unwrap();
    raw.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n").unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = raw.read_to_string(&mut reply);
    assert!(reply.contains("Protocol error"), "{reply:?}");
    // After AUTH, the same request is taken.
    let big = "v".repeat(100_000);
    let _: () = redis::cmd("SET").arg("k").arg(&big).query(&mut admin).unwrap();
}
