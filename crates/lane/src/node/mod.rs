//! The express lane's endhost: what runs on the hosts at either end of a tunnel.
//!
//! It will hold the endhost's parts (periodic channels, sender-side policing, bridges to
//! sockets); for now it holds only the packet format they will share:
//!
//! - [`chunk`]: the lane's packet: a header and small messages packed into chunks, each with its
//!   own CRC, so that a bit error costs one chunk instead of the whole packet.

pub mod chunk;
