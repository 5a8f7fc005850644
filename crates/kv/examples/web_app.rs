//! What a web application asks of its store, against a Kairos cluster: a login session that
//! expires, a user's profile, page views, the recent-pages list, a leaderboard, and a checkout
//! that takes the last item in stock in a transaction (WATCH, MULTI, EXEC), then the same data
//! read through another member.
//!
//! ```text
//! kairos kv cluster --temp &                      # three members, clients on ports 6380-6382
//! cargo run --release -p kairos-kv --example web_app -- 127.0.0.1:6380 127.0.0.1:6381
//! ```
//! Every write is committed by a majority before its reply comes back, so the second member
//! (a follower or the leader, whichever it is) reads what the first was told was written.

use std::net::SocketAddr;
use std::time::Duration;

use kairos_kv::resp::client::{Connection, Reply};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("web_app: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let first: SocketAddr = args.first().map_or("127.0.0.1:6380", String::as_str).parse()?;
    let second: SocketAddr = args.get(1).map_or("127.0.0.1:6381", String::as_str).parse()?;
    let connect = |addr: SocketAddr| {
        Connection::connect(addr, Duration::from_secs(2))
            .map_err(|e| format!("{addr}: {e} (start a cluster first: kairos kv cluster --temp)"))
    };
    let mut app = connect(first)?;

    // A login: the session names its user and expires after 30 minutes of nothing.
    call(&mut app, &["SET", "session:9f3a", "user:42", "EX", "1800"])?;
    let ttl = integer(call(&mut app, &["TTL", "session:9f3a"])?)?;
    println!("login: session 9f3a for user:42, expires in {ttl} s");

    // The profile, and a visit counted in it.
    call(&mut app, &["HSET", "user:42", "name", "Ada", "plan", "pro"])?;
    let visits = integer(call(&mut app, &["HINCRBY", "user:42", "visits", "1"])?)?;
    println!("profile: user:42 is {}, visit {visits}", text(call(&mut app, &["HGET", "user:42", "name"])?)?);

    // A page view: a counter per page, and the user's last ten pages, newest first.
    for page in ["/home", "/pricing", "/docs/start"] {
        call(&mut app, &["INCR", &format!("views:{page}")])?;
        call(&mut app, &["LPUSH", "recent:user:42", page])?;
    }
    call(&mut app, &["LTRIM", "recent:user:42", "0", "9"])?;
    let recent = texts(call(&mut app, &["LRANGE", "recent:user:42", "0", "-1"])?)?;
    println!("recent pages: {}", recent.join(", "));

    // A leaderboard: points per user, the top three.
    for (user, points) in [("user:7", "120"), ("user:42", "95"), ("user:13", "140"), ("user:42", "30")] {
        call(&mut app, &["ZINCRBY", "leaderboard", points, user])?;
    }
    let top = texts(call(&mut app, &["ZREVRANGE", "leaderboard", "0", "2", "WITHSCORES"])?)?;
    let top: Vec<String> =
        top.chunks(2).map(|p| format!("{} ({})", p[0], p.get(1).map_or("", String::as_str))).collect();
    println!("leaderboard: {}", top.join(", "));

    // A checkout of the last item in stock: the stock is watched, so if another client bought it
    // between the read and the EXEC, the transaction does nothing and the app says so.
    call(&mut app, &["SET", "stock:sku-1", "1"])?;
    for buyer in ["user:42", "user:7"] {
        call(&mut app, &["WATCH", "stock:sku-1"])?;
        let stock: i64 = text(call(&mut app, &["GET", "stock:sku-1"])?)?.parse()?;
        if stock == 0 {
            call(&mut app, &["UNWATCH"])?;
            println!("checkout: {buyer} finds sku-1 sold out");
            continue;
        }
        call(&mut app, &["MULTI"])?;
        call(&mut app, &["DECR", "stock:sku-1"])?;
        call(&mut app, &["RPUSH", "orders", &format!("{buyer}:sku-1")])?;
        match call(&mut app, &["EXEC"])? {
            Reply::Array(_) => println!("checkout: {buyer} bought the last sku-1"),
            Reply::NullArray => println!("checkout: {buyer} lost the race, nothing was taken"),
            other => return Err(format!("EXEC answered {other:?}").into()),
        }
    }

    // The same data through another member.
    let mut other = connect(second)?;
    let session = text(call(&mut other, &["GET", "session:9f3a"])?)?;
    let orders = texts(call(&mut other, &["LRANGE", "orders", "0", "-1"])?)?;
    let home = text(call(&mut other, &["GET", "views:/home"])?)?;
    println!(
        "through {second}: session 9f3a -> {session}, orders [{}], /home viewed {home} times",
        orders.join(", ")
    );
    Ok(())
}

/// Sends one command and returns its reply; an error reply becomes an error.
fn call(conn: &mut Connection, args: &[&str]) -> Result<Reply> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    match conn.call(&args)? {
        Reply::Error(e) => Err(format!("{}: {e}", String::from_utf8_lossy(args[0])).into()),
        reply => Ok(reply),
    }
}

fn integer(reply: Reply) -> Result<i64> {
    match reply {
        Reply::Integer(n) => Ok(n),
        other => Err(format!("expected an integer, got {other:?}").into()),
    }
}

fn text(reply: Reply) -> Result<String> {
    match reply {
        Reply::Bulk(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Reply::Status(s) => Ok(s),
        Reply::Integer(n) => Ok(n.to_string()),
        other => Err(format!("expected a string, got {other:?}").into()),
    }
}

fn texts(reply: Reply) -> Result<Vec<String>> {
    match reply {
        Reply::Array(items) => items.into_iter().map(text).collect(),
        other => Err(format!("expected an array, got {other:?}").into()),
    }
}
