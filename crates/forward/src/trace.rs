//! The trace of `<type, user>` rows the sender replays, as in the source: users drawn from a
//! Zipf distribution (exponent 1) over `users` ids, each row control or data by a seeded coin
//! flip. `cdr` is the control/data ratio: a row is control with probability `cdr / (1 + cdr)`,
//! so control rows number `cdr` times data rows (the source's Table I: 400,000 control for
//! 39,996,600 data at CDR 0.01). Traces are saved as text (`kairos-trace v1` header, then one
//! `c USER` or `d USER` line per row) and reloaded, so runs repeat exactly.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::MAX_USERS;

/// The largest trace file read (a row is 4-12 bytes, so about 100 million rows): a path to
/// something else, such as a device that never ends, is refused instead of filling memory.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// The most rows a trace holds: the receiver keeps 9 bytes per row and the trace 8, so 50
/// million rows are already 850 MB.
pub const MAX_ROWS: usize = 50_000_000;

/// The highest control/data ratio: above 1 control rows outnumber data rows, and the age the
/// experiment measures is the data's (the source's runs use 0.001 to 0.5).
pub const MAX_CDR: f64 = 1.0;

/// One row of the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// A control packet (a location update) when true, else a data packet (an app update).
    pub control: bool,
    /// The user the packet is about, below the trace's `users`.
    pub user: u32,
}

/// A trace and how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// How many users the rows are drawn over (ids `0..users`), 1 to [`MAX_USERS`].
    pub users: u32,
    /// The control/data ratio the rows were drawn with, 0 to [`MAX_CDR`].
    pub cdr: f64,
    /// The seed of the random draws (0 for a trace file that gives none).
    pub seed: u64,
    /// The rows, in send order.
    pub rows: Vec<Row>,
}

/// Zipf(1) over `0..n` by inverse CDF: user `i` (rank `i + 1`) has probability `(1/(i+1)) / H_n`.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over users `0..n` (`n` at least 1).
    pub fn new(n: u32) -> Self {
        let weights: Vec<f64> = (1..=n).map(|r| 1.0 / f64::from(r)).collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let cdf = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Self { cdf }
    }

    /// Probability of user `i`.
    pub fn p(&self, i: usize) -> f64 {
        self.cdf[i] - if i == 0 { 0.0 } else { self.cdf[i - 1] }
    }

    /// Draws a user.
    pub fn sample(&self, rng: &mut StdRng) -> u32 {
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u32
    }
}

impl Trace {
    /// A trace of `len` rows.
    pub fn generate(users: u32, cdr: f64, len: usize, seed: u64) -> Result<Self> {
        check_header(users, cdr)?;
        if !(1..=MAX_ROWS).contains(&len) {
            bail!(
                "a trace holds 1 to {MAX_ROWS} rows, asked for {len} (each row costs about 17 bytes of memory)"
            );
        }
        let zipf = Zipf::new(users);
        let mut rng = StdRng::seed_from_u64(seed);
        let p_control = cdr / (1.0 + cdr);
        let rows = (0..len)
            .map(|_| {
                let control = rng.random_bool(p_control);
                Row { control, user: zipf.sample(&mut rng) }
            })
            .collect();
        Ok(Self { users, cdr, seed, rows })
    }

    /// How many rows are data.
    pub fn data_rows(&self) -> usize {
        self.rows.iter().filter(|r| !r.control).count()
    }

    /// Each user's share of the data rows.
    pub fn data_shares(&self) -> Vec<f64> {
        let mut counts = vec![0u64; self.users as usize];
        for r in self.rows.iter().filter(|r| !r.control) {
            counts[r.user as usize] += 1;
        }
        let total = counts.iter().sum::<u64>().max(1) as f64;
        counts.iter().map(|&c| c as f64 / total).collect()
    }

    /// Writes the text form ([`Trace::write_text`]) to the file at `path`, replacing it.
    pub fn save(&self, path: &Path) -> Result<()> {
        let file =
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::new(file);
        self.write_text(&mut w)
            .and_then(|()| w.flush())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Writes the text form that [`Trace::parse`] reads back to the same trace.
    pub fn write_text(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(w, "kairos-trace v1 users={} cdr={} seed={}", self.users, self.cdr, self.seed)?;
        for r in &self.rows {
            writeln!(w, "{} {}", if r.control { 'c' } else { 'd' }, r.user)?;
        }
        Ok(())
    }

    /// Reads the trace file at `path` (at most [`MAX_TRACE_BYTES`]); errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = kairos_sys::fs::read_text(path, MAX_TRACE_BYTES)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses a trace's text; `name` (the file's) prefixes every error.
    pub fn parse(text: &str, name: &str) -> Result<Self> {
        let mut lines = text.lines();
        let header = lines.next().unwrap_or_default();
        let mut fields = header.split_whitespace();
        if fields.next() != Some("kairos-trace") || fields.next() != Some("v1") {
            bail!("{name}: not a kairos trace (the first line must start with 'kairos-trace v1')");
        }
        let (mut users, mut cdr, mut seed) = (None, None, 0);
        for f in fields {
            match f.split_once('=') {
                Some(("users", v)) => users = v.parse().ok(),
                Some(("cdr", v)) => cdr = v.parse::<f64>().ok(),
                Some(("seed", v)) => seed = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        let (Some(users), Some(cdr)) = (users, cdr) else {
            bail!("{name}: the header must give users=N and cdr=X");
        };
        check_header(users, cdr).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let mut rows = Vec::new();
        for (i, line) in lines.enumerate() {
            if rows.len() == MAX_ROWS {
                bail!("{name}: more than {MAX_ROWS} rows (each row costs about 17 bytes of memory)");
            }
            let at = || format!("{name}:{}", i + 2);
            let (kind, user) =
                line.split_once(' ').with_context(|| format!("{}: expected 'c USER' or 'd USER'", at()))?;
            let control = match kind {
                "c" => true,
                "d" => false,
                other => bail!("{}: unknown row type '{other}' (use c or d)", at()),
            };
            let user: u32 = user.trim().parse().with_context(|| format!("{}: bad user id '{user}'", at()))?;
            if user >= users {
                bail!("{}: user {user} is outside the header's {users} users", at());
            }
            rows.push(Row { control, user });
        }
        if !rows.iter().any(|r| !r.control) {
            bail!("{name}: no data rows, so there is no age to measure (the trace needs 'd USER' rows)");
        }
        Ok(Self { users, cdr, seed, rows })
    }
}

/// Checks what a trace's header says (or a generated trace is asked for).
fn check_header(users: u32, cdr: f64) -> Result<()> {
    if !(1..=MAX_USERS).contains(&users) {
        bail!(
            "a trace has 1 to {MAX_USERS} users, got {users} (the forwarder keeps a buffer and a FIB entry per user)"
        );
    }
    if !(cdr.is_finite() && (0.0..=MAX_CDR).contains(&cdr)) {
        bail!(
            "the control/data ratio must be a number from 0 to {MAX_CDR}, got {cdr} (above 1 control outnumbers data)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kairos_aoi::closed_form::zipf_user_avg;
    use kairos_metrics::AgeTable;

    #[test]
    fn zipf_shares_follow_one_over_rank() {
        let t = Trace::generate(1000, 0.0, 400_000, 3).unwrap();
        let s = t.data_shares();
        let z = Zipf::new(1000);
        assert!((s[0] - z.p(0)).abs() / z.p(0) < 0.02, "{} vs {}", s[0], z.p(0));
        assert!((s[9] / s[0] - 0.1).abs() < 0.01);
        assert!((z.p(0) - 1.0 / 7.4855).abs() < 1e-4, "H_1000 = 7.4855");
    }

    #[test]
    fn control_rows_are_cdr_times_data_rows() {
        let t = Trace::generate(1000, 0.1, 200_000, 9).unwrap();
        let ctrl = t.rows.len() - t.data_rows();
        let ratio = ctrl as f64 / t.data_rows() as f64;
        assert!((ratio - 0.1).abs() < 0.005, "{ratio}");
    }

    #[test]
    fn saved_traces_reload_identically_and_bad_files_say_where() {
        let t = Trace::generate(50, 0.01, 5_000, 1).unwrap();
        let dir = std::env::temp_dir().join(format!("kairos-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.trace");
        t.save(&path).unwrap();
        assert_eq!(Trace::load(&path).unwrap(), t);
        std::fs::write(&path, "kairos-trace v1 users=5 cdr=0.1\nd 1\nx 2\n").unwrap();
        let err = Trace::load(&path).unwrap_err().to_string();
        assert!(err.contains(":3") && err.contains("unknown row type 'x'"), "{err}");
        std::fs::write(&path, "kairos-trace v1 users=5 cdr=0.1\nd 9\n").unwrap();
        assert!(Trace::load(&path).unwrap_err().to_string().contains("outside"));
        std::fs::write(&path, "hello\n").unwrap();
        assert!(Trace::load(&path).unwrap_err().to_string().contains("not a kairos trace"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Traces nothing can be measured on are refused with the reason, not run: no users (which
    /// once reached the forwarder and panicked its keep-latest ring), no rows, no data rows, a
    /// CDR that is not a ratio of control to data.
    #[test]
    fn traces_with_nothing_to_measure_are_refused() {
        let err = |text: &str| Trace::parse(text, "t").unwrap_err().to_string();
        assert!(err("kairos-trace v1 users=0 cdr=0.1\n").contains("1 to 16777216 users, got 0"));
        assert!(err("kairos-trace v1 users=5 cdr=0.1\n").contains("no data rows"));
        assert!(err("kairos-trace v1 users=5 cdr=0.1\nc 1\nc 2\n").contains("no data rows"));
        assert!(err("kairos-trace v1 users=5 cdr=NaN\nd 1\n").contains("0 to 1, got NaN"));
        assert!(err("kairos-trace v1 users=5 cdr=1.5\nd 1\n").contains("0 to 1, got 1.5"));
        assert!(Trace::generate(0, 0.1, 10, 1).unwrap_err().to_string().contains("got 0"));
        assert!(Trace::generate(10, 2.0, 10, 1).unwrap_err().to_string().contains("got 2"));
        assert!(Trace::generate(10, 0.1, 0, 1).unwrap_err().to_string().contains("asked for 0"));
        assert!(Trace::parse("kairos-trace v1 users=5 cdr=1\nc 1\nd 1\n", "t").is_ok());
    }

    /// A header's `cdr=nan` loaded, and the trace was not equal to itself written and read back
    /// (the trace_parse fuzz target's input).
    #[test]
    fn a_cdr_that_is_not_a_non_negative_number_is_refused() {
        let err = Trace::parse("kairos-trace v1 users=5 cdr=nan 0\nc 4\nd 4\nd 1\nd 01\nd 0\n", "t.trace")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.trace: the control/data ratio must be a number from 0 to 1, got NaN"),
            "{err}"
        );
        for cdr in ["inf", "-0.5"] {
            let text = format!("kairos-trace v1 users=5 cdr={cdr}\nd 1\n");
            assert!(Trace::parse(&text, "t.trace").unwrap_err().to_string().contains("from 0 to 1"), "{cdr}");
        }
        let t = Trace::parse("kairos-trace v1 users=5 cdr=0\nd 1\n", "t.trace").unwrap();
        assert_eq!((t.users, t.cdr, t.seed, t.rows.len()), (5, 0.0, 0, 1));
    }

    /// The Zipf oracle: a constant-rate stream of the trace, delivered after a constant delay,
    /// gives user i the age S + (1/R)(1/p_i - 1/2), p_i its share of data packets.
    #[test]
    fn zipf_trace_at_constant_rate_matches_the_oracle() {
        let t = Trace::generate(1000, 0.1, 2_000_000, 5).unwrap();
        let (gap, delay) = (1_000u64, 3_000u64); // R = 1 per us, S = 3 us
        let mut ages = AgeTable::new(1000, 0);
        for (i, r) in t.rows.iter().enumerate() {
            if !r.control {
                let sent = (i as u64 + 1) * gap;
                ages.deliver(r.user as usize, sent, sent + delay);
            }
        }
        let end = (t.rows.len() as u64 + 1) * gap;
        let summary = ages.summary(end);
        let shares = t.data_shares();
        // Data packets arrive at rate R (1 - control share) on the whole-stream lattice, so the
        // share of the *stream* is what enters the formula.
        let data_fraction = t.data_rows() as f64 / t.rows.len() as f64;
        for user in [0usize, 1, 4, 9, 49] {
            let p = shares[user] * data_fraction;
            let model = zipf_user_avg(delay as f64, 1.0 / gap as f64, p);
            let got = summary.per_user[user].avg_age_ns;
            assert!((got - model).abs() / model < 0.02, "user {user}: {got} vs {model}");
        }
    }
}
