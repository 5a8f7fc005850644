//! The queueing at every egress of the testbed: the HTB classes that give lane packets strict
//! priority over bulk, the filter that picks them by their DSCP byte, and the classes' counters
//! read back from `tc` to see which class carried what.

use super::{Egress, LANE_TOS, LaneTestbed, LaneTestbedError, MTU_BYTES};
use crate::testbed::{TestbedError, tool};

/// The mask the filter reads the byte through: DSCP only, whatever the ECN bits.
const DSCP_MASK: u8 = 0xfc;

/// The class every egress shapes to the link rate.
pub const LINK_CLASS: &str = "1:1";
/// The lane's class: priority 0, the link rate.
pub const LANE_CLASS: &str = "1:10";
/// Everything else (the default class): priority 1, borrowing what the lane leaves.
pub const BULK_CLASS: &str = "1:20";
/// The bulk class's own assured rate: the least HTB keeps exact, so bulk gets the link only by
/// borrowing, after the lane.
pub const BULK_ASSURED_BPS: u64 = 8_000;

/// A class's counters (`tc -s class show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCount {
    /// Packets it sent.
    pub packets: u64,
    /// Bytes it sent (with the Ethernet header).
    pub bytes: u64,
    /// Packets its queue dropped.
    pub dropped: u64,
}

/// The lane and bulk classes' counters at one egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassCounters {
    /// [`LANE_CLASS`].
    pub lane: ClassCount,
    /// [`BULK_CLASS`].
    pub bulk: ClassCount,
}

impl LaneTestbed {
    /// The classes and the lane filter on the egress of `device` in `namespace`.
    pub(super) fn shape(&self, namespace: &str, device: &str) -> Result<(), LaneTestbedError> {
        let rate = format!("{}bit", self.config.rate_bps);
        let bulk_rate = format!("{BULK_ASSURED_BPS}bit");
        let (lane_limit, bulk_limit) =
            (self.config.lane_limit.to_string(), self.config.bulk_limit.to_string());
        let bulk_minor = BULK_CLASS.rsplit(':').next().unwrap_or("20");
        // An explicit quantum (one full frame) keeps the kernel from deriving one from the rate
        // and logging that it is too big (the lane) or too small (bulk).
        let quantum = (MTU_BYTES + 14).to_string();
        let tc = |args: &[&str]| -> Result<(), TestbedError> {
            let mut all = vec!["-n", namespace];
            all.extend_from_slice(args);
            tool("tc", &all).map(drop)
        };
        tc(&["qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", bulk_minor])?;
        tc(&["class", "add", "dev", device, "parent", "1:", "classid", LINK_CLASS, "htb", "rate", &rate])?;
        tc(&[
            "class", "add", "dev", device, "parent", LINK_CLASS, "classid", LANE_CLASS, "htb", "rate", &rate,
            "ceil", &rate, "prio", "0", "quantum", &quantum,
        ])?;
        tc(&[
            "class", "add", "dev", device, "parent", LINK_CLASS, "classid", BULK_CLASS, "htb", "rate",
            &bulk_rate, "ceil", &rate, "prio", "1", "quantum", &quantum,
        ])?;
        for (class, handle, limit) in [(LANE_CLASS, "10:", &lane_limit), (BULK_CLASS, "20:", &bulk_limit)] {
            tc(&["qdisc", "add", "dev", device, "parent", class, "handle", handle, "pfifo", "limit", limit])?;
        }
        let (tos, mask) = (format!("{LANE_TOS:#04x}"), format!("{DSCP_MASK:#04x}"));
        tc(&[
            "filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
            "ip", "dsfield", &tos, &mask, "flowid", LANE_CLASS,
        ])?;
        Ok(())
    }

    /// The lane and bulk classes' counters at `egress`.
    pub fn class_counters(&self, egress: Egress) -> Result<ClassCounters, LaneTestbedError> {
        let (namespace, device) = self.egress(egress)?;
        let text = tool("tc", &["-n", namespace, "-s", "class", "show", "dev", device])?;
        parse_class_counters(&text).map_err(|what| LaneTestbedError::Counters {
            namespace: namespace.into(),
            device: device.into(),
            what: what.to_string(),
        })
    }
}

/// What `tc -s class show` printed that is not the two classes' counters.
#[derive(Debug, thiserror::Error)]
pub(super) enum CountersParseError {
    /// A counter that is not a number.
    #[error("{text}: {source}")]
    Number {
        /// The word.
        text: String,
        /// Why it is not a count.
        source: std::num::ParseIntError,
    },
    /// One of the classes has no counters in the output.
    #[error("no counters of classes {LANE_CLASS} and {BULK_CLASS} in: {output}")]
    Missing {
        /// The output, trimmed.
        output: String,
    },
}

/// The lane and bulk classes' counters from `tc -s class show` output.
pub(super) fn parse_class_counters(text: &str) -> Result<ClassCounters, CountersParseError> {
    let mut lane = None;
    let mut bulk = None;
    let mut class = "";
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["class", _kind, id, ..] => class = id,
            ["Sent", bytes, "bytes", packets, "pkt", "(dropped", dropped, ..] => {
                let number = |s: &str| {
                    s.trim_end_matches(',')
                        .parse::<u64>()
                        .map_err(|source| CountersParseError::Number { text: s.into(), source })
                };
                let count = ClassCount {
                    packets: number(packets)?,
                    bytes: number(bytes)?,
                    dropped: number(dropped)?,
                };
                if class == LANE_CLASS {
                    lane = Some(count);
                } else if class == BULK_CLASS {
                    bulk = Some(count);
                }
            }
            _ => {}
        }
    }
    match (lane, bulk) {
        (Some(lane), Some(bulk)) => Ok(ClassCounters { lane, bulk }),
        _ => Err(CountersParseError::Missing { output: text.trim().into() }),
    }
}
