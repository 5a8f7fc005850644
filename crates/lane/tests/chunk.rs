//! The chunk codec (`node::chunk`): messages round-trip, every error pattern lighter than a
//! schema's Hamming distance in a chunk costs that chunk alone, a damaged header or a packet of
//! the wrong length is refused whole, and chunks that check but break the layout are dropped.

use kairos_lane::node::chunk::{
    ChunkCounts, DecodeError, Decoder, EncodeError, Encoder, HEADER_BYTES, Header, MAX_CHUNKS, Packet,
    Schema, UDP_IPV4_PAYLOAD_BYTES, encode, seal_header,
};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

fn header(schema: Schema) -> Header {
    Header { schema, tunnel: 0xA1B2_C3D4, seq: 0x0102_0304_0506_0708, sent_ns: 1_234_567_890_123 }
}

/// Whether `part` lies inside `whole` (the same memory, not equal bytes).
fn within(whole: &[u8], part: &[u8]) -> bool {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

/// Decodes `bytes` and checks what every decode must hold: each message is gathered from
/// slices of `bytes`, its chunks follow the previous message's, and every chunk is counted once.
fn decode(bytes: &[u8]) -> Result<(Vec<Vec<u8>>, ChunkCounts), DecodeError> {
    let packet = Packet::parse(bytes)?;
    let mut messages = packet.messages();
    let mut out = Vec::new();
    let mut next_chunk = 0;
    for message in messages.by_ref() {
        assert!(message.chunk_range().start >= next_chunk, "a chunk delivered twice");
        assert!(message.chunk_range().end > message.chunk_range().start);
        next_chunk = message.chunk_range().end;
        let fragments: Vec<&[u8]> = message.fragments().collect();
        assert!(fragments.iter().all(|f| within(bytes, f)));
        assert_eq!(fragments.len(), message.chunk_range().len());
        assert_eq!(fragments.iter().map(|f| f.len()).sum::<usize>(), message.len());
        let mut copy = vec![0; message.len()];
        assert_eq!(message.copy_to(&mut copy), Ok(message.len()));
        assert_eq!(copy, message.to_vec());
        out.push(copy);
    }
    assert!(next_chunk <= packet.chunk_count());
    let counts = messages.counts();
    assert_eq!(counts.chunks(), packet.chunk_count());
    assert_eq!(counts.messages, out.len());
    Ok((out, counts))
}

fn encoded(schema: Schema, messages: &[&[u8]]) -> Vec<u8> {
    let mut buf = vec![0; 9_000];
    let len = encode(header(schema), messages, &mut buf).unwrap();
    buf.truncate(len);
    buf
}

fn flip(bytes: &mut [u8], bit: usize) {
    bytes[bit / 8] ^= 1 << (bit % 8);
}

#[test]
fn schemas_hold_the_sources_chunk_counts() {
    assert_eq!((Schema::Hd6.chunk_bytes(), Schema::Hd6.data_bytes(), Schema::Hd6.crc_bytes()), (26, 23, 3));
    assert_eq!((Schema::Hd8.chunk_bytes(), Schema::Hd8.data_bytes(), Schema::Hd8.crc_bytes()), (36, 32, 4));
    // Over UDP and IPv4, a 1,500-byte MTU carries the source's 55 and 40 chunks.
    assert_eq!(Schema::Hd6.max_chunks(UDP_IPV4_PAYLOAD_BYTES), 55);
    assert_eq!(Schema::Hd8.max_chunks(UDP_IPV4_PAYLOAD_BYTES), 40);
    assert_eq!(Schema::Hd6.max_message_bytes(UDP_IPV4_PAYLOAD_BYTES), 55 * 22);
    assert_eq!(Schema::Hd8.max_message_bytes(UDP_IPV4_PAYLOAD_BYTES), 40 * 31);
    assert_eq!(Schema::Hd6.max_chunks(1_500), 56);
    assert_eq!(Schema::Hd8.max_chunks(1_500), 40);
    assert_eq!(Schema::Hd6.max_chunks(HEADER_BYTES + 25), 0);
    assert_eq!(Schema::Hd6.max_chunks(0), 0);
    assert_eq!(Schema::Hd8.max_chunks(usize::MAX), MAX_CHUNKS);
    for schema in Schema::ALL {
        assert_eq!(Schema::from_wire_id(schema.wire_id()), Some(schema));
    }
}

#[test]
fn a_full_packet_round_trips_and_one_more_byte_is_refused() {
    for schema in Schema::ALL {
        let longest = schema.max_message_bytes(UDP_IPV4_PAYLOAD_BYTES);
        let message: Vec<u8> = (0..longest).map(|i| (i * 7) as u8).collect();
        let mut buf = [0u8; UDP_IPV4_PAYLOAD_BYTES];
        let len = encode(header(schema), [&message], &mut buf).unwrap();
        assert_eq!(len, schema.packet_bytes(schema.max_chunks(UDP_IPV4_PAYLOAD_BYTES)));
        let (messages, counts) = decode(&buf[..len]).unwrap();
        assert_eq!(messages, [message.as_slice()]);
        assert_eq!(counts.dropped(), 0);
        assert_eq!(Packet::parse(&buf[..len]).unwrap().header(), header(schema));

        let mut encoder = Encoder::new(header(schema), &mut buf).unwrap();
        let too_long = vec![1u8; longest + 1];
        assert!(matches!(encoder.push(&too_long), Err(EncodeError::MessageTooLarge { .. })));
        assert_eq!(encoder.chunks(), 0, "a refused message writes nothing");
        encoder.push(&message).unwrap();
        assert_eq!(encoder.room(), 0);
        assert!(matches!(encoder.push(&[]), Err(EncodeError::MessageTooLarge { chunks_left: 0, .. })));
    }
    assert_eq!(
        Encoder::new(header(Schema::Hd6), &mut [0u8; HEADER_BYTES - 1]).unwrap_err(),
        EncodeError::BufferTooSmall { len: HEADER_BYTES - 1, needed: HEADER_BYTES }
    );
    assert!(matches!(Schema::Hd8.seal_chunk(&mut [0u8; 26]), Err(EncodeError::ChunkLength { .. })));
}

#[test]
fn an_empty_packet_and_empty_messages_round_trip() {
    for schema in Schema::ALL {
        let bytes = encoded(schema, &[]);
        assert_eq!(bytes.len(), HEADER_BYTES);
        assert_eq!(decode(&bytes).unwrap().0, Vec::<Vec<u8>>::new());
        let bytes = encoded(schema, &[b"", b"x", b""]);
        assert_eq!(bytes.len(), schema.packet_bytes(3));
        assert_eq!(decode(&bytes).unwrap().0, [vec![], b"x".to_vec(), vec![]]);
    }
}

/// Three one-chunk messages; flips in the middle chunk cost it alone.
fn three_messages(schema: Schema) -> (Vec<u8>, [Vec<u8>; 3]) {
    let per_chunk = schema.message_bytes_per_chunk();
    let a: Vec<u8> = (0..per_chunk as u8).collect();
    let b = vec![0x5A; per_chunk - 3];
    let c = b"last".to_vec();
    (encoded(schema, &[&a, &b, &c]), [a, b, c])
}

fn assert_middle_chunk_dropped(schema: Schema, bytes: &[u8], [a, _, c]: &[Vec<u8>; 3], what: &str) {
    let (messages, counts) = decode(bytes).unwrap();
    assert_eq!(messages, [a.clone(), c.clone()], "{schema:?}: {what}");
    assert_eq!(counts, ChunkCounts { messages: 2, delivered: 2, corrupt: 1, malformed: 0, discarded: 0 });
}

#[test]
fn every_single_and_double_bit_error_in_a_chunk_costs_that_chunk_alone() {
    for schema in Schema::ALL {
        let (clean, messages) = three_messages(schema);
        let start = schema.packet_bytes(1);
        let bits = schema.chunk_bytes() * 8;
        let mut decoder = Decoder::new();
        let mut patterns = 0u64;
        for i in 0..bits {
            for j in i..bits {
                let mut bytes = clean.clone();
                flip(&mut bytes[start..], i);
                if j != i {
                    flip(&mut bytes[start..], j);
                }
                assert_middle_chunk_dropped(schema, &bytes, &messages, &format!("bits {i}, {j}"));
                decoder.decode(&bytes, |_| ()).unwrap();
                patterns += 1;
            }
        }
        assert_eq!(patterns as usize, bits + bits * (bits - 1) / 2);
        let stats = decoder.stats();
        assert_eq!((stats.packets, stats.chunks_corrupt, stats.messages), (patterns, patterns, 2 * patterns));
    }
}

/// Weights 3 up to the distance less one, at random positions in the middle chunk (seeded):
/// none gets through, as the distance (tests/chunk_hd.rs) promises.
#[test]
fn sampled_errors_lighter_than_the_distance_cost_that_chunk_alone() {
    let mut rng = SmallRng::seed_from_u64(0x0063_6875_6E6B);
    for schema in Schema::ALL {
        let (clean, messages) = three_messages(schema);
        let start = schema.packet_bytes(1);
        let bits = schema.chunk_bytes() * 8;
        for weight in 3..schema.hamming_distance() as usize {
            for _ in 0..20_000 {
                let mut bytes = clean.clone();
                let positions = sample(&mut rng, bits, weight);
                positions.iter().for_each(|bit| flip(&mut bytes[start..], bit));
                assert_middle_chunk_dropped(schema, &bytes, &messages, &format!("{positions:?}"));
            }
        }
    }
}

/// A message over three chunks loses its middle one: its other two are discarded, the
/// messages around it delivered.
#[test]
fn a_message_that_loses_a_chunk_is_not_delivered() {
    for schema in Schema::ALL {
        let per_chunk = schema.message_bytes_per_chunk();
        let long: Vec<u8> = (0..3 * per_chunk - 1).map(|i| i as u8).collect();
        let clean = encoded(schema, &[b"before", &long, b"after"]);
        for chunk in 1..=3 {
            for bit in [0, 9, schema.chunk_bytes() * 8 - 1] {
                let mut bytes = clean.clone();
                flip(&mut bytes[schema.packet_bytes(chunk)..], bit);
                let (messages, counts) = decode(&bytes).unwrap();
                assert_eq!(messages, [b"before".to_vec(), b"after".to_vec()]);
                assert_eq!(
                    counts,
                    ChunkCounts { messages: 2, delivered: 2, corrupt: 1, malformed: 0, discarded: 2 }
                );
            }
        }
        assert_eq!(decode(&clean).unwrap().0, [b"before".to_vec(), long.clone(), b"after".to_vec()]);
    }
}

#[test]
fn every_single_and_double_bit_error_in_the_header_drops_the_packet() {
    for schema in Schema::ALL {
        let (clean, _) = three_messages(schema);
        let bits = HEADER_BYTES * 8;
        let mut decoder = Decoder::new();
        for i in 0..bits {
            for j in i..bits {
                let mut bytes = clean.clone();
                flip(&mut bytes, i);
                if j != i {
                    flip(&mut bytes, j);
                }
                let error =
                    decoder.decode(&bytes, |_| panic!("delivered from a damaged header")).unwrap_err();
                // The magic is read first: a flip there reads as foreign data.
                let expected = if i < 16 || j < 16 { DecodeError::Magic } else { DecodeError::HeaderCorrupt };
                assert_eq!(error, expected, "bits {i}, {j}");
            }
        }
        let stats = decoder.stats();
        assert_eq!(stats.corrupt_headers + stats.refused, (bits + bits * (bits - 1) / 2) as u64);
        assert_eq!(stats.packets, 0);
    }
}

#[test]
fn wrong_lengths_versions_and_schemas_are_refused() {
    let bytes = encoded(Schema::Hd8, &[b"one", b"two"]);
    let full = bytes.len();
    for cut in 0..full {
        let expected = if cut < HEADER_BYTES { HEADER_BYTES } else { full };
        assert_eq!(Packet::parse(&bytes[..cut]).unwrap_err(), DecodeError::Truncated { len: cut, expected });
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        Packet::parse(&longer).unwrap_err(),
        DecodeError::TrailingBytes { len: full + 1, expected: full }
    );

    let resealed = |at: usize, value: u8| {
        let mut bytes = bytes.clone();
        bytes[at] = value;
        seal_header(&mut bytes).unwrap();
        Packet::parse(&bytes).map(|p| p.chunk_count())
    };
    assert_eq!(resealed(2, 2), Err(DecodeError::Version(2)));
    assert_eq!(resealed(3, 7), Err(DecodeError::Schema(7)));
    // The HD-6 schema's chunks are shorter: the same bytes are too long for two of them.
    assert_eq!(
        resealed(3, 6),
        Err(DecodeError::TrailingBytes { len: full, expected: Schema::Hd6.packet_bytes(2) })
    );
    assert_eq!(
        resealed(24, 3),
        Err(DecodeError::Truncated { len: full, expected: Schema::Hd8.packet_bytes(3) })
    );
    assert_eq!(resealed(24, 2), Ok(2));
    assert!(seal_header(&mut [0u8; 29]).is_err());
}

/// Chunks built by hand that check but break the layout: dropped as malformed, the rest of the
/// packet delivered.
#[test]
fn chunks_that_check_but_break_the_layout_are_dropped() {
    let schema = Schema::Hd6;
    let size = schema.chunk_bytes();
    let per_chunk = schema.message_bytes_per_chunk() as u8;
    let chunk = |control: u8, fill: u8| {
        let mut c = vec![0u8; size];
        c[0] = control;
        let len = usize::from(control & 0x3F).min(usize::from(per_chunk));
        c[1..1 + len].fill(fill);
        schema.seal_chunk(&mut c).unwrap();
        c
    };
    let packet = |chunks: &[Vec<u8>]| {
        let mut bytes = encoded(schema, &vec![&b""[..]; chunks.len()]);
        for (i, c) in chunks.iter().enumerate() {
            bytes[schema.packet_bytes(i)..schema.packet_bytes(i + 1)].copy_from_slice(c);
        }
        bytes
    };
    let whole = chunk(0xC0 | 2, 7); // first and last, two bytes
    let first = chunk(0x80 | per_chunk, 1);
    let middle = chunk(per_chunk, 2);
    let last = chunk(0x40 | 1, 3);
    let cases: [(&str, Vec<Vec<u8>>, usize, usize); 6] = [
        ("a length past the chunk", vec![chunk(0xC0 | (per_chunk + 1), 9), whole.clone()], 1, 0),
        (
            "a short chunk that is not a message's last",
            vec![chunk(0x80 | 3, 9), last.clone(), whole.clone()],
            1,
            1,
        ),
        ("a continuation with no message open", vec![middle.clone(), last.clone(), whole.clone()], 1, 1),
        ("a message never ended", vec![whole.clone(), first.clone(), middle.clone()], 2, 0),
        ("a first chunk inside a message", vec![first.clone(), whole.clone()], 1, 0),
        ("a last continuation with no message open", vec![last.clone(), whole.clone()], 1, 0),
    ];
    for (what, chunks, malformed, discarded) in cases {
        let (messages, counts) = decode(&packet(&chunks)).unwrap();
        assert_eq!(messages, [vec![7u8; 2]], "{what}");
        assert_eq!((counts.malformed, counts.discarded), (malformed, discarded), "{what}");
    }
    let mut padded = whole.clone();
    padded[10] = 1;
    schema.seal_chunk(&mut padded).unwrap();
    let (messages, counts) = decode(&packet(&[padded, whole.clone(), first, middle, last])).unwrap();
    assert_eq!(messages.len(), 2, "non-zero unused bytes");
    assert_eq!(counts.malformed, 1);
    assert_eq!(messages[1].len(), 2 * usize::from(per_chunk) + 1);
}

#[test]
fn a_short_output_is_refused() {
    let bytes = encoded(Schema::Hd6, &[b"twelve bytes"]);
    let packet = Packet::parse(&bytes).unwrap();
    let message = packet.messages().next().unwrap();
    let error = message.copy_to(&mut [0u8; 11]).unwrap_err();
    assert_eq!((error.len, error.needed), (11, 12));
}

/// The fuzz target's seeds (fuzz/seeds/chunk_decode) are packets this encoder writes; they are
/// rewritten with `KAIROS_WRITE_FUZZ_SEEDS=1`.
#[test]
fn the_fuzz_seeds_are_current() {
    let long: Vec<u8> = (0..100u8).collect();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("hd6-three", encoded(Schema::Hd6, &[b"a", &long, b""])),
        ("hd8-three", encoded(Schema::Hd8, &[&long, b"raft entry", b"heartbeat"])),
        ("hd6-empty", encoded(Schema::Hd6, &[])),
        ("hd8-full", {
            let mut buf = [0u8; UDP_IPV4_PAYLOAD_BYTES];
            let len = encode(header(Schema::Hd8), [vec![0xEE; 40 * 31]], &mut buf).unwrap();
            buf[..len].to_vec()
        }),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/chunk_decode");
    for (name, bytes) in &seeds {
        let path = dir.join(format!("{name}.bin"));
        if std::env::var_os("KAIROS_WRITE_FUZZ_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(&committed, bytes, "{} is stale: rerun with KAIROS_WRITE_FUZZ_SEEDS=1", path.display());
    }
}

fn schema_strategy() -> impl Strategy<Value = Schema> {
    prop_oneof![Just(Schema::Hd6), Just(Schema::Hd8)]
}

fn messages_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::collection::vec(any::<u8>(), 0..40),
            1 => prop::collection::vec(any::<u8>(), 0..400),
        ],
        0..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Messages that fit the budget encode and decode to the same list; the first that does
    /// not is refused, and those before it still make a packet.
    #[test]
    fn messages_round_trip(
        schema in schema_strategy(),
        messages in messages_strategy(),
        budget in HEADER_BYTES..3_000usize,
    ) {
        let per_chunk = schema.message_bytes_per_chunk();
        let mut buf = vec![0u8; budget];
        let mut encoder = Encoder::new(header(schema), &mut buf).unwrap();
        let mut fitted = Vec::new();
        let mut chunks = 0;
        for message in &messages {
            let needed = message.len().div_ceil(per_chunk).max(1);
            match encoder.push(message) {
                Ok(()) => {
                    prop_assert!(chunks + needed <= schema.max_chunks(budget));
                    chunks += needed;
                    fitted.push(message.clone());
                }
                Err(EncodeError::MessageTooLarge { len, chunks_left, .. }) => {
                    prop_assert_eq!(len, message.len());
                    prop_assert!(needed > chunks_left);
                    prop_assert_eq!(chunks_left, schema.max_chunks(budget) - chunks);
                    break;
                }
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
        let len = encoder.finish();
        prop_assert_eq!(len, schema.packet_bytes(chunks));
        prop_assert!(len <= budget);
        let (decoded, counts) = decode(&buf[..len]).unwrap();
        prop_assert_eq!(decoded, fitted);
        prop_assert_eq!(counts.dropped(), 0);
        prop_assert_eq!(counts.delivered, chunks);
    }

    /// Any cut of a packet is refused as truncated, whatever it carried.
    #[test]
    fn truncated_packets_are_refused(
        schema in schema_strategy(),
        messages in messages_strategy(),
        cut_at in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; 9_000];
        let mut encoder = Encoder::new(header(schema), &mut buf).unwrap();
        for message in &messages {
            if encoder.push(message).is_err() {
                break;
            }
        }
        let len = encoder.finish();
        let cut = cut_at.index(len);
        let expected = if cut < HEADER_BYTES { HEADER_BYTES } else { len };
        prop_assert_eq!(Packet::parse(&buf[..cut]).unwrap_err(), DecodeError::Truncated { len: cut, expected });
    }

    /// Random bytes, and random bytes behind a valid header, never panic and never deliver a
    /// byte twice or outside the buffer (what `decode` checks).
    #[test]
    fn arbitrary_chunks_decode_safely(schema in schema_strategy(), body in prop::collection::vec(any::<u8>(), 0..600)) {
        let chunks = body.len() / schema.chunk_bytes();
        let mut bytes = encoded(schema, &vec![&b""[..]; chunks]);
        bytes[HEADER_BYTES..].copy_from_slice(&body[..chunks * schema.chunk_bytes()]);
        for c in 0..chunks {
            if body[c * schema.chunk_bytes()] % 4 != 0 {
                schema.seal_chunk(&mut bytes[schema.packet_bytes(c)..schema.packet_bytes(c + 1)]).unwrap();
            }
        }
        decode(&bytes).unwrap();
        let _ = decode(&body);
    }
}

#[test]
fn the_decoder_counts_what_it_drops() {
    let mut decoder = Decoder::new();
    let bytes = encoded(Schema::Hd6, &[b"x", b"y"]);
    let mut got = Vec::new();
    let received = decoder.decode(&bytes, |m| got.push(m.to_vec())).unwrap();
    assert_eq!(received.header, header(Schema::Hd6));
    assert_eq!(got, [b"x".to_vec(), b"y".to_vec()]);
    let mut corrupt = bytes.clone();
    corrupt[20] ^= 1;
    assert_eq!(decoder.decode(&corrupt, |_| ()), Err(DecodeError::HeaderCorrupt));
    assert_eq!(
        decoder.decode(&bytes[..40], |_| ()).unwrap_err(),
        DecodeError::Truncated { len: 40, expected: 82 }
    );
    let mut rng = SmallRng::seed_from_u64(1);
    let mut hit = bytes.clone();
    let bit = rng.random_range(0..26 * 8);
    flip(&mut hit[HEADER_BYTES..], bit);
    decoder.decode(&hit, |_| ()).unwrap();
    let stats = decoder.stats();
    assert_eq!((stats.packets, stats.corrupt_headers, stats.refused), (2, 1, 1));
    assert_eq!((stats.messages, stats.chunks_delivered, stats.chunks_corrupt), (3, 3, 1));
}
