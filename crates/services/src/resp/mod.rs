//! (being built)
#![allow(missing_docs)]
pub mod reply {
    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(format!("+{s}\r\n").as_bytes())
    }
    pub fn error(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(format!("-{s}\r\n").as_bytes())
    }
    pub fn integer(out: &mut Vec<u8>, n: i64) {
        out.extend_from_slice(format!(":{n}\r\n").as_bytes())
    }
    pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
        out.extend_from_slice(b);
        out.extend_from_slice(b"\r\n")
    }
    pub fn null_bulk(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n")
    }
    pub fn array_header(out: &mut Vec<u8>, n: usize) {
        out.extend_from_slice(format!("*{n}\r\n").as_bytes())
    }
}
