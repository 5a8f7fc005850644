//! A Redis client (the `redis` crate, as users would speak to `kairos kv serve`) connected to a
//! store member as it comes up.

use std::time::{Duration, Instant};

/// A connection to the member on 127.0.0.1:`port`, tried for up to 10 s while the member
/// starts; its reads time out after 10 s.
pub fn connect(port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.get_connection_with_timeout(Duration::from_secs(1)) {
            Ok(c) => {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                return c;
            }
            Err(e) if Instant::now() > deadline => panic!("member on {port} never took a connection: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// INFO `section` of the member on `port`, asked on a connection of its own.
pub fn info(port: u16, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(&mut connect(port)).unwrap()
}
