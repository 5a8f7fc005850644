//! Memory-mapped `AF_PACKET` rings: Ethernet frames in and out of one interface without a
//! system call per frame and without copying them through a socket buffer.
//!
//! [`PacketRing`] owns an `AF_PACKET`/`SOCK_RAW` socket bound to one interface (by name,
//! `if_nametoindex`) and one shared mapping of two rings the kernel allocated for it: first the
//! receive ring, then the transmit ring. The kernel writes each received frame, with its receive
//! time stamp, into the next free receive slot; a sender writes frames into transmit slots and
//! asks the kernel to send every slot it filled with one `send()` per burst (the kick). This is
//! what `dpdk-testpmd`'s `af_packet` device does, and on the veth testbed it is about twice as
//! fast as a UDP socket at a fraction of the latency, because a spinning reader sees a frame as
//! soon as the softirq has written it, with no wake-up and no `recvmmsg`.
//!
//! # Slot ownership
//!
//! Every slot (a frame, or with [`RxLayout::Blocks`] a block of frames) starts with a status
//! word, and the word says who owns the slot: nobody but its owner touches its other bytes.
//!
//! - Receive: the kernel owns a slot whose status is `TP_STATUS_KERNEL` (0). It fills the slot,
//!   issues a write barrier and then sets `TP_STATUS_USER`. [`PacketRing::rx_burst`] loads the
//!   status with `Acquire` ordering, so once it sees `TP_STATUS_USER` the frame's bytes and
//!   header are visible; it lends the frame to the caller's closure as a `&[u8]` (the kernel
//!   writes nothing in a slot it does not own, so the slice does not change under the borrow),
//!   and then stores `TP_STATUS_KERNEL` with `Release` ordering, so its reads of the slot are
//!   done before the kernel may fill it again. The closure cannot keep the slice (its lifetime
//!   ends with the call), and the slot goes back even if the closure panics.
//! - Transmit: user space owns a slot whose status is `TP_STATUS_AVAILABLE` (0, seen with
//!   `Acquire`, after the kernel released it when the frame's buffer was freed). It writes the
//!   frame and its length, then stores `TP_STATUS_SEND_REQUEST` with `Release`, so the kernel
//!   reading that status sees the frame. The kick sends every requested slot from the
//!   kernel's position onwards; slots are filled in ring order, so the kernel's position and
//!   ours stay together. A slot still `SEND_REQUEST` or `SENDING` at our position means the ring
//!   is full: the burst stops there.
//!
//! The status words are reached only as atomics and the rest of a slot only while we own it.
//! Offsets the kernel wrote (where the frame starts, its length) are checked against the slot
//! before a slice is made, so even a wrong one cannot reach outside the mapping: such a slot is
//! counted ([`RingStats::rx_malformed`]) and returned unread.
//!
//! # Layouts: why frames (`TPACKET_V2`) by default
//!
//! With `TPACKET_V2` every frame has its own slot and status, so a frame is visible to a
//! spinning reader the moment the kernel has written it. With `TPACKET_V3` the kernel packs
//! frames of any size into blocks and hands a block over only when it is full or when its timer
//! (`tp_retire_blk_tov`, whole milliseconds) fires: a quiet link's frames wait up to that timer.
//! Blocks save memory and cache misses at high rates; for latency-bound traffic the wait is
//! prohibitive. Measured across the veth testbed with a spinning reader (idle, one 60-byte
//! datagram every 50 us; `kairos-io`'s `packet_latency` example): frames delivered each datagram
//! 2.0 us after it was sent at the median, blocks with a 1 ms timer 525 us (up to the timer,
//! 1.0 ms at the 99th percentile). The layout is a choice ([`RxLayout`]), frames the default. The transmit ring is always frames, in
//! the socket's version (a socket has one).
//!
//! # Time stamps
//!
//! Each received frame carries `tp_sec`/`tp_nsec` on `CLOCK_REALTIME`. The ring asks for
//! software stamps (`SO_TIMESTAMPING` with `SOF_TIMESTAMPING_RX_SOFTWARE`, which turns the
//! kernel's stamping on for the whole stack; `PACKET_TIMESTAMP` selecting the software stamp),
//! so a frame's stamp is the one the stack gave it when it arrived (for a veth, when the
//! sender's `veth_xmit` handed it over), the same instant a UDP socket's `SO_TIMESTAMPING` stamp
//! records. The kernel turns stamping on a moment after the first socket asks (a deferred
//! static key): until then it stamps frames when it copies them into the ring instead, and
//! those are counted in [`RingStats::rx_stamped_at_copy`].
//!
//! # Other choices
//!
//! - `PACKET_QDISC_BYPASS`: transmitted frames go straight to the driver, past the queueing
//!   discipline (and past taps: other packet sockets do not see them).
//! - `PACKET_IGNORE_OUTGOING`: the receive ring sees only frames arriving on the interface, not
//!   those the namespace's own stack sends out of it.
//! - `PACKET_LOSS`: a transmit frame the kernel cannot send (malformed) is skipped and its slot
//!   freed, instead of stopping the ring.
//! - The socket is bound (and starts receiving) only after its rings exist, so no frame waits
//!   in a socket buffer nobody reads.
//!
//! Needs `CAP_NET_RAW`. Errors name the interface and the step that failed.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// `TPACKET_V2` in `enum tpacket_versions`.
const TPACKET_V2: libc::c_int = 1;
/// `TPACKET_V3` in `enum tpacket_versions`.
const TPACKET_V3: libc::c_int = 2;
/// An Ethernet header: the shortest frame the transmit ring accepts.
pub const ETH_HEADER_LEN: usize = 14;
/// Every ethertype: `ETH_P_ALL`.
pub const ETH_P_ALL: u16 = libc::ETH_P_ALL as u16;
/// IPv4: `ETH_P_IP`.
pub const ETH_P_IP: u16 = libc::ETH_P_IP as u16;

mod config;

pub use config::{PacketRingError, RingConfig, RingStats, RxLayout};

/// The receive ring's geometry and where the reader is.
#[derive(Debug)]
enum RxRing {
    Frames { count: usize, frame_size: usize, next: usize },
    Blocks { count: usize, block_size: usize, cursor: BlockCursor },
}

/// A reader's place in a block ring: the block, and within a block it owns, the next frame.
#[derive(Debug, Default, Clone, Copy)]
struct BlockCursor {
    block: usize,
    /// Frames of the current block already handed over, and the offset of the next one; only
    /// meaningful while the block is ours.
    taken: u32,
    offset: usize,
}

/// Where the fields of a transmit slot's header are, in the socket's version.
#[derive(Debug, Clone, Copy)]
struct TxHeader {
    status: usize,
    len: usize,
    snaplen: usize,
    /// Where the frame's bytes start (the header, aligned, when `PACKET_TX_HAS_OFF` is off).
    data: usize,
}

const TX_V2: TxHeader =
    TxHeader { status: 0, len: 4, snaplen: 8, data: align16(size_of::<libc::tpacket2_hdr>()) };
const TX_V3: TxHeader =
    TxHeader { status: 20, len: 16, snaplen: 12, data: align16(size_of::<libc::tpacket3_hdr>()) };

/// A `TPACKET_V3` frame header, aligned as the kernel lays frames out.
const TPACKET3_HEADER: usize = align16(size_of::<libc::tpacket3_hdr>());

impl BlockCursor {
    /// The start of block `block`.
    fn at(block: usize) -> Self {
        Self { block, taken: 0, offset: 0 }
    }
}

const fn align16(x: usize) -> usize {
    (x + 15) & !15
}

/// An `AF_PACKET` socket on one interface with memory-mapped receive and transmit rings;
/// unmapped and closed on drop.
#[derive(Debug)]
pub struct PacketRing {
    fd: OwnedFd,
    interface: String,
    ifindex: u32,
    map: NonNull<u8>,
    map_len: usize,
    rx: RxRing,
    tx_offset: usize,
    tx_count: usize,
    tx_frame_size: usize,
    tx_next: usize,
    tx_header: TxHeader,
    /// The longest frame sent: the slot's room, and the MTU plus an Ethernet header.
    tx_max_len: usize,
    stats: RingStats,
}

// SAFETY: the ring owns its mapping and socket; the raw pointer is only dereferenced through
// `&mut self` methods (or `&self` ones that read nothing in the mapping), so moving the owner to
// another thread moves the only user of the mapping with it. The kernel's side is unaffected by
// which thread reads.
unsafe impl Send for PacketRing {}

impl PacketRing {
    /// Opens a ring on `interface` in the calling thread's network namespace (the socket stays
    /// there whichever thread uses it).
    pub fn open(interface: &str, config: RingConfig) -> Result<Self, PacketRingError> {
        let config_err = |reason: String| PacketRingError::Config { interface: interface.to_owned(), reason };
        let os = |step: &'static str| {
            let source = io::Error::last_os_error();
            PacketRingError::Os { interface: interface.to_owned(), step, source }
        };
        let frame_size = config.frame_size as usize;
        if !frame_size.is_power_of_two() || !(256..=65536).contains(&frame_size) {
            return Err(config_err(format!(
                "a ring slot must be a power of two from 256 to 65536 bytes, got {frame_size}"
            )));
        }
        let name = CString::new(interface)
            .ok()
            .filter(|n| !n.as_bytes().is_empty() && n.as_bytes().len() < libc::IFNAMSIZ)
            .ok_or_else(|| config_err("not an interface name (1 to 15 bytes, no NUL)".into()))?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(os("if_nametoindex"));
        }

        let page = crate::memory::page_size();
        let slot_block = frame_size.max(page);
        let per_block = slot_block / frame_size;
        let whole_blocks = |frames: u32| (frames as usize).div_ceil(per_block).max(1);
        let (version, rx_req, rx) = match config.rx {
            RxLayout::Frames { count } => {
                let blocks = whole_blocks(count);
                let req = ring_request(slot_block, blocks, frame_size, 0);
                let rx = RxRing::Frames { count: blocks * per_block, frame_size, next: 0 };
                (TPACKET_V2, req, rx)
            }
            RxLayout::Blocks { count, block_size, timeout_ms } => {
                let block_size = block_size as usize;
                if !block_size.is_power_of_two() || block_size < page.max(frame_size) || block_size > 1 << 24
                {
                    return Err(config_err(format!(
                        "a block must be a power of two from {} to {} bytes, got {block_size}",
                        page.max(frame_size),
                        1 << 24
                    )));
                }
                if count == 0 || timeout_ms == 0 {
                    return Err(config_err(
                        "a block ring needs at least one block and a timer of 1 ms or more".into(),
                    ));
                }
                let blocks = count as usize;
                let req = ring_request(block_size, blocks, frame_size, timeout_ms);
                let rx = RxRing::Blocks { count: blocks, block_size, cursor: BlockCursor::default() };
                (TPACKET_V3, req, rx)
            }
        };
        let tx_blocks = whole_blocks(config.tx_frames);
        let tx_req = ring_request(slot_block, tx_blocks, frame_size, 0);
        let rx_len = rx_req.tp_block_size as usize * rx_req.tp_block_nr as usize;
        let tx_len = tx_req.tp_block_size as usize * tx_req.tp_block_nr as usize;
        if rx_len.checked_add(tx_len).is_none_or(|total| total > 1 << 31) {
            return Err(config_err(format!("rings of {rx_len} + {tx_len} bytes: at most 2 GiB in all")));
        }

        // Protocol 0: nothing is received until the bind below, after the rings exist.
        // SAFETY: plain socket creation; the descriptor is owned right after.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os("socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a descriptor we just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let set =
            |level, name, value: &dyn OptionValue, step| set_option(&fd, interface, level, name, value, step);
        set(libc::SOL_PACKET, libc::PACKET_VERSION, &version, "PACKET_VERSION")?;
        set(libc::SOL_PACKET, libc::PACKET_LOSS, &1, "PACKET_LOSS")?;
        if config.qdisc_bypass {
            set(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1, "PACKET_QDISC_BYPASS")?;
        }
        set(libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1, "PACKET_IGNORE_OUTGOING")?;
        let software = libc::SOF_TIMESTAMPING_SOFTWARE as libc::c_int;
        set(libc::SOL_PACKET, libc::PACKET_TIMESTAMP, &software, "PACKET_TIMESTAMP")?;
        let stamping = (libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE) as libc::c_int;
        set(libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &stamping, "SO_TIMESTAMPING")?;
        set(libc::SOL_PACKET, libc::PACKET_RX_RING, &rx_req, "PACKET_RX_RING")?;
        set(libc::SOL_PACKET, libc::PACKET_TX_RING, &tx_req, "PACKET_TX_RING")?;

        let map_len = rx_len + tx_len;
        // SAFETY: a fresh shared mapping of the socket's rings (the kernel maps the receive ring
        // then the transmit ring, `map_len` bytes in all); no existing memory is touched.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(os("mmap"));
        }
        let map = NonNull::new(addr.cast::<u8>()).ok_or_else(|| os("mmap"))?;
        let mtu = interface_mtu(&fd, &name).unwrap_or(1500);
        let tx_header = if version == TPACKET_V3 { TX_V3 } else { TX_V2 };
        let ring = PacketRing {
            fd,
            interface: interface.to_owned(),
            ifindex,
            map,
            map_len,
            rx,
            tx_offset: rx_len,
            tx_count: tx_blocks * per_block,
            tx_frame_size: frame_size,
            tx_next: 0,
            tx_header,
            tx_max_len: (frame_size - tx_header.data).min(mtu + ETH_HEADER_LEN).max(ETH_HEADER_LEN),
            stats: RingStats::default(),
        };
        // From here on, drop unmaps and closes on every error path.
        let address = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as libc::c_ushort,
            sll_protocol: config.ethertype.to_be(),
            sll_ifindex: ifindex as libc::c_int,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 0,
            sll_addr: [0; 8],
        };
        // SAFETY: `address` is a valid sockaddr_ll whose size is passed; it outlives the call.
        let rc = unsafe {
            libc::bind(
                ring.fd.as_raw_fd(),
                (&address as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(os("bind"));
        }
        Ok(ring)
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The interface's index in its namespace.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The longest frame [`Self::tx_burst`] sends, bytes (a slot's room, or the MTU plus an
    /// Ethernet header when smaller).
    pub fn max_tx_frame(&self) -> usize {
        self.tx_max_len
    }

    /// Receive slots (frames, or blocks with [`RxLayout::Blocks`]) and transmit slots.
    pub fn slots(&self) -> (usize, usize) {
        let rx = match self.rx {
            RxRing::Frames { count, .. } | RxRing::Blocks { count, .. } => count,
        };
        (rx, self.tx_count)
    }

    /// The interface's hardware (MAC) address (`SIOCGIFHWADDR`), read in the socket's
    /// namespace whichever thread asks.
    pub fn hardware_address(&self) -> Result<[u8; 6], PacketRingError> {
        let mut req = ifreq_for(&self.interface);
        // SAFETY: `req` is a valid ifreq naming the interface, writable for the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
        if rc != 0 {
            return Err(self.os("SIOCGIFHWADDR"));
        }
        // SAFETY: on success the kernel wrote the hardware address into this union member.
        let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
        Ok(std::array::from_fn(|i| data[i] as u8))
    }

    fn os(&self, step: &'static str) -> PacketRingError {
        PacketRingError::Os { interface: self.interface.clone(), step, source: io::Error::last_os_error() }
    }

    /// The status word at `offset` in the mapping.
    fn status_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset.is_multiple_of(4) && offset + 4 <= self.map_len);
        // SAFETY: every caller passes the offset of a slot's status word: inside the mapping,
        // 4-byte aligned (slots and blocks are 16-byte aligned, the word is at 0, 8 or 20 in
        // them), and the mapping lives as long as `self`. The kernel writes the word
        // concurrently, so it is only ever reached as an atomic, here and (with its own
        // barriers) in the kernel.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(offset).cast()) }
    }

    /// Reads a `u32` (or `u16`, as `u32`) field of a slot we own.
    fn field(&self, offset: usize, width: usize) -> u32 {
        debug_assert!(offset + width <= self.map_len);
        // SAFETY: the caller owns the slot holding `offset` (its status said so, read with
        // Acquire), so the kernel does not write it; the offset is inside the mapping and the
        // read is unaligned-tolerant.
        unsafe {
            let p = self.map.as_ptr().add(offset);
            if width == 2 {
                u32::from(p.cast::<u16>().read_unaligned())
            } else {
                p.cast::<u32>().read_unaligned()
            }
        }
    }

    /// Hands up to `max` received frames, in order, to `each` with their kernel receive time
    /// stamps (`CLOCK_REALTIME` ns), returning every slot to the kernel after its frame's call;
    /// returns how many were handed over. Never blocks.
    pub fn rx_burst(&mut self, max: usize, mut each: impl FnMut(&[u8], u64)) -> usize {
        match self.rx {
            RxRing::Frames { .. } => self.rx_frames(max, &mut each),
            RxRing::Blocks { .. } => self.rx_blocks(max, &mut each),
        }
    }

    fn rx_frames(&mut self, max: usize, each: &mut dyn FnMut(&[u8], u64)) -> usize {
        let mut handed = 0;
        while handed < max {
            let RxRing::Frames { count, frame_size, next } = self.rx else { break };
            let slot = next * frame_size;
            let status = self.status_at(slot).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            // struct tpacket2_hdr: status, len, snaplen, mac (u16), net (u16), sec, nsec.
            let len = self.field(slot + 4, 4) as usize;
            let snaplen = self.field(slot + 8, 4) as usize;
            let mac = self.field(slot + 12, 2) as usize;
            let stamp =
                u64::from(self.field(slot + 16, 4)) * 1_000_000_000 + u64::from(self.field(slot + 20, 4));
            // Moved on before the closure runs, so a closure that panics leaves the reader at
            // the next slot, in step with the kernel.
            self.rx = RxRing::Frames { count, frame_size, next: (next + 1) % count };
            let lent = {
                let _release = Release(self.status_at(slot));
                self.lend(slot, mac, snaplen, frame_size, stamp, each)
            };
            self.count_frame(lent, len, snaplen, status);
            handed += 1;
        }
        handed
    }

    fn rx_blocks(&mut self, max: usize, each: &mut dyn FnMut(&[u8], u64)) -> usize {
        let mut handed = 0;
        while handed < max {
            let RxRing::Blocks { count, block_size, cursor } = self.rx else { break };
            let base = cursor.block * block_size;
            // struct tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1:
            // block_status (8), num_pkts (12), offset_to_first_pkt (16), blk_len (20).
            let status = self.status_at(base + 8);
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            let frames = self.field(base + 12, 4);
            let mut next = BlockCursor { block: cursor.block, taken: cursor.taken + 1, offset: 0 };
            if cursor.taken >= frames {
                // Every frame handed over (this path is reached when a closure panicked after
                // the block's last frame, before the block went back).
                status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.rx =
                    RxRing::Blocks { count, block_size, cursor: BlockCursor::at((cursor.block + 1) % count) };
                continue;
            }
            let offset = if cursor.taken == 0 { self.field(base + 16, 4) as usize } else { cursor.offset };
            if offset.checked_add(TPACKET3_HEADER).is_none_or(|end| end > block_size) {
                self.stats.rx_malformed += 1;
                next.taken = frames;
                self.rx = RxRing::Blocks { count, block_size, cursor: next };
                continue;
            }
            // struct tpacket3_hdr: next_offset, sec, nsec, snaplen, len, status, mac (u16).
            let at = base + offset;
            let next_offset = self.field(at, 4) as usize;
            let stamp = u64::from(self.field(at + 4, 4)) * 1_000_000_000 + u64::from(self.field(at + 8, 4));
            let snaplen = self.field(at + 12, 4) as usize;
            let len = self.field(at + 16, 4) as usize;
            let frame_status = self.field(at + 20, 4);
            let mac = self.field(at + 24, 2) as usize;
            next.offset = offset.saturating_add(next_offset);
            // Moved on before the closure runs, as with frames.
            self.rx = RxRing::Blocks { count, block_size, cursor: next };
            let lent = self.lend(base, offset + mac, snaplen, block_size, stamp, each);
            self.count_frame(lent, len, snaplen, frame_status);
            handed += 1;
            if next.taken >= frames {
                self.status_at(base + 8).store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.rx =
                    RxRing::Blocks { count, block_size, cursor: BlockCursor::at((cursor.block + 1) % count) };
            }
        }
        handed
    }

    /// Lends the frame at `slot + mac` (`snaplen` bytes, which must lie within the slot's
    /// `room` bytes) to `each`; returns false, lending nothing, when they do not.
    fn lend(
        &self,
        slot: usize,
        mac: usize,
        snaplen: usize,
        room: usize,
        stamp: u64,
        each: &mut dyn FnMut(&[u8], u64),
    ) -> bool {
        if mac.checked_add(snaplen).is_none_or(|end| end > room) {
            return false;
        }
        // SAFETY: `slot + mac .. + snaplen` lies within the slot (checked above; the slot is
        // within the mapping), which the caller owns (its status said TP_STATUS_USER, read
        // with Acquire) until it stores TP_STATUS_KERNEL after this call returns or unwinds;
        // the kernel writes nothing in it meanwhile, and the slice cannot outlive the call.
        let frame = unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(slot + mac), snaplen) };
        each(frame, stamp);
        true
    }

    fn count_frame(&mut self, lent: bool, len: usize, snaplen: usize, status: u32) {
        if !lent {
            self.stats.rx_malformed += 1;
            return;
        }
        self.stats.rx_frames += 1;
        self.stats.rx_truncated += u64::from(len > snaplen);
        self.stats.rx_stamped_at_copy += u64::from(status & libc::TP_STATUS_TS_SOFTWARE == 0);
    }

    /// Writes up to `count` frames into free transmit slots, frame `i` by `fill(i, slot)`,
    /// which returns its length, and kicks the kernel once to send them; returns how many were
    /// queued. A length outside [`ETH_HEADER_LEN`]`..=slot.len()` ends the burst at that frame
    /// (its slot stays free). A full ring ends it too (counted in [`RingStats::tx_ring_full`]),
    /// and kicks the kernel again for the slots it still holds.
    /// When the kick itself fails, the frames stay queued and leave with the next kick; the
    /// error is returned.
    pub fn tx_burst_with(
        &mut self,
        count: usize,
        mut fill: impl FnMut(usize, &mut [u8]) -> usize,
    ) -> Result<usize, PacketRingError> {
        let header = self.tx_header;
        let mut queued = 0;
        let mut full = false;
        while queued < count {
            let slot = self.tx_offset + self.tx_next * self.tx_frame_size;
            let status = self.status_at(slot + header.status).load(Ordering::Acquire);
            if status & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
                self.stats.tx_ring_full += (count - queued) as u64;
                full = true;
                break;
            }
            let room = self.tx_max_len;
            // SAFETY: the slot's status is AVAILABLE (or WRONG_FORMAT, which the kernel also no
            // longer touches), seen with Acquire after the kernel released it, so the slot is
            // ours; `slot + data .. + room` lies within it (room <= frame_size - data), and the
            // slice lives only for the `fill` call.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(slot + header.data), room) };
            let len = fill(queued, bytes);
            if !(ETH_HEADER_LEN..=room).contains(&len) {
                break;
            }
            // SAFETY: as above, the slot is ours; `len` and `snaplen` are 4-byte fields at their
            // offsets in the header (V3 needs `tp_next_offset` zero, which the kernel left so
            // and we never write).
            unsafe {
                let p = self.map.as_ptr().add(slot);
                p.add(header.len).cast::<u32>().write_unaligned(len as u32);
                p.add(header.snaplen).cast::<u32>().write_unaligned(len as u32);
            }
            self.status_at(slot + header.status).store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_next = (self.tx_next + 1) % self.tx_count;
            queued += 1;
        }
        self.stats.tx_frames += queued as u64;
        // A full ring kicks too: slots a congested kick left requested would otherwise wait
        // for a burst that can no longer queue anything.
        if queued > 0 || full {
            self.kick()?;
        }
        Ok(queued)
    }

    /// Queues `frames` (each from [`ETH_HEADER_LEN`] to [`Self::max_tx_frame`] bytes, else
    /// nothing is queued and the error says which) and kicks the kernel once; returns how many
    /// were queued (fewer when the ring is full).
    pub fn tx_burst(&mut self, frames: &[&[u8]]) -> Result<usize, PacketRingError> {
        let max = self.tx_max_len;
        if let Some(bad) = frames.iter().find(|f| !(ETH_HEADER_LEN..=max).contains(&f.len())) {
            return Err(PacketRingError::FrameLength {
                interface: self.interface.clone(),
                len: bad.len(),
                max,
            });
        }
        self.tx_burst_with(frames.len(), |i, slot| {
            slot[..frames[i].len()].copy_from_slice(frames[i]);
            frames[i].len()
        })
    }

    /// Asks the kernel to send every requested transmit slot, without waiting.
    fn kick(&self) -> Result<(), PacketRingError> {
        // SAFETY: a send of no bytes from no buffer: with a transmit ring the kernel sends the
        // ring's requested slots instead; MSG_DONTWAIT keeps it from waiting for completion.
        let rc = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if rc >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        // Congestion: the frames stay requested and leave with the next kick.
        if matches!(err.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR)) {
            return Ok(());
        }
        Err(PacketRingError::Os {
            interface: self.interface.clone(),
            step: "send (transmit ring kick)",
            source: err,
        })
    }

    /// Waits up to `timeout` for a received frame (`ppoll`); returns whether one may be
    /// waiting. A signal ends the wait early with the `Interrupted` error.
    pub fn wait_readable(&self, timeout: Duration) -> Result<bool, PacketRingError> {
        super::poll::wait_readable(&self.fd, timeout).map_err(|source| PacketRingError::Os {
            interface: self.interface.clone(),
            step: "ppoll",
            source,
        })
    }

    /// The ring's counts, after adding the kernel's counters (`PACKET_STATISTICS`, which the
    /// kernel resets on each read: they are accumulated here).
    pub fn statistics(&mut self) -> Result<RingStats, PacketRingError> {
        let mut kernel = libc::tpacket_stats_v3 { tp_packets: 0, tp_drops: 0, tp_freeze_q_cnt: 0 };
        let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `kernel` and `len` are valid and writable, and `len` is `kernel`'s size: the
        // kernel writes at most that many bytes (a V2 socket writes the shorter tpacket_stats).
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut kernel as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(self.os("PACKET_STATISTICS"));
        }
        self.stats.kernel_received += u64::from(kernel.tp_packets);
        self.stats.kernel_drops += u64::from(kernel.tp_drops);
        if len as usize >= size_of::<libc::tpacket_stats_v3>() {
            self.stats.kernel_queue_freezes += u64::from(kernel.tp_freeze_q_cnt);
        }
        Ok(self.stats)
    }
}

/// Hands a receive slot back to the kernel when dropped (after the frame's closure returned or
/// unwound).
struct Release<'a>(&'a AtomicU32);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl AsFd for PacketRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: `map` and `map_len` are exactly what mmap returned and was given, unmapped
        // only here, once; no slice into the mapping outlives the `&mut self` call that made it.
        // The socket closes after (OwnedFd's drop), and the kernel frees the rings then.
        let rc = unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
        debug_assert_eq!(rc, 0, "munmap of our own ring failed: {}", io::Error::last_os_error());
    }
}

fn ring_request(block_size: usize, blocks: usize, frame_size: usize, timeout_ms: u32) -> libc::tpacket_req3 {
    libc::tpacket_req3 {
        tp_block_size: block_size as libc::c_uint,
        tp_block_nr: blocks as libc::c_uint,
        tp_frame_size: frame_size as libc::c_uint,
        tp_frame_nr: (blocks * (block_size / frame_size)) as libc::c_uint,
        tp_retire_blk_tov: timeout_ms,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    }
}

/// A value a socket option is set to: an `int` or a ring request.
trait OptionValue {
    /// The value's address and size, for `setsockopt`.
    fn raw(&self) -> (*const libc::c_void, libc::socklen_t);
}

impl OptionValue for libc::c_int {
    fn raw(&self) -> (*const libc::c_void, libc::socklen_t) {
        ((self as *const libc::c_int).cast(), size_of::<libc::c_int>() as libc::socklen_t)
    }
}

impl OptionValue for libc::tpacket_req3 {
    fn raw(&self) -> (*const libc::c_void, libc::socklen_t) {
        ((self as *const libc::tpacket_req3).cast(), size_of::<libc::tpacket_req3>() as libc::socklen_t)
    }
}

/// Sets a socket option; the error names the interface and the option.
fn set_option(
    fd: &OwnedFd,
    interface: &str,
    level: libc::c_int,
    name: libc::c_int,
    value: &dyn OptionValue,
    step: &'static str,
) -> Result<(), PacketRingError> {
    let (ptr, len) = value.raw();
    // SAFETY: `ptr` and `len` describe a live, initialised value borrowed for the call (an int
    // or a tpacket_req3, whose tpacket_req prefix is what a V2 ring reads); the kernel only
    // reads it.
    let rc = unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, ptr, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(PacketRingError::Os { interface: interface.to_owned(), step, source: io::Error::last_os_error() })
    }
}

/// An `ifreq` naming `interface` (at most 15 bytes, checked by the caller), the rest zero.
fn ifreq_for(interface: &str) -> libc::ifreq {
    // SAFETY: ifreq is a plain C struct (a name and a union of plain data) for which all
    // zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(interface.as_bytes().iter().take(libc::IFNAMSIZ - 1)) {
        *dst = src as libc::c_char;
    }
    req
}

/// The interface's MTU (`SIOCGIFMTU`).
fn interface_mtu(fd: &OwnedFd, name: &CString) -> Option<usize> {
    let mut req = ifreq_for(name.to_str().ok()?);
    // SAFETY: `req` is a valid ifreq naming the interface, writable for the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return None;
    }
    // SAFETY: on success the kernel wrote the MTU into this union member.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    usize::try_from(mtu).ok()
}

#[cfg(test)]
mod tests;
