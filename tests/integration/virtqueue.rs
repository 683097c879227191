//! The driver (guest) side of split virtqueues in memfd-backed guest RAM, shared by the
//! raw QEMU-like frontend (`raw_frontend`) and the cloud-hypervisor replay
//! (`cloud_hypervisor`). The two differ only in the vhost-user messages they send; how a
//! driver lays out rings, places chains, publishes them and consumes used entries is the
//! same, so it lives here once.
//!
//! Descriptors are written with `virtio_queue::mock::DescriptorTable`. Completions are
//! awaited on the call eventfd with `poll(2)` and a timeout, never by sleeping.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vhost::{VhostUserMemoryRegionInfo, VringConfigData};
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::DescriptorTable;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

/// How long a request may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Guest RAM
// ---------------------------------------------------------------------------------------

/// An anonymous memory file of `len` bytes (sparse), to share with the daemon.
pub fn memfd_file(len: u64) -> std::fs::File {
    memfd_file_with(len, 0)
}

/// [`memfd_file`] created with `flags` (`MFD_HUGETLB`: on hugetlbfs).
fn memfd_file_with(len: u64, flags: libc::c_uint) -> std::fs::File {
    // SAFETY: memfd_create with a NUL-terminated name; the fd is checked, then owned.
    let fd = unsafe { libc::memfd_create(c"guest-ram".as_ptr(), libc::MFD_CLOEXEC | flags) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(len).unwrap();
    file
}

/// Guest RAM of the given `(guest-physical address, size)` ranges, in address order, each
/// its own memfd at file offset 0 (as VMMs share RAM with vhost-user backends).
pub fn guest_memory(ranges: &[(u64, u64)]) -> GuestMemoryMmap<()> {
    guest_memory_with(ranges, 0)
}

/// [`guest_memory`] in memfds created with `flags`.
pub fn guest_memory_with(ranges: &[(u64, u64)], flags: libc::c_uint) -> GuestMemoryMmap<()> {
    let ranges: Vec<(GuestAddress, usize, Option<FileOffset>)> = ranges
        .iter()
        .map(|&(gpa, len)| {
            let file = FileOffset::new(memfd_file_with(len, flags), 0);
            (GuestAddress(gpa), len as usize, Some(file))
        })
        .collect();
    GuestMemoryMmap::<()>::from_ranges_with_files(&ranges).unwrap()
}

/// The vhost-user memory table entries for every range of `mem`, in address order.
pub fn region_infos(mem: &GuestMemoryMmap<()>) -> Vec<VhostUserMemoryRegionInfo> {
    mem.iter()
        .map(|region| VhostUserMemoryRegionInfo::from_guest_region(region).unwrap())
        .collect()
}

/// Writes guest RAM as the driver does. Panics outside RAM: that is a test's mistake, not
/// the device's.
pub fn write(mem: &GuestMemoryMmap<()>, addr: u64, bytes: &[u8]) {
    mem.write_slice(bytes, GuestAddress(addr)).unwrap();
}

/// Reads guest RAM as the driver does (what the device wrote). Panics outside RAM.
pub fn read(mem: &GuestMemoryMmap<()>, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    mem.read_slice(&mut buf, GuestAddress(addr)).unwrap();
    buf
}

/// Bump allocation of request buffers in one stretch of guest RAM. Nothing is freed: a
/// frontend lives for one test.
pub struct Arena {
    next: u64,
    end: u64,
}

impl Arena {
    /// Buffers from `start` up to `end` (exclusive).
    pub fn new(start: u64, end: u64) -> Self {
        Arena { next: start, end }
    }

    /// Reserves `len` zeroed bytes (4 KiB aligned from 4 KiB up, else 16).
    pub fn alloc(&mut self, mem: &GuestMemoryMmap<()>, len: usize) -> u64 {
        let align = if len >= 4096 { 4096 } else { 16 };
        let addr = self.next.next_multiple_of(align);
        let end = addr + len as u64;
        assert!(
            end <= self.end,
            "guest RAM exhausted: {len} bytes at {addr:#x} pass {:#x}",
            self.end
        );
        self.next = end;
        write(mem, addr, &vec![0u8; len]);
        addr
    }

    /// Allocates guest RAM holding `bytes`.
    pub fn put(&mut self, mem: &GuestMemoryMmap<()>, bytes: &[u8]) -> u64 {
        let addr = self.alloc(mem, bytes.len());
        write(mem, addr, bytes);
        addr
    }
}

// ---------------------------------------------------------------------------------------
// Descriptor chains and used entries
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// The driver's side of one split virtqueue
// ---------------------------------------------------------------------------------------

/// The driver's side of one split virtqueue: where its rings are, its eventfds, and
/// which descriptors are in flight. Guest RAM is passed in to each call, since the
/// frontend owns it and shares it between its queues.
pub struct Vq {
    /// The queue's index, for messages.
    index: usize,
    pub size: u16,
    desc: u64,
    avail: u64,
    used: u64,
    /// The queue's kick (ioeventfd) and call (irqfd). They are kept across `place`, as
    /// VMMs keep them across resets and reconnects.
    pub kick: EventFd,
    pub call: EventFd,
    free: Vec<u16>,
    /// Descriptor indices of each chain on the ring, by head.
    chains: HashMap<u16, Vec<u16>>,
    /// The avail index the next chain is published at.
    next_avail: u16,
    /// The used index up to which entries were consumed.
    used_seen: u16,
}

impl Vq {
    /// Queue `index` of `size` entries with fresh rings at `at` (see `place`).
    pub fn new(mem: &GuestMemoryMmap<()>, index: usize, size: u16, at: u64) -> Self {
        let mut vq = Vq {
            index,
            size,
            desc: 0,
            avail: 0,
            used: 0,
            kick: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            call: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            free: Vec::new(),
            chains: HashMap::new(),
            next_avail: 0,
            used_seen: 0,
        };
        vq.place(mem, at);
        vq
    }

    /// Guest-physical address of the used ring.
    pub fn used_ring(&self) -> u64 {
        self.used
    }

    /// The driver (re)initialises the queue with fresh, zeroed rings at `at`: avail and
    /// used index 0, all descriptors free. The eventfds are kept.
    pub fn place(&mut self, mem: &GuestMemoryMmap<()>, at: u64) {
        // The split virtqueue layout: descriptor table, avail ring (flags, idx, ring,
        // used_event), used ring (flags, idx, ring, avail_event), 16/2/4-byte aligned.
        // (MockSplitQueue::create's layout cannot be used: in virtio-queue 0.18 it puts
        // the used ring inside the avail ring, at avail + 4 + size bytes.)
        let size = u64::from(self.size);
        self.desc = at;
        self.avail = at + 16 * size;
        self.used = (self.avail + 6 + 2 * size).next_multiple_of(4);
        let len = (self.used + 6 + 8 * size - at) as usize;
        write(mem, at, &vec![0u8; len]);
        self.free = (0..self.size).rev().collect();
        self.chains.clear();
        self.next_avail = 0;
        self.used_seen = 0;
    }

    /// SET_VRING_ADDR's payload: host (frontend) addresses of the rings, flags 0, no log.
    pub fn vring_config(&self, mem: &GuestMemoryMmap<()>) -> VringConfigData {
        let host = |gpa: u64| mem.get_host_address(GuestAddress(gpa)).unwrap() as u64;
        VringConfigData {
            queue_max_size: self.size,
            queue_size: self.size,
            flags: 0,
            desc_table_addr: host(self.desc),
            used_ring_addr: host(self.used),
            avail_ring_addr: host(self.avail),
            log_addr: None,
        }
    }

    /// Places `chain` in the descriptor table and publishes it (no kick). Returns the
    /// head index.
    pub fn submit(&mut self, mem: &GuestMemoryMmap<()>, chain: &[Desc]) -> u16 {
        assert!(!chain.is_empty());
        assert!(
            self.free.len() >= chain.len(),
            "queue {} has no room for {} descriptors",
            self.index,
            chain.len()
        );
        let mut ids: Vec<u16> = Vec::with_capacity(chain.len());
        for _ in 0..chain.len() {
            ids.push(self.free.pop().unwrap());
        }
        let table = DescriptorTable::new(mem, GuestAddress(self.desc), self.size);
        for (i, d) in chain.iter().enumerate() {
            let next = ids.get(i + 1).copied();
            table.store(ids[i], d.raw(0, next)).unwrap();
        }
        let head = ids[0];
        self.chains.insert(head, ids);
        self.publish(mem, head);
        head
    }

    /// Places `chain` in an indirect descriptor table at `table_addr` (room for
    /// `chain.len()` descriptors of 16 bytes), and one descriptor with
    /// VRING_DESC_F_INDIRECT pointing at it in the queue; publishes it (no kick).
    /// Returns the head index.
    pub fn submit_indirect(
        &mut self,
        mem: &GuestMemoryMmap<()>,
        table_addr: u64,
        chain: &[Desc],
    ) -> u16 {
        let table = DescriptorTable::new(mem, GuestAddress(table_addr), chain.len() as u16);
        for (i, d) in chain.iter().enumerate() {
            let next = (i + 1 < chain.len()).then_some(i as u16 + 1);
            table.store(i as u16, d.raw(0, next)).unwrap();
        }
        let head = self.free.pop().expect("a free descriptor");
        let indirect = Desc::r(table_addr, chain.len() * 16).raw(VRING_DESC_F_INDIRECT, None);
        DescriptorTable::new(mem, GuestAddress(self.desc), self.size)
            .store(head, indirect)
            .unwrap();
        self.chains.insert(head, vec![head]);
        self.publish(mem, head);
        head
    }

    /// Writes `head` to the next avail ring slot, then (after a fence, as drivers do) the
    /// avail index. Tests of hostile guests call it directly to publish a head again
    /// while it is still in flight.
    pub fn publish(&mut self, mem: &GuestMemoryMmap<()>, head: u16) {
        let slot = self.avail + 4 + 2 * u64::from(self.next_avail % self.size);
        mem.write_obj(head.to_le(), GuestAddress(slot)).unwrap();
        self.next_avail = self.next_avail.wrapping_add(1);
        fence(Ordering::SeqCst);
        mem.store(
            self.next_avail.to_le(),
            GuestAddress(self.avail + 2),
            Ordering::Release,
        )
        .unwrap();
    }

    /// The avail index this driver has published.
    pub fn next_avail(&self) -> u16 {
        self.next_avail
    }

    /// The used index up to which this driver has consumed entries.
    pub fn used_seen(&self) -> u16 {
        self.used_seen
    }

    /// Writes the avail index in guest memory, whatever was published (a hostile guest's
    /// write, or putting `next_avail` back).
    pub fn set_avail_idx(&self, mem: &GuestMemoryMmap<()>, idx: u16) {
        mem.store(idx.to_le(), GuestAddress(self.avail + 2), Ordering::Release)
            .unwrap();
    }

    /// The avail index in guest memory (what a VMM reads for SET_VRING_BASE).
    pub fn avail_idx_in_memory(&self, mem: &GuestMemoryMmap<()>) -> u16 {
        load_le16(mem, self.avail + 2)
    }

    /// The used index the device has published.
    pub fn used_idx(&self, mem: &GuestMemoryMmap<()>) -> u16 {
        load_le16(mem, self.used + 2)
    }

    /// The device's avail_event (EVENT_IDX): the avail index it wants a kick at.
    pub fn avail_event(&self, mem: &GuestMemoryMmap<()>) -> u16 {
        load_le16(mem, self.used + 4 + 8 * u64::from(self.size))
    }

    /// EVENT_IDX's used_event: asks for a notification once the used index passes `idx`.
    /// Fenced, so a re-read of the used index after it sees what the device saw.
    pub fn set_used_event(&self, mem: &GuestMemoryMmap<()>, idx: u16) {
        let at = self.avail + 4 + 2 * u64::from(self.size);
        mem.write_obj(idx.to_le(), GuestAddress(at)).unwrap();
        fence(Ordering::SeqCst);
    }

    /// The driver's notification: a write to the kick eventfd.
    pub fn notify(&self) {
        self.kick.write(1).unwrap();
    }

    /// Waits up to `timeout` for the call eventfd and clears it; whether it was signalled.
    pub fn wait_call(&self, timeout: Duration) -> bool {
        let signalled = poll_readable(&self.call, timeout);
        // The callers re-check the used index after, so no notification is lost.
        let _ = self.call.read();
        signalled
    }

    /// Waits (on the call eventfd, up to `TIMEOUT`) until `n` more used entries appear,
    /// and returns them, freeing their descriptors. With `event_idx`, used_event is set
    /// first so the device notifies.
    #[track_caller]
    pub fn wait_used(&mut self, mem: &GuestMemoryMmap<()>, n: u16, event_idx: bool) -> Vec<Used> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let seen = self.used_idx(mem);
            if seen.wrapping_sub(self.used_seen) >= n {
                break;
            }
            if event_idx {
                // Notify once the entry after `seen` is added. Re-check after publishing
                // it, in case the device added that entry meanwhile and saw the old value.
                self.set_used_event(mem, seen);
                if self.used_idx(mem) != seen {
                    continue;
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "queue {}: used idx {seen} after {TIMEOUT:?}, want {}",
                self.index,
                self.used_seen.wrapping_add(n)
            );
            self.wait_call(left);
        }
        let mut out = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            out.push(self.pop_used(mem));
        }
        out
    }

    /// Consumes every used entry published so far, without waiting.
    pub fn take_used(&mut self, mem: &GuestMemoryMmap<()>) -> Vec<Used> {
        let mut out = Vec::new();
        while self.used_idx(mem) != self.used_seen {
            out.push(self.pop_used(mem));
        }
        out
    }

    /// Consumes the next used entry and frees its chain's descriptors.
    fn pop_used(&mut self, mem: &GuestMemoryMmap<()>) -> Used {
        let entry = self.used_seen;
        let at = self.used + 4 + 8 * u64::from(entry % self.size);
        let id: u32 = mem.read_obj(GuestAddress(at)).unwrap();
        let len: u32 = mem.read_obj(GuestAddress(at + 4)).unwrap();
        self.used_seen = entry.wrapping_add(1);
        let head = u16::try_from(u32::from_le(id)).expect("used id is a descriptor index");
        let Some(ids) = self.chains.remove(&head) else {
            panic!(
                "queue {}: used entry {entry} is head {head}, which is not on the ring",
                self.index
            );
        };
        self.free.extend(ids);
        Used {
            head,
            len: u32::from_le(len),
        }
    }
}

/// A ring index the device may be writing: one atomic little-endian load.
fn load_le16(mem: &GuestMemoryMmap<()>, at: u64) -> u16 {
    let v: u16 = mem.load(GuestAddress(at), Ordering::Acquire).unwrap();
    u16::from_le(v)
}

/// Waits up to `timeout` for `fd` to become readable; false on timeout (or EINTR).
fn poll_readable(fd: &EventFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up, so a wait never ends just before the deadline.
    let ms = timeout.as_millis().min(i32::MAX as u128 - 1) as i32 + 1;
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "poll: {e}");
        return false;
    }
    r > 0
}
