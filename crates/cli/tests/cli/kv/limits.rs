//! The server's limits on its clients, as a client meets them: past `--maxclients` it is told
//! and closed; one that does not read is held back, then closed past the output limit; a request
//! past the query buffer limit is refused; a pipeline longer than the pending limit is answered
//! whole.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kairos_testkit::resp::connect;
use kairos_testkit::{scratch_dir, wait_until};

use super::{one_member, stat};

#[test]
fn a_client_past_maxclients_is_told_and_closed() {
    let data = scratch_dir("cli-kv");
    let (_members, port) = one_member(data.path(), &["--maxclients", "2"]);
    let _a = connect(port);
    let _b = connect(port);
    let mut third = TcpStream::connect(("127.0.0.1", port)).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = String::new();
    third.read_to_string(&mut got).unwrap();
    assert_eq!(got, "-ERR max number of clients reached\r\n");
    drop(_b);
    // A place is free again (the member sees the close on its next pass).
    let free = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        stat(port, "rejected_connections") >= 1 && TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(free, "no place was free again within 10 s");
}

#[test]
fn a_client_that_does_not_read_is_held_back_and_closed_past_the_output_limit() {
    let data = scratch_dir("cli-kv");
    let (_members, port) = one_member(data.path(), &[]);
    let mut con = connect(port);
    let value = vec![b'v'; 100_000];
    let _: () = redis::cmd("SET").arg("big").arg(&value).query(&mut con).unwrap();
    let get = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n";

    // 300 GETs of 100 KB pipelined and not read for a while: 30 MB of answers, held until the
    // client reads, then every one comes, in full and in order.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&get.repeat(300)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let answer = [format!("${}\r\n", value.len()).into_bytes(), value.clone(), b"\r\n".to_vec()].concat();
    let mut got = vec![0u8; answer.len() * 300];
    raw.read_exact(&mut got).unwrap();
    assert!(got.chunks(answer.len()).all(|c| c == answer.as_slice()));
    assert_eq!(stat(port, "client_output_buffer_limit_disconnections"), 0);

    // 1,000 of them, 100 MB, past the output limit (64 MB): the client is closed.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&get.repeat(1_000)).unwrap();
    let closed = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        stat(port, "client_output_buffer_limit_disconnections") >= 1
    });
    assert!(closed, "a client owed 100 MB was not closed");
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest);
    assert!(
        rest.len() < 1_000 * answer.len(),
        "every answer came ({} bytes) though the client was closed",
        rest.len()
    );

    // A request larger than the query buffer limit (64 MB) is refused and its client closed.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let header = format!("*2\r\n$3\r\nSET\r\n${}\r\n", 100 << 20);
    raw.write_all(header.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let _ = (0..80).try_for_each(|_| raw.write_all(&chunk));
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reply = String::new();
    let _ = raw.read_to_string(&mut reply);
    assert!(reply.contains("request larger than the server takes"), "{reply:?}");
    assert_eq!(stat(port, "client_query_buffer_limit_disconnections"), 1);
    let _: () = redis::cmd("SET").arg("still").arg("here").query(&mut connect(port)).unwrap();
}

#[test]
fn a_pipeline_longer_than_the_pending_limit_is_answered_whole() {
    let data = scratch_dir("cli-kv");
    let (_members, port) = one_member(data.path(), &[]);
    // 3,000 requests in one write, three times the 1,024 a connection may have in flight: the
    // rest wait in the member's input, where no socket event announces them.
    let mut raw = TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.write_all(&b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".repeat(3_000)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = vec![0u8; 5 * 3_000];
    raw.read_exact(&mut got).unwrap();
    assert!(got.chunks(5).all(|c| c == b"$-1\r\n"));
}
