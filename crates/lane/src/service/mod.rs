//! The controller as a network service (`kairos lane controller`): node agents connect, prove
//! the lane's shared secret, and ask for tunnels for the applications on their host; the
//! controller answers and pushes every change to the nodes concerned.
//!
//! - [`wire`]: frames and messages (length-prefixed JSON, sealed after the handshake).
//! - [`auth`]: the challenge-response handshake and the per-frame tags (HMAC-SHA256).
//! - [`journal`]: the durable log of inputs, replayed after a crash.
//! - [`core`]: the rules (a node acts for its own host), the journal before the notices, and
//!   where each notice goes; no sockets.
//! - [`server`]: the single-threaded event loop over the sockets and deadlines.
//! - [`metrics`]: the Prometheus text page.
//! - [`client`]: a node's side, with the handshake and reconnection.

pub mod auth;
pub mod client;
pub mod core;
pub mod journal;
pub mod metrics;
pub mod server;
pub mod wire;

pub use auth::Secret;
pub use client::{ClientError, ControllerLink, LinkEvent, NodeConnection};
pub use server::{ControllerService, RunningService, ServiceConfig, ServiceError};
