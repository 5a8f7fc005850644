//! Age of information of one source through one server: the queueing models Kairos's
//! freshness claims rest on, as closed forms from the literature ([`closed_form`]) and a
//! discrete-event simulator on the virtual clock ([`sim`]) that measures with the same
//! [`kairos_metrics::AgeProcess`] the forwarding experiments use, so that the two agreeing
//! checks the age calculator too.
//!
//! Layer 1: models only, no I/O. The `aoi-model` experiment in `kairos-lab` sweeps and plots
//! them; the forwarding lab uses the Zipf average ([`closed_form::zipf_user_avg`]).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod closed_form;
pub mod sim;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// A name that is not a discipline's, an arrival law's or a service law's (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a [`Discipline`]'s name.
    #[error("unknown discipline '{0}' (use fcfs, bufferless, lcfs-preemptive, drop-oldest or keep-latest)")]
    UnknownDiscipline(String),
    /// Not an [`Arrival`] law's name.
    #[error("unknown arrival law '{0}' (use poisson or periodic)")]
    UnknownArrival(String),
    /// Not a [`Service`] law's name.
    #[error("unknown service law '{0}' (use exp or det)")]
    UnknownService(String),
}

/// When updates arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Exponential gaps of mean `1/lambda` (M/-/1).
    Poisson,
    /// Every `1/lambda` exactly (D/-/1).
    Periodic,
}

/// How long service takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// Exponential service of mean `1/mu` (-/M/1).
    Exp,
    /// Exactly `1/mu` (-/D/1).
    Det,
}

/// What the queue does with an update that finds the server busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// First come first served with `buffer` waiting places (`None`: unbounded); arrivals
    /// finding them taken are discarded (tail drop).
    Fcfs {
        /// Waiting places (`None`: unbounded).
        buffer: Option<usize>,
    },
    /// No waiting place: arrivals while busy are discarded (M/M/1/1).
    Bufferless,
    /// A new arrival preempts the update in service, which is discarded.
    LcfsPreemptive,
    /// `buffer` waiting places; a full queue discards its oldest update for the new one.
    DropOldest {
        /// Waiting places, at least one.
        buffer: usize,
    },
    /// One waiting place per source holding the latest update (for one source: M/M/1/2*).
    KeepLatest,
}

impl Discipline {
    /// The name the command line and the JSON use (`fcfs`, `keep-latest`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Discipline::Fcfs { .. } => "fcfs",
            Discipline::Bufferless => "bufferless",
            Discipline::LcfsPreemptive => "lcfs-preemptive",
            Discipline::DropOldest { .. } => "drop-oldest",
            Discipline::KeepLatest => "keep-latest",
        }
    }

    /// Parses a discipline name with its buffer (`None`: unbounded, only meaningful for FCFS).
    pub fn parse(name: &str, buffer: Option<usize>) -> Result<Self, ParseError> {
        Ok(match name {
            "fcfs" => Discipline::Fcfs { buffer },
            "bufferless" => Discipline::Bufferless,
            "lcfs-preemptive" => Discipline::LcfsPreemptive,
            "drop-oldest" => Discipline::DropOldest { buffer: buffer.unwrap_or(1) },
            "keep-latest" => Discipline::KeepLatest,
            other => return Err(ParseError::UnknownDiscipline(other.to_string())),
        })
    }

    /// Waiting places (`None`: unbounded).
    pub fn buffer(&self) -> Option<usize> {
        match *self {
            Discipline::Fcfs { buffer } => buffer,
            Discipline::DropOldest { buffer } => Some(buffer),
            Discipline::KeepLatest => Some(1),
            Discipline::Bufferless | Discipline::LcfsPreemptive => Some(0),
        }
    }

    /// The name with its buffer where the buffer is a knob (for legends).
    pub fn label(&self) -> String {
        match self.buffer() {
            Some(b) if matches!(self, Discipline::Fcfs { .. } | Discipline::DropOldest { .. }) => {
                format!("{} (buffer {b})", self.name())
            }
            _ => self.name().to_string(),
        }
    }
}

impl FromStr for Arrival {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "poisson" => Ok(Arrival::Poisson),
            "periodic" => Ok(Arrival::Periodic),
            other => Err(ParseError::UnknownArrival(other.to_string())),
        }
    }
}

impl FromStr for Service {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "exp" => Ok(Service::Exp),
            "det" => Ok(Service::Det),
            other => Err(ParseError::UnknownService(other.to_string())),
        }
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrival::Poisson => "poisson",
            Arrival::Periodic => "periodic",
        })
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::Exp => "exp",
            Service::Det => "det",
        })
    }
}
