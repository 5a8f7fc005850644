//! A command's answer, before it is written in RESP2 or RESP3 (the connection's HELLO says
//! which).
//!
//! The variants that exist for RESP3 ([`Reply::Map`], [`Reply::Double`], [`Reply::Pairs`])
//! are written as Redis writes them to a RESP2 client: flat arrays and bulk strings.

/// What a command answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// A simple string (`+PONG`).
    Simple(&'static str),
    /// An integer.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null bulk string (`$-1`; RESP3's null): a missing key.
    Nil,
    /// The null array (`*-1`; RESP3's null): a blocking pop that timed out, an aborted EXEC.
    NilArray,
    /// A blocking command found nothing to take: never sent; the member keeps the client
    /// waiting and runs the command again when its keys change, or answers its timeout.
    WouldBlock,
    /// An array.
    Array(Vec<Reply>),
    /// An error, the whole line after '-' (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// A map (HGETALL, CONFIG GET, HELLO): RESP3 `%`, a flat array in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// A float, as its text (a score): RESP3 `,`, a bulk string in RESP2.
    Double(Vec<u8>),
    /// Pairs (WITHSCORES, WITHVALUES): an array of two-element arrays in RESP3, a flat
    /// array in RESP2.
    Pairs(Vec<(Reply, Reply)>),
}

impl Reply {
    /// Writes the reply in RESP2.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_as(out, false);
    }

    /// Writes the reply in RESP3 when `resp3`, else in RESP2.
    pub fn encode_as(&self, out: &mut Vec<u8>, resp3: bool) {
        use crate::resp::reply as w;
        match self {
            Reply::Ok => w::simple(out, "OK"),
            Reply::Simple(s) => w::simple(out, s),
            Reply::Integer(n) => w::integer(out, *n),
            Reply::Bulk(b) => w::bulk(out, b),
            Reply::Nil | Reply::NilArray | Reply::WouldBlock if resp3 => out.extend_from_slice(b"_\r\n"),
            Reply::Nil => w::null_bulk(out),
            Reply::NilArray | Reply::WouldBlock => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                w::array_header(out, items.len());
                items.iter().for_each(|i| i.encode_as(out, resp3));
            }
            Reply::Error(e) => w::error(out, e),
            Reply::Map(pairs) => {
                if resp3 {
                    out.push(b'%');
                    out.extend_from_slice(itoa::Buffer::new().format(pairs.len()).as_bytes());
                    out.extend_from_slice(b"\r\n");
                } else {
                    w::array_header(out, pairs.len() * 2);
                }
                for (k, v) in pairs {
                    k.encode_as(out, resp3);
                    v.encode_as(out, resp3);
                }
            }
            Reply::Double(text) if resp3 => {
                out.push(b',');
                out.extend_from_slice(text);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Double(text) => w::bulk(out, text),
            Reply::Pairs(pairs) => {
                w::array_header(out, if resp3 { pairs.len() } else { pairs.len() * 2 });
                for (a, b) in pairs {
                    if resp3 {
                        w::array_header(out, 2);
                    }
                    a.encode_as(out, resp3);
                    b.encode_as(out, resp3);
                }
            }
        }
    }
}
