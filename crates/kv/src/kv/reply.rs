//! A command's answer, before it is written in RESP.

/// What a command answers: the RESP2 types the store's commands use.
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
    /// The null bulk string (`$-1`): a missing key.
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// An error, the whole line after '-' (`ERR ...`, `WRONGTYPE ...`).
    Error(String),
}

impl Reply {
    /// Writes the reply in RESP2.
    pub fn encode(&self, out: &mut Vec<u8>) {
        use crate::resp::reply as w;
        match self {
            Reply::Ok => w::simple(out, "OK"),
            Reply::Simple(s) => w::simple(out, s),
            Reply::Integer(n) => w::integer(out, *n),
            Reply::Bulk(b) => w::bulk(out, b),
            Reply::Nil => w::null_bulk(out),
            Reply::Array(items) => {
                w::array_header(out, items.len());
                for item in items {
                    item.encode(out);
                }
            }
            Reply::Error(e) => w::error(out, e),
        }
    }
}
