//! The Hamming distances and undetectable-pattern counts that `node::chunk`'s module doc states,
//! computed rather than taken from tables.
//!
//! A CRC is linear: an error pattern goes undetected exactly when the XOR of the syndromes of
//! its bits (the CRC change a single-bit error causes) is zero. So the patterns of weight `w`
//! are counted by meeting in the middle: split `w = a + b` and look for an `a`-subset and a
//! `b`-subset of bit positions with the same syndrome. When no pattern of weight below `w`
//! exists, every such match is disjoint (an overlap would leave a lighter undetected pattern), so
//! each undetected pattern of weight `w` is found once per split of it: `C(w, a)` times, or
//! half that when `a = b` and the matches are counted unordered.
//!
//! The fast tests run in `cargo test`; the exhaustive ones (quadruples: a few hundred million
//! subsets) are `#[ignore]`d: `cargo test -p kairos-lane --test chunk_hd -- --ignored --nocapture`.

use crc::{CRC_32_ISO_HDLC, Crc};
use hashbrown::HashMap;
use kairos_lane::node::chunk::{CRC_24_HD6, CRC_32_HD8, HEADER_BYTES, Schema, koopman_to_normal};

/// The syndromes of a codeword of `n` bits of the CRC whose normal-form polynomial is `poly`:
/// bit `i` from the codeword's end is `x^i mod G(x)`. Computed from the polynomial alone.
fn polynomial_syndromes(poly: u32, width: u32, n: usize) -> Vec<u32> {
    let top = 1u64 << width;
    let g = top | u64::from(poly);
    let mut s = 1u64;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(s as u32);
        s <<= 1;
        if s & top != 0 {
            s ^= g;
        }
    }
    out
}

/// The syndromes of a codeword of `data_bytes` bytes and its CRC as the implementation computes
/// it: each data bit's is `crc(data with that bit flipped) ^ crc(data)`, each CRC bit's is the
/// bit itself (how the CRC bits are placed on the wire permutes positions, which keeps weights).
fn implementation_syndromes(crc: impl Fn(&[u8]) -> u32, data_bytes: usize, crc_bits: u32) -> Vec<u32> {
    let mut data = vec![0u8; data_bytes];
    let base = crc(&data);
    let mut out: Vec<u32> = (0..crc_bits).map(|j| 1 << j).collect();
    for byte in 0..data_bytes {
        for bit in 0..8 {
            data[byte] = 1 << bit;
            out.push(crc(&data) ^ base);
        }
        data[byte] = 0;
    }
    out
}

fn binomial(n: u64, k: u64) -> u64 {
    (0..k).fold(1u128, |acc, i| acc * u128::from(n - i) / u128::from(i + 1)) as u64
}

/// Calls `visit` with the XOR of the syndromes of every `k`-subset of `s`.
fn for_each_subset(s: &[u32], k: usize, acc: u32, visit: &mut impl FnMut(u32)) {
    if k == 1 {
        s.iter().for_each(|&x| visit(acc ^ x));
        return;
    }
    for i in 0..s.len().saturating_sub(k - 1) {
        for_each_subset(&s[i + 1..], k - 1, acc ^ s[i], visit);
    }
}

/// The number of undetected error patterns of weight `w` over positions with syndromes `s`,
/// provided none of a lower positive weight exists (the caller checks weights in order).
fn undetected(s: &[u32], w: usize) -> u64 {
    let (a, b) = (w / 2, w - w / 2);
    if a == 0 {
        return s.iter().filter(|&&x| x == 0).count() as u64;
    }
    let mut matches = 0u64;
    let per_pattern = if a == b {
        // Unordered pairs of distinct a-subsets with equal syndromes: sorted, in passes over the
        // syndromes' low bits so that a pass holds at most about 32 M of them.
        let subsets = binomial(s.len() as u64, a as u64);
        let passes = subsets.div_ceil(1 << 25).next_power_of_two() as u32;
        for pass in 0..passes {
            let mut found = Vec::new();
            for_each_subset(s, a, 0, &mut |x| {
                if x & (passes - 1) == pass {
                    found.push(x)
                }
            });
            found.sort_unstable();
            for run in found.chunk_by(|x, y| x == y) {
                let m = run.len() as u64;
                matches += m * (m - 1) / 2;
            }
        }
        binomial(w as u64, a as u64) / 2
    } else {
        let mut smaller: HashMap<u32, u64> = HashMap::new();
        for_each_subset(s, a, 0, &mut |x| *smaller.entry(x).or_default() += 1);
        for_each_subset(s, b, 0, &mut |x| matches += smaller.get(&x).copied().unwrap_or(0));
        binomial(w as u64, a as u64)
    };
    assert_eq!(matches % per_pattern, 0, "weight {w}: {matches} matches; a lighter pattern exists");
    matches / per_pattern
}

/// Every syndrome has odd parity, so every undetected pattern has even weight: parity is linear
/// and the XOR of an odd number of odd-parity syndromes is not zero. (For a polynomial with
/// `x + 1` as a factor: the syndrome evaluated at `x = 1` is its parity, and `x^i` is 1 there.)
fn odd_weights_detected(s: &[u32]) -> bool {
    s.iter().all(|x| x.count_ones() % 2 == 1)
}

fn schema_syndromes(schema: Schema, data_bytes: usize) -> Vec<u32> {
    implementation_syndromes(|d| schema.crc(d), data_bytes, schema.crc_bits())
}

fn reverse(x: u32, width: u32) -> u32 {
    x.reverse_bits() >> (32 - width)
}

/// The implementation's syndromes are the polynomial's, bit-reversed for the reflected CRC:
/// the Koopman-to-normal conversion and the `crc` parameters describe the same code.
#[test]
fn the_implementation_is_the_koopman_polynomial() {
    for schema in Schema::ALL {
        let width = schema.crc_bits();
        let poly = koopman_to_normal(schema.koopman_polynomial(), width).unwrap();
        assert_eq!(poly, schema.algorithm().poly);
        let n = schema.data_bytes() * 8 + width as usize;
        let mut from_poly = polynomial_syndromes(poly, width, n);
        if schema.algorithm().refout {
            from_poly.iter_mut().for_each(|x| *x = reverse(*x, width));
        }
        let mut from_crc = schema_syndromes(schema, schema.data_bytes());
        from_poly.sort_unstable();
        from_crc.sort_unstable();
        assert_eq!(from_poly, from_crc, "{schema:?}");
    }
    assert_eq!(koopman_to_normal(0xBD80DE, 24), Some(0x7B01BD));
    assert_eq!(koopman_to_normal(0xFA567D89, 32), Some(0xF4ACFB13));
    assert_eq!(koopman_to_normal(0x82608EDB, 32), Some(0x04C11DB7), "802.3's CRC-32");
    assert_eq!(koopman_to_normal(0x7B01BD, 24), None, "degree 23, not 24");
    assert_eq!(koopman_to_normal(1, 33), None);
}

/// A bitwise model of the HD-6 CRC, from the Koopman polynomial, gives the declared check and
/// residue and agrees with the table-driven CRC.
#[test]
fn the_hd6_crc_matches_a_bitwise_model() {
    let poly = koopman_to_normal(0xBD80DE, 24).unwrap();
    let register = |data: &[u8]| {
        let mut r = 0xFF_FFFFu32;
        for &byte in data {
            r ^= u32::from(byte) << 16;
            for _ in 0..8 {
                r = if r & 0x80_0000 != 0 { (r << 1) ^ poly } else { r << 1 } & 0xFF_FFFF;
            }
        }
        r
    };
    assert_eq!(register(b"123456789") ^ 0xFF_FFFF, CRC_24_HD6.check);
    assert_eq!(Schema::Hd6.crc(b"123456789"), CRC_24_HD6.check);
    let mut x = 0x1234_5678u32;
    for len in 0..64 {
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect();
        let crc = register(&data) ^ 0xFF_FFFF;
        assert_eq!(Schema::Hd6.crc(&data), crc);
        let mut codeword = data.clone();
        codeword.extend_from_slice(&crc.to_be_bytes()[1..]);
        assert_eq!(register(&codeword), CRC_24_HD6.residue);
    }
    assert_eq!(Schema::Hd8.crc(b"123456789"), CRC_32_HD8.check);
}

/// Koopman's lengths are data words (the CRC's own bits not counted): `0xFA567D89` keeps HD 8
/// up to 274 data bits and drops to 6 at 275; `0xBD80DE` keeps HD 6 up to 2,026 and drops to 4
/// at 2,027. Read as codeword lengths, the boundaries would fall 32 and 24 bits earlier.
#[test]
fn koopman_lengths_are_data_words() {
    let hd8 = polynomial_syndromes(0xF4ACFB13, 32, 274 + 32 + 1);
    assert!(odd_weights_detected(&hd8));
    let (at_274, at_275) = (&hd8[..274 + 32], &hd8[..]);
    for w in [1, 2, 4, 6] {
        assert_eq!(undetected(at_274, w), 0, "weight {w}");
    }
    for w in [1, 2, 4] {
        assert_eq!(undetected(at_275, w), 0, "weight {w}");
    }
    assert!(undetected(at_275, 6) > 0);

    let hd6 = polynomial_syndromes(0x7B01BD, 24, 2026 + 24 + 1);
    assert!(odd_weights_detected(&hd6));
    let (at_2026, at_2027) = (&hd6[..2026 + 24], &hd6[..]);
    for w in [1, 2, 4] {
        assert_eq!(undetected(at_2026, w), 0, "weight {w}");
    }
    for w in [1, 2] {
        assert_eq!(undetected(at_2027, w), 0, "weight {w}");
    }
    assert!(undetected(at_2027, 4) > 0);
}

/// HD-6 chunk (23 data bytes, 208-bit codeword): nothing below weight 6 is missed, and 14,082
/// patterns of weight 6 are (every weight by meeting in the middle, odd ones too).
#[test]
fn hd6_chunk_has_distance_6() {
    let s = schema_syndromes(Schema::Hd6, Schema::Hd6.data_bytes());
    assert_eq!(s.len(), 208);
    for w in 1..6 {
        assert_eq!(undetected(&s, w), 0, "weight {w}");
    }
    let a6 = undetected(&s, 6);
    println!("HD-6 chunk: n = {}, A_6 = {a6}", s.len());
    assert_eq!(a6, A6_HD6_CHUNK);
}

/// HD-8 chunk (32 data bytes, 288-bit codeword): nothing below weight 8 is missed. Weights up
/// to 6 by meeting in the middle, 7 by parity; the count at 8 is the ignored test's.
#[test]
fn hd8_chunk_has_no_pattern_below_8() {
    let s = schema_syndromes(Schema::Hd8, Schema::Hd8.data_bytes());
    assert_eq!(s.len(), 288);
    for w in 1..7 {
        assert_eq!(undetected(&s, w), 0, "weight {w}");
    }
    assert!(odd_weights_detected(&s));
}

/// The meeting in the middle counts what brute force counts: every error pattern of 8-bit CRCs
/// over short codewords, enumerated in Gray-code order (one syndrome XOR per pattern).
#[test]
fn meeting_in_the_middle_agrees_with_brute_force() {
    for poly in [0x07, 0x1D, 0x2F, 0x31, 0x4D, 0x9B, 0xD5] {
        for n in [12, 16, 22] {
            let s = polynomial_syndromes(poly, 8, n);
            let mut by_weight = vec![0u64; n + 1];
            let mut syndrome = 0;
            for k in 1u32..1 << n {
                syndrome ^= s[k.trailing_zeros() as usize];
                if syndrome == 0 {
                    by_weight[(k ^ (k >> 1)).count_ones() as usize] += 1;
                }
            }
            let hd = (1..=n).find(|&w| by_weight[w] > 0).unwrap();
            for (w, &count) in by_weight.iter().enumerate().take(hd + 1).skip(1) {
                assert_eq!(undetected(&s, w), count, "poly {poly:#x}, n {n}, weight {w}");
            }
        }
    }
}

/// The weight-6 count of the HD-6 chunk, as computed.
const A6_HD6_CHUNK: u64 = 14_082;
/// The weight-8 counts of the HD-8 chunk and of the header, as computed.
const A8_HD8_CHUNK: u64 = 494_229;
const A8_HEADER: u64 = 112_389;
/// The weight-4 count of 802.3's CRC-32 over a 1,514-byte frame, as computed.
const A4_ETHERNET: u64 = 223_059;

/// The HD-8 chunk exhaustively: weight 7 by triples against quadruples (no parity argument),
/// and the count at weight 8, quadruples against quadruples.
#[test]
#[ignore = "283 million quadruples, twice"]
fn hd8_chunk_has_distance_8_exhaustively() {
    let s = schema_syndromes(Schema::Hd8, Schema::Hd8.data_bytes());
    for w in 1..8 {
        assert_eq!(undetected(&s, w), 0, "weight {w}");
    }
    let a8 = undetected(&s, 8);
    println!("HD-8 chunk: n = {}, A_8 = {a8}", s.len());
    assert_eq!(a8, A8_HD8_CHUNK);
}

/// The header: 26 covered bytes under the HD-8 schema's CRC. A shortened code keeps at least
/// the longer one's distance, so 8; the count at 8 here.
#[test]
#[ignore = "over a hundred million quadruples"]
fn header_has_distance_8() {
    let s = implementation_syndromes(|d| Schema::Hd8.crc(d), HEADER_BYTES - 4, 32);
    assert_eq!(s.len(), 240);
    for w in 1..8 {
        assert_eq!(undetected(&s, w), 0, "weight {w}");
    }
    let a8 = undetected(&s, 8);
    println!("header: n = {}, A_8 = {a8}", s.len());
    assert_eq!(a8, A8_HEADER);
}

/// 802.3's CRC-32 over a frame carrying a 1,500-byte payload (1,514 covered bytes): distance 4.
#[test]
#[ignore = "seventy million pairs"]
fn ethernet_frame_has_distance_4() {
    const ETHERNET: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);
    let s = implementation_syndromes(|d| ETHERNET.checksum(d), 1_514, 32);
    assert_eq!(s.len(), 12_144);
    assert!(!odd_weights_detected(&s), "802.3's polynomial has no x + 1 factor");
    for w in 1..4 {
        assert_eq!(undetected(&s, w), 0, "weight {w}");
    }
    let a4 = undetected(&s, 4);
    println!("Ethernet frame: n = {}, A_4 = {a4}", s.len());
    assert_eq!(a4, A4_ETHERNET);
}
