//! The express lane's endhost: what runs on each host beside the applications.
//!
//! - [`tunnels`]: the node's view of its host's tunnels: releases, policing, usage reports.
pub mod tunnels;
