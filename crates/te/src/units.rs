//! Units and limits: time as integer picoseconds, the conversions from the nanoseconds files
//! speak, transmission times, and the largest values a file, a generator or a flag may give.
//!
//! Every conversion here is checked: a value that does not fit in 64-bit picoseconds is `None`,
//! never a wrapped or truncated number (a truncated transmission time once made `lane plan`
//! announce a bound about 4x too small).

/// Time in picoseconds: integer, so the analysis and the validator agree exactly. 64 bits hold
/// about 5,124 hours.
pub type Picos = u64;

/// Picoseconds in a nanosecond.
pub const PS_PER_NS: u64 = 1_000;

/// The longest single time a file, generator or flag may give (a period, a link's minimum delay
/// or jitter), in nanoseconds: one hour. The bounds add
/// such times along a tunnel's tree, and 64-bit picoseconds hold about 5,000 hours, so this keeps
/// every realistic sum representable; a sum that still would not fit is refused at admission.
pub const MAX_TIME_NS: u64 = 3_600_000_000_000;

/// [`MAX_TIME_NS`] in picoseconds.
pub const MAX_TIME: Picos = MAX_TIME_NS * PS_PER_NS;

/// The largest size a file, generator or flag may give (a queue, a packet): 1 TiB.
pub const MAX_BYTES: u64 = 1 << 40;

/// The fastest link: 1 Pbit/s. Past 8 Tbit/s a byte already takes less than the picosecond the
/// analysis counts in, so faster links would all look the same.
pub const MAX_BANDWIDTH_BPS: u64 = 1_000_000_000_000_000;

/// Nanoseconds to picoseconds, rounded; `None` when `ns` is negative, not finite, or more than
/// 64-bit picoseconds hold.
pub fn ns_to_ps(ns: f64) -> Option<Picos> {
    let ps = (ns * PS_PER_NS as f64).round();
    // 2^64 is exactly representable; every f64 in the range converts without saturating (NaN is
    // in no range).
    (0.0..18_446_744_073_709_551_616.0).contains(&ps).then_some(ps as Picos)
}

/// Picoseconds to nanoseconds (for files and reports).
pub fn ps_to_ns(ps: Picos) -> f64 {
    ps as f64 / PS_PER_NS as f64
}

/// Time to send `bytes` at `bps`, rounded up to a picosecond; `None` when `bps` is 0 or the time
/// does not fit in 64-bit picoseconds.
pub fn tx_time(bytes: u64, bps: u64) -> Option<Picos> {
    if bps == 0 {
        return None;
    }
    // At most 2^64 * 8 * 10^12 < 2^107: no overflow in u128.
    let bit_ps = u128::from(bytes) * 8 * u128::from(PS_PER_NS) * 1_000_000_000;
    Picos::try_from(bit_ps.div_ceil(u128::from(bps))).ok()
}

/// `terms` added up, or `None` when the sum does not fit in 64 bits.
pub(crate) fn sum(terms: &[Picos]) -> Option<Picos> {
    terms.iter().try_fold(0, |a: Picos, &b| a.checked_add(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmission_times_that_do_not_fit_are_none_not_truncated() {
        // 125 B at 1 Gbit/s: 1 us; 1 B at 3 bit/s: 8/3 s rounded up.
        assert_eq!(tx_time(125, 1_000_000_000), Some(1_000_000));
        assert_eq!(tx_time(1, 3), Some(2_666_666_666_667));
        // 3 MB at 1 bit/s is 2.4e19 ps, past 2^64 = 1.8e19: it used to come out as its
        // remainder, 5.6e18 ps, about 4.3x too small.
        assert_eq!(tx_time(3_000_000, 1), None);
        assert_eq!(tx_time(1, 0), None);
        // The largest size at the largest time's bandwidth still fits.
        assert!(tx_time(MAX_BYTES, MAX_BYTES * 8 / 3_600).is_some());
    }

    #[test]
    fn conversions_refuse_what_does_not_fit() {
        assert_eq!(ns_to_ps(1.5), Some(1_500));
        assert_eq!(ns_to_ps(MAX_TIME_NS as f64), Some(MAX_TIME));
        assert_eq!(ns_to_ps(-1.0), None);
        assert_eq!(ns_to_ps(f64::NAN), None);
        assert_eq!(ns_to_ps(1e17), None);
        assert_eq!(sum(&[Picos::MAX, 1]), None);
        assert_eq!(sum(&[1, 2, 3]), Some(6));
    }
}
