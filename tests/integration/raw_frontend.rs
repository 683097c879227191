//! A raw vhost-user-blk frontend: the `vhost` crate's `Frontend` for the control messages,
//! split virtqueues in memfd-backed guest memory shared with the daemon (the driver side
//! is `crate::virtqueue`), and descriptor chains placed by hand. Unlike blkio it sends
//! whatever chain a test asks for (malformed, write to a read-only disk, indirect, ...), so
//! the daemon's own checks can be observed through the status byte and the used ring.

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::VhostBackend;
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::virtqueue::{self, Arena, Vq};
// Chains and used entries are the driver side's, re-exported for the tests that use
// this frontend.
pub use crate::virtqueue::{Desc, Used};

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
/// Guest RAM reserved per queue for its descriptor table and rings (queues of up to 2048).
const QUEUE_AREA: u64 = 64 << 10;
/// The queue area is followed by the buffers handed out by `alloc`.
const MAX_QUEUES: u64 = 16;

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
    /// Guest RAM on hugetlbfs (memfds made with `MFD_HUGETLB`, as QEMU's
    /// `memory-backend-memfd,hugetlb=on` or a `memory-backend-file` on /dev/hugepages),
    /// the pool grown for it if needed.
    pub huge_pages: bool,
    /// Negotiate BACKEND_REQ and hand the daemon a channel for its requests
    /// ([`RawFrontend::backend_channel`]), as QEMU does.
    pub backend_channel: bool,
    /// Negotiate LOG_SHMFD, so that a dirty log can be set (SET_LOG_BASE).
    pub dirty_log: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            num_queues: 1,
            queue_size: 256,
            event_idx: false,
            add_mem_region: false,
            split_memory: false,
            huge_pages: false,
            backend_channel: false,
            dirty_log: false,
        }
    }
}

pub struct RawFrontend {
    pub frontend: Frontend,
    pub mem: GuestMemoryMmap<()>,
    /// The virtio features acknowledged.
    pub features: u64,
    /// Our end of the channel the daemon sends its requests on (`Options::backend_channel`).
    pub backend_channel: Option<std::os::unix::net::UnixStream>,
    queues: Vec<Vq>,
    /// Request buffers, after the queue areas.
    buffers: Arena,
    /// `Options::huge_pages`: the pool grown for `mem`, shrunk back after it (fields drop
    /// in order).
    _huge_pages: Option<crate::huge_pages::HugePagePool>,
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
        let wanted = if opts.backend_channel {
            wanted | VhostUserProtocolFeatures::BACKEND_REQ
        } else {
            wanted
        };
        let wanted = if opts.dirty_log {
            wanted | VhostUserProtocolFeatures::LOG_SHMFD
        } else {
            wanted
        };
        assert!(proto.contains(wanted), "protocol features {proto:?}");
        frontend.set_protocol_features(wanted).unwrap();
        let backend_channel = opts.backend_channel.then(|| {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            frontend.set_backend_request_fd(&theirs).unwrap();
            ours
        });
        let max_queues = frontend.get_queue_num().unwrap();
        assert!(
            opts.num_queues as u64 <= max_queues,
            "the device has {max_queues} queues"
        );

        let huge_pages = opts
            .huge_pages
            .then(|| crate::huge_pages::HugePagePool::reserve(GUEST_SIZE));
        let mem = guest_ram(opts.split_memory, opts.huge_pages);
        let infos = virtqueue::region_infos(&mem);
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
            backend_channel,
            queues: Vec::new(),
            buffers: Arena::new(
                GUEST_BASE + MAX_QUEUES * QUEUE_AREA,
                GUEST_BASE + GUEST_SIZE,
            ),
            _huge_pages: huge_pages,
        };
        for q in 0..opts.num_queues {
            let at = GUEST_BASE + q as u64 * QUEUE_AREA;
            let vq = Vq::new(&f.mem, q, opts.queue_size, at);
            f.queues.push(vq);
            f.start_queue(q, 0);
        }
        f
    }

    /// SET_VRING_NUM/ADDR/BASE/CALL/KICK/ENABLE: (re)starts queue `q` at avail index `base`.
    pub fn start_queue(&mut self, q: usize, base: u16) {
        let vq = &self.queues[q];
        let config = vq.vring_config(&self.mem);
        let f = &self.frontend;
        f.set_vring_num(q, vq.size).unwrap();
        f.set_vring_addr(q, &config).unwrap();
        f.set_vring_base(q, base).unwrap();
        f.set_vring_call(q, &vq.call).unwrap();
        f.set_vring_kick(q, &vq.kick).unwrap();
        self.frontend.set_vring_enable(q, true).unwrap();
    }

    /// Guest-physical address of queue `q`'s used ring.
    pub fn used_ring(&self, q: usize) -> u64 {
        self.queues[q].used_ring()
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
        self.buffers.alloc(&self.mem, len)
    }

    /// Allocates guest RAM holding `bytes`.
    pub fn put(&mut self, bytes: &[u8]) -> u64 {
        self.buffers.put(&self.mem, bytes)
    }

    /// A one-byte status buffer holding `STATUS_UNSET`.
    pub fn status_buf(&mut self) -> u64 {
        self.put(&[STATUS_UNSET])
    }

    pub fn write(&self, addr: u64, bytes: &[u8]) {
        virtqueue::write(&self.mem, addr, bytes);
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        virtqueue::read(&self.mem, addr, len)
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
        self.queues[q].submit(&self.mem, chain)
    }

    /// Places `chain` in an indirect descriptor table in guest RAM, and one descriptor with
    /// VRING_DESC_F_INDIRECT pointing at it in queue `q`. Returns the head index.
    pub fn submit_indirect(&mut self, q: usize, chain: &[Desc]) -> u16 {
        let table_addr = self.alloc(chain.len() * 16);
        self.queues[q].submit_indirect(&self.mem, table_addr, chain)
    }

    /// Publishes `head` on queue `q`'s avail ring (no kick). Tests of hostile guests call
    /// it directly to publish a head again while it is still in flight.
    pub fn publish(&mut self, q: usize, head: u16) {
        self.queues[q].publish(&self.mem, head);
    }

    /// Writes queue `q`'s avail index as a hostile guest would, without publishing
    /// entries; `restore_avail_idx` puts the true value back.
    pub fn set_avail_idx_raw(&self, q: usize, idx: u16) {
        self.queues[q].set_avail_idx(&self.mem, idx);
    }

    /// The device's avail_event (EVENT_IDX): the avail index it wants a kick at, i.e. how
    /// far it has consumed the ring when it last re-enabled notifications.
    pub fn avail_event(&self, q: usize) -> u16 {
        self.queues[q].avail_event(&self.mem)
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
        self.set_avail_idx_raw(q, self.queues[q].next_avail());
    }

    pub fn kick(&self, q: usize) {
        self.queues[q].notify();
    }

    /// Kicks queue `q` only if the device asks for it, as a virtio driver decides after
    /// publishing entries from avail index `old` (EVENT_IDX: Linux's `vring_need_event`).
    /// Returns whether it kicked.
    pub fn kick_if_needed(&self, q: usize, old: u16) -> bool {
        // The published index before the read of avail_event (the driver's
        // virtqueue_kick_prepare): a device that stops polling writes avail_event and
        // then reads the index, so one of the two sees the other's write.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let new = self.avail_idx(q);
        let event = self.avail_event(q);
        let needed = new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old);
        if needed {
            self.kick(q);
        }
        needed
    }

    /// The used index the device has published on queue `q`.
    pub fn used_idx(&self, q: usize) -> u16 {
        self.queues[q].used_idx(&self.mem)
    }

    /// The avail index this frontend has published on queue `q`.
    pub fn avail_idx(&self, q: usize) -> u16 {
        self.queues[q].next_avail()
    }

    /// Waits (on the call eventfd) until `n` more used entries appear on queue `q`, and
    /// returns them, freeing their descriptors. used_event is set only if EVENT_IDX was
    /// acked.
    pub fn wait_used(&mut self, q: usize, n: u16) -> Vec<Used> {
        let event_idx = self.features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        self.queues[q].wait_used(&self.mem, n, event_idx)
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

/// Where the two regions of split guest memory meet.
pub const SPLIT_AT: u64 = GUEST_BASE + GUEST_SIZE / 2;

/// Guest RAM from `GUEST_BASE`: one memfd region, or two meeting at `SPLIT_AT`; in
/// huge pages if `huge` (reserved by the caller).
fn guest_ram(split: bool, huge: bool) -> GuestMemoryMmap<()> {
    let flags = if huge { libc::MFD_HUGETLB } else { 0 };
    if split {
        let half = SPLIT_AT - GUEST_BASE;
        virtqueue::guest_memory_with(&[(GUEST_BASE, half), (SPLIT_AT, half)], flags)
    } else {
        virtqueue::guest_memory_with(&[(GUEST_BASE, GUEST_SIZE)], flags)
    }
}
