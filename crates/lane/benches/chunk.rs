//! The chunk codec's cost: a full packet (55 HD-6 or 40 HD-8 one-chunk messages in a UDP/IPv4
//! payload) encoded, and decoded with every message copied out; and one chunk's CRC with the
//! `crc` crate's implementations: bitwise (no table), one 256-entry table, slice-by-16.

use std::hint::black_box;
use std::time::Duration;

use crc::{Crc, NoTable, Table};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kairos_lane::node::chunk::{
    CRC_24_HD6, CRC_32_HD8, Header, Packet, Schema, UDP_IPV4_PAYLOAD_BYTES, encode,
};

fn packet(c: &mut Criterion) {
    let mut group = c.benchmark_group("chunk_packet");
    group.sample_size(30).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500));
    for schema in Schema::ALL {
        let header = Header { schema, tunnel: 7, seq: 1, sent_ns: 2 };
        let count = schema.max_chunks(UDP_IPV4_PAYLOAD_BYTES);
        let messages: Vec<Vec<u8>> =
            (0..count).map(|i| vec![i as u8; schema.message_bytes_per_chunk()]).collect();
        let mut buf = [0u8; UDP_IPV4_PAYLOAD_BYTES];
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(BenchmarkId::new("encode", format!("{schema:?}")), |b| {
            b.iter(|| encode(black_box(header), &messages, &mut buf).unwrap())
        });
        let len = encode(header, &messages, &mut buf).unwrap();
        let mut out = [0u8; 64];
        group.bench_function(BenchmarkId::new("decode", format!("{schema:?}")), |b| {
            b.iter(|| {
                let packet = Packet::parse(black_box(&buf[..len])).unwrap();
                let mut bytes = 0;
                for message in packet.messages() {
                    bytes += message.copy_to(&mut out).unwrap();
                }
                bytes
            })
        });
    }
    group.finish();
}

fn crc_implementations(c: &mut Criterion) {
    static HD6_BITWISE: Crc<u32, NoTable> = Crc::<u32, NoTable>::new(&CRC_24_HD6);
    static HD6_TABLE: Crc<u32, Table<1>> = Crc::<u32, Table<1>>::new(&CRC_24_HD6);
    static HD6_SLICE16: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_24_HD6);
    static HD8_BITWISE: Crc<u32, NoTable> = Crc::<u32, NoTable>::new(&CRC_32_HD8);
    static HD8_TABLE: Crc<u32, Table<1>> = Crc::<u32, Table<1>>::new(&CRC_32_HD8);
    static HD8_SLICE16: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_HD8);
    let mut group = c.benchmark_group("chunk_crc");
    group.sample_size(30).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    let data = [0xA5u8; 32];
    let (hd6, hd8) = (&data[..Schema::Hd6.data_bytes()], &data[..Schema::Hd8.data_bytes()]);
    group.bench_function("Hd6/bitwise", |b| b.iter(|| HD6_BITWISE.checksum(black_box(hd6))));
    group.bench_function("Hd6/table", |b| b.iter(|| HD6_TABLE.checksum(black_box(hd6))));
    group.bench_function("Hd6/slice16", |b| b.iter(|| HD6_SLICE16.checksum(black_box(hd6))));
    group.bench_function("Hd8/bitwise", |b| b.iter(|| HD8_BITWISE.checksum(black_box(hd8))));
    group.bench_function("Hd8/table", |b| b.iter(|| HD8_TABLE.checksum(black_box(hd8))));
    group.bench_function("Hd8/slice16", |b| b.iter(|| HD8_SLICE16.checksum(black_box(hd8))));
    group.finish();
}

criterion_group!(benches, packet, crc_implementations);
criterion_main!(benches);
