//! A raw vhost-user-blk frontend: the `vhost` crate's `Frontend` for the control messages,
//! split virtqueues in memfd-backed guest memory shared with the daemon (descriptors written
//! with `virtio_queue::mock::DescriptorTable`), and descriptor chains placed by hand. Unlike blkio it sends
//! whatever chain a test asks for (malformed, write to a read-only disk, indirect, ...), so
//! the daemon's own checks can be observed through the status byte and the used ring.
//!
//! Completions are awaited on the call eventfd with `poll(2)` and a timeout, never by sleeping.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};
use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::DescriptorTable;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

pub use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_S_IOERR as S_IOERR, VIRTIO_BLK_S_OK as S_OK, VIRTIO_BLK_S_UNSUPP as S_UNSUPP,
    VIRTIO_BLK_T_DISCARD as T_DISCARD, VIRTIO_BLK_T_FLUSH as T_FLUSH,
    VIRTIO_BLK_T_GET_ID as T_GET_ID, VIRTIO_BLK_T_IN as T_IN, VIRTIO_BLK_T_OUT as T_OUT,
    VIRTIO_BLK_T_WRITE_ZEROES as T_WRITE_ZEROES,
};

/// First guest-physical address of guest RAM: everything below it is not RAM.
pub const GUEST_BASE: u64 = 0x10_0000;
/// Size of the one guest RAM region (a sparse memfd).
pub const GUEST_SIZE: u64 = 64 << 20;
/// A guest-physical address past the end of guest RAM.
pub const OUTSIDE_RAM: u64 = GUEST_BASE + GUEST_SIZE + (1 << 20);
/// What status bytes hold before the device answers: no valid virtio-blk status.
pub const STATUS_UNSET: u8 = 0xFF;
/// How long a request may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Guest RAM reserved per queue for its descriptor table and rings (queues of up to 2048).
const QUEUE_AREA: u64 = 64 << 10;
/// The queue area is followed by the buffers handed out by `alloc`.
const MAX_QUEUES: u64 = 16;

/// One descriptor of a chain: a guest buffer and whether the device may write it.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub write: bool,
}

impl Desc {
    /// A device-readable buffer.
    pub fn r(addr: u64, len: usize) -> Self {
        Desc {
            addr,
            len: len as u32,
            write: false,
        }
    }

    /// A device-writable buffer.
    pub fn w(addr: u64, len: usize) -> Self {
        Desc {
            addr,
            len: len as u32,
            write: true,
        }
    }

    fn raw(&self, extra_flags: u32, next: Option<u16>) -> RawDescriptor {
        let mut flags = extra_flags;
        if self.write {
            flags |= VRING_DESC_F_WRITE;
        }
        if next.is_some() {
            flags |= VRING_DESC_F_NEXT;
        }
        RawDescriptor::from(SplitDescriptor::new(
            self.addr,
            self.len,
            flags as u16,
            next.unwrap_or(0),
        ))
    }
}

/// A used-ring entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    pub head: u16,
    pub len: u32,
}

/// The outcome of one request: the used length, and the byte at the status position (the
/// last byte of the last writable descriptor; `STATUS_UNSET` if the device left it alone,
/// `None` if the chain has no writable descriptor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub used_len: u32,
    pub status: Option<u8>,
}

/// How the frontend sets the device up.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub num_queues: usize,
    pub queue_size: u16,
    pub event_idx: bool,
    /// Share memory with ADD_MEM_REG (CONFIGURE_MEM_SLOTS) instead of SET_MEM_TABLE.
    pub add_mem_region: bool,
    /// Guest RAM as two regions, each its own memfd, meeting at [`SPLIT_AT`] (as RAM
    /// around a hole or hot-plugged memory is), instead of one.
    pub split_memory: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            num_queues: 1,
            queue_size: 256,
            event_idx: false,
            add_mem_region: false,
            split_memory: false,
        }
    }
}

struct Vq {
    size: u16,
    desc: GuestAddress,
    avail: GuestAddress,
    used: GuestAddress,
    kick: EventFd,
    call: EventFd,
    free: Vec<u16>,
    /// Descriptor indices of each chain on the ring, by head.
    chains: HashMap<u16, Vec<u16>>,
    /// The avail index the next chain is published at.
    next_avail: u16,
    /// The used index up to which entries were consumed.
    used_seen: u16,
}

pub struct RawFrontend {
    pub frontend: Frontend,
    pub mem: GuestMemoryMmap<()>,
    /// The virtio features acknowledged.
    pub features: u64,
    queues: Vec<Vq>,
    next_free: u64,
}

impl RawFrontend {
    pub fn connect(socket: &str, opts: Options) -> Self {
        assert!(opts.num_queues as u64 <= MAX_QUEUES && opts.queue_size <= 2048);
        let mut frontend = Frontend::connect(socket, opts.num_queues as u64)
            .unwrap_or_else(|e| panic!("connect {socket}: {e}"));
        // Every message waits for the backend's ack, so failures surface at their call.
        frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        frontend.set_owner().unwrap();

        let offered = frontend.get_features().unwrap();
        assert_ne!(
            offered & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits(),
            0
        );
        let mut features = offered;
        if !opts.event_idx {
            features &= !(1 << VIRTIO_RING_F_EVENT_IDX);
        }
        frontend.set_features(features).unwrap();
        let proto = frontend.get_protocol_features().unwrap();
        let wanted = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS;
        assert!(proto.contains(wanted), "protocol features {proto:?}");
        frontend.set_protocol_features(wanted).unwrap();
        let max_queues = frontend.get_queue_num().unwrap();
        assert!(
            opts.num_queues as u64 <= max_queues,
            "the device has {max_queues} queues"
        );

        let mem = guest_memory(opts.split_memory);
        let infos: Vec<_> = mem
            .iter()
            .map(|region| VhostUserMemoryRegionInfo::from_guest_region(region).unwrap())
            .collect();
        if opts.add_mem_region {
            assert!(frontend.get_max_mem_slots().unwrap() >= infos.len() as u64);
            for info in &infos {
                frontend.add_mem_region(info).unwrap();
            }
        } else {
            frontend.set_mem_table(&infos).unwrap();
        }

        let mut f = RawFrontend {
            frontend,
            mem,
            features,
            queues: Vec::new(),
            next_free: GUEST_BASE + MAX_QUEUES * QUEUE_AREA,
        };
        for q in 0..opts.num_queues {
            // The split virtqueue layout: descriptor table, avail ring (flags, idx, ring,
            // used_event), used ring (flags, idx, ring, avail_event), 16/2/4-byte aligned.
            // (MockSplitQueue::create's layout cannot be used: in virtio-queue 0.18 it puts
            // the used ring inside the avail ring, at avail + 4 + size bytes.)
            let size = u64::from(opts.queue_size);
            let desc = GUEST_BASE + q as u64 * QUEUE_AREA;
            let avail = desc + 16 * size;
            let used = (avail + 6 + 2 * size).next_multiple_of(4);
            f.write(desc, &vec![0; (used + 6 + 8 * size - desc) as usize]);
            f.queues.push(Vq {
                size: opts.queue_size,
                desc: GuestAddress(desc),
                avail: GuestAddress(avail),
                used: GuestAddress(used),
                kick: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                call: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
                free: (0..opts.queue_size).rev().collect(),
                chains: HashMap::new(),
                next_avail: 0,
                used_seen: 0,
            });
            f.start_queue(q, 0);
        }
        f
    }

    /// SET_VRING_NUM/ADDR/BASE/CALL/KICK/ENABLE: (re)starts queue `q` at avail index `base`.
    pub fn start_queue(&mut self, q: usize, base: u16) {
        let vq = &self.queues[q];
        let host = |gpa: GuestAddress| self.mem.get_host_address(gpa).unwrap() as u64;
        let config = VringConfigData {
            queue_max_size: vq.size,
            queue_size: vq.size,
            flags: 0,
            desc_table_addr: host(vq.desc),
            used_ring_addr: host(vq.used),
            avail_ring_addr: host(vq.avail),
            log_addr: None,
        };
        let f = &self.frontend;
        f.set_vring_num(q, vq.size).unwrap();
        f.set_vring_addr(q, &config).unwrap();
        f.set_vring_base(q, base).unwrap();
        f.set_vring_call(q, &vq.call).unwrap();
        f.set_vring_kick(q, &vq.kick).unwrap();
        self.frontend.set_vring_enable(q, true).unwrap();
    }

    /// GET_VRING_BASE: stops queue `q` and returns the device's next avail index.
    pub fn get_vring_base(&mut self, q: usize) -> u16 {
        self.frontend.get_vring_base(q).unwrap() as u16
    }

    /// GET_CONFIG of `size` bytes at `offset`.
    pub fn config(&mut self, offset: u32, size: u32) -> Vec<u8> {
        let (_, data) = self
            .frontend
            .get_config(
                offset,
                size,
                VhostUserConfigFlags::WRITABLE,
                &vec![0; size as usize],
            )
            .unwrap();
        data
    }

    /// Reserves `len` zeroed bytes of guest RAM (4 KiB aligned from 4 KiB up).
    pub fn alloc(&mut self, len: usize) -> u64 {
        let align = if len >= 4096 { 4096 } else { 16 };
        let addr = self.next_free.next_multiple_of(align);
        self.next_free = addr + len as u64;
        assert!(
            self.next_free <= GUEST_BASE + GUEST_SIZE,
            "guest RAM exhausted"
        );
        self.write(addr, &vec![0; len]);
        addr
    }

    /// Allocates guest RAM holding `bytes`.
    pub fn put(&mut self, bytes: &[u8]) -> u64 {
        let addr = self.alloc(bytes.len());
        self.write(addr, bytes);
        addr
    }

    /// A one-byte status buffer holding `STATUS_UNSET`.
    pub fn status_buf(&mut self) -> u64 {
        self.put(&[STATUS_UNSET])
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) {
        self.mem.write_slice(bytes, GuestAddress(addr)).unwrap();
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.mem.read_slice(&mut buf, GuestAddress(addr)).unwrap();
        buf
    }

    /// Truncates the guest RAM's memfd to `len` bytes under the daemon's mapping, as a
    /// hostile VMM could. This process must not touch guest memory past `len` afterwards.
    pub fn shrink_memory(&self, len: u64) {
        let region = self.mem.find_region(GuestAddress(GUEST_BASE)).unwrap();
        region.file_offset().unwrap().file().set_len(len).unwrap();
    }

    /// Places `chain` in queue `q`'s descriptor table and publishes it (no kick). Returns
    /// the head index.
    pub fn submit(&mut self, q: usize, chain: &[Desc]) -> u16 {
        assert!(!chain.is_empty());
        let vq = &mut self.queues[q];
        assert!(
            vq.free.len() >= chain.len(),
            "queue {q} has no room for {} descriptors",
            chain.len()
        );
        let ids: Vec<u16> = (0..chain.len()).map(|_| vq.free.pop().unwrap()).collect();
        let table = DescriptorTable::new(&self.mem, vq.desc, vq.size);
        for (i, d) in chain.iter().enumerate() {
            table
                .store(ids[i], d.raw(0, ids.get(i + 1).copied()))
                .unwrap();
        }
        let head = ids[0];
        vq.chains.insert(head, ids);
        self.publish(q, head);
        head
    }

    /// Places `chain` in an indirect descriptor table in guest RAM, and one descriptor with
    /// VRING_DESC_F_INDIRECT pointing at it in queue `q`. Returns the head index.
    pub fn submit_indirect(&mut self, q: usize, chain: &[Desc]) -> u16 {
        let table_addr = self.alloc(chain.len() * 16);
        let table = DescriptorTable::new(&self.mem, GuestAddress(table_addr), chain.len() as u16);
        for (i, d) in chain.iter().enumerate() {
            let next = (i + 1 < chain.len()).then_some(i as u16 + 1);
            table.store(i as u16, d.raw(0, next)).unwrap();
        }
        let vq = &mut self.queues[q];
        let head = vq.free.pop().expect("a free descriptor");
        let indirect = Desc::r(table_addr, chain.len() * 16).raw(VRING_DESC_F_INDIRECT, None);
        DescriptorTable::new(&self.mem, vq.desc, vq.size)
            .store(head, indirect)
            .unwrap();
        vq.chains.insert(head, vec![head]);
        self.publish(q, head);
        head
    }

    /// Writes `head` to the next avail ring slot, then (after a fence, as drivers do) the
    /// avail index.
    /// Publishes `head` on queue `q`'s avail ring (no kick). Tests of hostile guests call
    /// it directly to publish a head again while it is still in flight.
    pub fn publish(&mut self, q: usize, head: u16) {
        let vq = &mut self.queues[q];
        let slot = vq.avail.0 + 4 + 2 * u64::from(vq.next_avail % vq.size);
        self.mem
            .write_obj(head.to_le(), GuestAddress(slot))
            .unwrap();
        vq.next_avail = vq.next_avail.wrapping_add(1);
        fence(Ordering::SeqCst);
        self.mem
            .store(
                vq.next_avail.to_le(),
                GuestAddress(vq.avail.0 + 2),
                Ordering::Release,
            )
            .unwrap();
    }

    /// Writes queue `q`'s avail index as a hostile guest would, without publishing
    /// entries; `restore_avail_idx` puts the true value back.
    pub fn set_avail_idx_raw(&self, q: usize, idx: u16) {
        let vq = &self.queues[q];
        self.mem
            .store(idx.to_le(), GuestAddress(vq.avail.0 + 2), Ordering::Release)
            .unwrap();
    }

    /// The device's avail_event (EVENT_IDX): the avail index it wants a kick at, i.e. how
    /// far it has consumed the ring when it last re-enabled notifications.
    pub fn avail_event(&self, q: usize) -> u16 {
        let vq = &self.queues[q];
        let at = vq.used.0 + 4 + 8 * u64::from(vq.size);
        u16::from_le(self.mem.load(GuestAddress(at), Ordering::Acquire).unwrap())
    }

    /// Waits (up to 10 s) until the device has consumed queue `q` up to avail index `n`.
    pub fn wait_consumed(&self, q: usize, n: u16) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.avail_event(q) != n {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    pub fn restore_avail_idx(&self, q: usize) {
        self.set_avail_idx_raw(q, self.queues[q].next_avail);
    }

    pub fn kick(&self, q: usize) {
        self.queues[q].kick.write(1).unwrap();
    }

    /// The used index the device has published on queue `q`.
    pub fn used_idx(&self, q: usize) -> u16 {
        let idx: u16 = self
            .mem
            .load(GuestAddress(self.queues[q].used.0 + 2), Ordering::Acquire)
            .unwrap();
        u16::from_le(idx)
    }

    /// The avail index this frontend has published on queue `q`.
    pub fn avail_idx(&self, q: usize) -> u16 {
        self.queues[q].next_avail
    }

    /// Waits (on the call eventfd) until `n` more used entries appear on queue `q`, and
    /// returns them, freeing their descriptors.
    pub fn wait_used(&mut self, q: usize, n: u16) -> Vec<Used> {
        let deadline = Instant::now() + TIMEOUT;
        let event_idx = self.features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        loop {
            let seen = self.used_idx(q);
            if seen.wrapping_sub(self.queues[q].used_seen) >= n {
                break;
            }
            if event_idx {
                // used_event: notify once the entry after `seen` is added. Re-check after
                // publishing it, in case the device added that entry meanwhile.
                let vq = &self.queues[q];
                let used_event = GuestAddress(vq.avail.0 + 4 + 2 * u64::from(vq.size));
                self.mem.write_obj(seen.to_le(), used_event).unwrap();
                fence(Ordering::SeqCst);
                if self.used_idx(q) != seen {
                    continue;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "queue {q}: used idx {seen} after {TIMEOUT:?}, want {}",
                self.queues[q].used_seen.wrapping_add(n)
            );
            let mut pfd = libc::pollfd {
                fd: self.queues[q].call.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe {
                libc::poll(
                    &mut pfd,
                    1,
                    left.as_millis().min(i32::MAX as u128) as i32 + 1,
                )
            };
            assert!(r >= 0, "poll: {}", std::io::Error::last_os_error());
            // Clear the notification; the used index is re-checked after, so none is lost.
            let _ = self.queues[q].call.read();
        }
        let mut out = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let vq = &mut self.queues[q];
            let at = vq.used.0 + 4 + 8 * u64::from(vq.used_seen % vq.size);
            let id = u32::from_le(self.mem.read_obj::<u32>(GuestAddress(at)).unwrap());
            let len = u32::from_le(self.mem.read_obj::<u32>(GuestAddress(at + 4)).unwrap());
            vq.used_seen = vq.used_seen.wrapping_add(1);
            let head = u16::try_from(id).expect("used id is a descriptor index");
            let Some(ids) = vq.chains.remove(&head) else {
                panic!(
                    "queue {q}: used entry {} is head {head}, which is not on the ring",
                    vq.used_seen - 1
                );
            };
            vq.free.extend(ids);
            out.push(Used { head, len });
        }
        out
    }

    /// Submits one chain on queue `q`, kicks, waits for it and reads its status byte.
    pub fn run(&mut self, q: usize, chain: &[Desc]) -> Done {
        let head = self.submit(q, chain);
        self.kick(q);
        self.finish(q, head, chain)
    }

    /// Like `run`, through an indirect descriptor table.
    pub fn run_indirect(&mut self, q: usize, chain: &[Desc]) -> Done {
        let head = self.submit_indirect(q, chain);
        self.kick(q);
        self.finish(q, head, chain)
    }

    fn finish(&mut self, q: usize, head: u16, chain: &[Desc]) -> Done {
        let used = self.wait_used(q, 1)[0];
        assert_eq!(used.head, head, "queue {q}: completion for another chain");
        let status = chain
            .iter()
            .rev()
            .find(|d| d.write && d.len > 0)
            .map(|d| self.read(d.addr + u64::from(d.len) - 1, 1)[0]);
        Done {
            used_len: used.len,
            status,
        }
    }

    /// A read or write of `data_len` bytes at `sector`: header, one data buffer, status.
    /// Returns the chain and the data buffer's address.
    pub fn rw_chain(&mut self, kind: u32, sector: u64, data_len: usize) -> (Vec<Desc>, u64) {
        let hdr = self.put(&header(kind, sector));
        let data = self.alloc(data_len);
        let status = self.status_buf();
        let data_desc = if kind == T_IN {
            Desc::w(data, data_len)
        } else {
            Desc::r(data, data_len)
        };
        (vec![Desc::r(hdr, 16), data_desc, Desc::w(status, 1)], data)
    }

    /// Writes `data` at `sector` on queue `q`; returns the status.
    pub fn write_sectors(&mut self, q: usize, sector: u64, data: &[u8]) -> u8 {
        let (chain, buf) = self.rw_chain(T_OUT, sector, data.len());
        self.write(buf, data);
        let done = self.run(q, &chain);
        assert_eq!(done.used_len, 1, "a write returns only the status byte");
        done.status.unwrap()
    }

    /// Reads `len` bytes at `sector` on queue `q`; returns the status and the data.
    pub fn read_sectors(&mut self, q: usize, sector: u64, len: usize) -> (u8, Vec<u8>) {
        let (chain, buf) = self.rw_chain(T_IN, sector, len);
        let done = self.run(q, &chain);
        let status = done.status.unwrap();
        if status == S_OK as u8 {
            assert_eq!(
                done.used_len as usize,
                len + 1,
                "a read returns its data and the status"
            );
        }
        (status, self.read(buf, len))
    }

    /// A discard or write-zeroes with one segment; returns the request's outcome.
    pub fn range_op(
        &mut self,
        q: usize,
        kind: u32,
        sector: u64,
        num_sectors: u32,
        flags: u32,
    ) -> Done {
        let hdr = self.put(&header(kind, 0));
        let seg = self.put(&range_segment(sector, num_sectors, flags));
        let status = self.status_buf();
        self.run(q, &[Desc::r(hdr, 16), Desc::r(seg, 16), Desc::w(status, 1)])
    }
}

/// A virtio-blk request header: type, ioprio 0, sector.
pub fn header(kind: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&kind.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    h
}

/// A discard/write-zeroes segment: sector, num_sectors, flags.
pub fn range_segment(sector: u64, num_sectors: u32, flags: u32) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&sector.to_le_bytes());
    s[8..12].copy_from_slice(&num_sectors.to_le_bytes());
    s[12..16].copy_from_slice(&flags.to_le_bytes());
    s
}

/// One guest RAM region at `GUEST_BASE`, backed by a memfd the daemon can map.
/// Where the two regions of split guest memory meet.
pub const SPLIT_AT: u64 = GUEST_BASE + GUEST_SIZE / 2;

fn guest_memory(split: bool) -> GuestMemoryMmap<()> {
    let memfd = |len: u64| {
        // SAFETY: memfd_create with a NUL-terminated name; the fd is checked, then owned.
        let fd = unsafe { libc::memfd_create(c"raw-frontend-guest".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        file.set_len(len).unwrap();
        Some(FileOffset::new(file, 0))
    };
    let ranges = if split {
        let half = (SPLIT_AT - GUEST_BASE) as usize;
        vec![
            (GuestAddress(GUEST_BASE), half, memfd(half as u64)),
            (GuestAddress(SPLIT_AT), half, memfd(half as u64)),
        ]
    } else {
        vec![(
            GuestAddress(GUEST_BASE),
            GUEST_SIZE as usize,
            memfd(GUEST_SIZE),
        )]
    };
    GuestMemoryMmap::from_ranges_with_files(&ranges).unwrap()
}
