//! The records of the requests a worker has on the device, indexed by the io_uring user
//! data of their operation.
//!
//! A record is about 200 bytes. Records are boxed and reused, so a request's record
//! moves by pointer from its start to its completion, where moving it by value took four
//! memcpy calls per request (design §8.12), and a reused record keeps the capacity of
//! its iovec and copy-back arrays.

use crate::backend::admission::{IoKind, IoRequest, Timing};
use crate::backend::guest_memory::Mem;
use crate::backend::io::bounce::BounceBuffer;
use crate::backend::virtio::request::{RequestKind, Segment};
use crate::emulated::faults::Fault;
use std::sync::Arc;

/// Linux caps one readv/writev at this many iovecs; larger requests are bounced.
pub(super) const IOV_MAX: usize = 1024;

/// A request the device is working on. Owns everything the kernel points into. Reused
/// for the worker's next requests ([`Records`]).
pub(super) struct InFlight<T> {
    pub(super) queue: u16,
    pub(super) head: u16,
    pub(super) kind: RequestKind,
    pub(super) io: IoRequest,
    pub(super) status_addr: u64,
    /// Bytes written into guest buffers on success (reads), for the used length.
    pub(super) guest_written: u32,
    pub(super) iovecs: Vec<libc::iovec>,
    /// O_DIRECT bounce buffer and, for reads, the guest segments to copy it back into.
    /// On a write-zeroes request, the zeroed buffer of its retry as a write
    /// (`inflight::zeroes_to_write`).
    pub(super) bounce: Option<BounceBuffer>,
    pub(super) copy_back: Vec<Segment>,
    /// Keeps the guest memory mapped until the kernel is done with it, even if the
    /// frontend replaces the memory table meanwhile. `None` in a cleared record.
    pub(super) mem: Option<Arc<Mem>>,
    pub(super) ticket: Option<T>,
    pub(super) timing: Timing,
    /// An injected device error (`[[device.emulated.faults]]`) replacing the result.
    pub(super) fault: Option<Fault>,
}

// SAFETY: the raw iovec pointers point into `mem` (kept alive by the Arc) or into `bounce`,
// both owned by this record; nothing else aliases them. A cleared record has none.
unsafe impl<T: Send> Send for InFlight<T> {}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight {
            queue: 0,
            head: 0,
            kind: RequestKind::Flush,
            io: IoRequest {
                kind: IoKind::Flush,
                offset: 0,
                len: 0,
            },
            status_addr: 0,
            guest_written: 0,
            iovecs: Vec::new(),
            bounce: None,
            copy_back: Vec::new(),
            mem: None,
            ticket: None,
            timing: Timing::default(),
            fault: None,
        }
    }
}

impl<T> InFlight<T> {
    /// Lets go of the finished request's memory and buffers; the arrays keep their
    /// capacity for the next request, up to what a request mapped without bouncing uses.
    pub(super) fn clear(&mut self) {
        if self.iovecs.capacity() > IOV_MAX {
            self.iovecs = Vec::new();
        }
        self.iovecs.clear();
        self.copy_back.clear();
        self.bounce = None;
        self.mem = None;
        self.ticket = None;
        self.fault = None;
    }
}

pub(super) struct Records<T> {
    /// The records on the device, by user data.
    slots: Vec<Option<Box<InFlight<T>>>>,
    free_slots: Vec<usize>,
    /// Records of completed requests, cleared, for the next ones.
    spare: Vec<Box<InFlight<T>>>,
    count: usize,
}

impl<T> Default for Records<T> {
    fn default() -> Self {
        Records {
            slots: Vec::new(),
            free_slots: Vec::new(),
            spare: Vec::new(),
            count: 0,
        }
    }
}

impl<T> Records<T> {
    /// A cleared record for a request about to start.
    pub(super) fn spare(&mut self) -> Box<InFlight<T>> {
        self.spare.pop().unwrap_or_default()
    }

    /// Puts `record` on the device; returns its user data.
    pub(super) fn insert(&mut self, record: Box<InFlight<T>>) -> usize {
        self.count += 1;
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(record);
                i
            }
            None => {
                self.slots.push(Some(record));
                self.slots.len() - 1
            }
        }
    }

    /// The record of the operation with this user data, off the device.
    pub(super) fn take(&mut self, user_data: u64) -> Option<Box<InFlight<T>>> {
        let index = usize::try_from(user_data).ok()?;
        let record = self.slots.get_mut(index)?.take()?;
        self.free_slots.push(index);
        self.count -= 1;
        Some(record)
    }

    /// A finished request's record, cleared for reuse: it keeps no guest memory mapped
    /// and no buffer.
    pub(super) fn recycle(&mut self, mut record: Box<InFlight<T>>) {
        record.clear();
        self.spare.push(record);
    }

    /// How many requests are on the device.
    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &InFlight<T>> {
        self.slots.iter().flatten().map(|r| &**r)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut InFlight<T>> {
        self.slots.iter_mut().flatten().map(|r| &mut **r)
    }

    /// Forgets every record on the device without freeing it: for when the kernel's use
    /// of their buffers cannot be waited for.
    pub(super) fn leak(&mut self) {
        self.count = 0;
        self.free_slots.clear();
        std::mem::forget(std::mem::take(&mut self.slots));
    }
}
