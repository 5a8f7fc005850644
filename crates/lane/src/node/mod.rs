//! The express lane's endhost: what runs on the hosts at either end of a tunnel.
//!
//! - [`chunk`]: the lane's packet: a header and small messages packed into chunks, each with its
//!   own CRC, so that a bit error costs one chunk instead of the whole packet.
//! - [`tunnels`]: the node's view of its host's tunnels: releases, policing, usage reports.
//! - [`promise`]: the bounds the node promises an application: the controller's, which hold
//!   the jitter its core and its fan-out add once the node has reported them, widened by what
//!   the controller does not hold yet.

pub mod agent;
pub mod app;
pub mod chunk;
pub mod lane;
pub mod promise;
pub mod tunnels;
