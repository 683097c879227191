//! A split virtqueue's rings (virtio 1.2 §2.7), read and written by the device: the avail
//! ring's heads, the descriptor chains they name, the used ring, and whether the driver
//! asked to be notified.
//!
//! virtio-queue's `Queue` keeps what the frontend configures (sizes, ring addresses,
//! features) and the device's positions (`next_avail`, `next_used`), through
//! vhost-user-backend; this is the per-request work on the rings themselves. Each ring
//! area is looked up once per batch and then read through its host mapping, where
//! vm-memory's `Bytes` would translate and copy every 2- to 16-byte access on its own
//! (design §8.12). An area that does not lie in one memory region (guest RAM split across
//! two adjacent regions) is read access by access through guest addresses instead, with
//! the same rules.
//!
//! Everything read here is written by the guest at any time: every index is bounded
//! before use, and a chain the guest broke is reported, never followed further.

use std::sync::atomic::{fence, Ordering};

use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{Queue, QueueT};
use vm_memory::bitmap::MS;
use vm_memory::{
    Address, AtomicAccess, ByteValued, Bytes, GuestAddress, GuestMemoryBackend, VolatileMemory,
    VolatileSlice,
};

use crate::backend::virtio::request::{ChainLayout, RequestError};

const DESCRIPTOR_SIZE: usize = 16;
/// flags and idx before the avail ring's entries, and before the used ring's.
const RING_HEADER: usize = 4;
const AVAIL_ENTRY: usize = 2;
const USED_ENTRY: usize = 8;

/// One ring area: its host mapping when it lies in one region, as rings do, or its guest
/// address otherwise.
enum Area<'m, M: GuestMemoryBackend> {
    Mapped(VolatileSlice<'m, MS<'m, M>>),
    Spread {
        mem: &'m M,
        base: GuestAddress,
        len: usize,
    },
}

impl<'m, M: GuestMemoryBackend> Area<'m, M> {
    /// The area of `len` bytes at guest address `base`, or `None` when some of it is not
    /// guest memory.
    fn new(mem: &'m M, base: u64, len: usize) -> Option<Self> {
        let base = GuestAddress(base);
        match mem.get_slice(base, len) {
            Ok(slice) => Some(Area::Mapped(slice)),
            Err(_) if mem.check_range(base, len) => Some(Area::Spread { mem, base, len }),
            Err(_) => None,
        }
    }

    /// The guest address of a `T` at `offset`, when it lies inside a spread area (a mapped
    /// one checks its own bounds).
    fn spread_address<T>(base: GuestAddress, len: usize, offset: usize) -> Option<GuestAddress> {
        if offset.checked_add(std::mem::size_of::<T>())? > len {
            return None;
        }
        base.checked_add(offset as u64)
    }

    fn read<T: ByteValued>(&self, offset: usize) -> Option<T> {
        match *self {
            Area::Mapped(ref slice) => slice.get_ref::<T>(offset).ok().map(|r| r.load()),
            Area::Spread { mem, base, len } => mem
                .read_obj(Self::spread_address::<T>(base, len, offset)?)
                .ok(),
        }
    }

    fn write<T: ByteValued>(&self, offset: usize, value: T) -> Option<()> {
        match *self {
            Area::Mapped(ref slice) => slice.get_ref::<T>(offset).ok().map(|r| r.store(value)),
            Area::Spread { mem, base, len } => mem
                .write_obj(value, Self::spread_address::<T>(base, len, offset)?)
                .ok(),
        }
    }

    fn load<T: AtomicAccess>(&self, offset: usize, order: Ordering) -> Option<T> {
        match *self {
            Area::Mapped(ref slice) => slice.load(offset, order).ok(),
            Area::Spread { mem, base, len } => mem
                .load(Self::spread_address::<T>(base, len, offset)?, order)
                .ok(),
        }
    }

    fn store<T: AtomicAccess>(&self, offset: usize, value: T, order: Ordering) -> Option<()> {
        match *self {
            Area::Mapped(ref slice) => slice.store(value, offset, order).ok(),
            Area::Spread { mem, base, len } => mem
                .store(value, Self::spread_address::<T>(base, len, offset)?, order)
                .ok(),
        }
    }
}

/// A split virtqueue's three areas in one memory map, for one batch.
pub struct SplitRing<'m, M: GuestMemoryBackend> {
    mem: &'m M,
    desc: Area<'m, M>,
    avail: Area<'m, M>,
    used: Area<'m, M>,
    size: u16,
    event_idx: bool,
}

impl<'m, M: GuestMemoryBackend> SplitRing<'m, M> {
    /// The rings `queue` is configured with, in `mem`; `None` when the queue has no size
    /// or one of its areas is not in `mem` (a memory table without the rings).
    pub fn map(mem: &'m M, queue: &Queue) -> Option<Self> {
        let size = queue.size();
        if size == 0 {
            return None;
        }
        let n = usize::from(size);
        // The event fields (used_event after the avail ring, avail_event after the used
        // ring) are part of the areas whether or not EVENT_IDX is on, as virtio-queue
        // checks them.
        Some(SplitRing {
            mem,
            desc: Area::new(mem, queue.desc_table(), n * DESCRIPTOR_SIZE)?,
            avail: Area::new(mem, queue.avail_ring(), RING_HEADER + n * AVAIL_ENTRY + 2)?,
            used: Area::new(mem, queue.used_ring(), RING_HEADER + n * USED_ENTRY + 2)?,
            size,
            event_idx: queue.event_idx_enabled(),
        })
    }

    pub fn size(&self) -> u16 {
        self.size
    }

    /// The guest memory the rings and their buffers are in.
    pub fn memory(&self) -> &'m M {
        self.mem
    }

    /// How many chains the driver has published from avail position `next_avail` on (its
    /// avail index less `next_avail`); `None` when the index is unreadable or claims more
    /// than the ring holds. The entries it covers are read after this.
    pub fn published(&self, next_avail: u16) -> Option<u16> {
        let avail_idx = u16::from_le(self.avail.load::<u16>(2, Ordering::Acquire)?);
        Some(avail_idx.wrapping_sub(next_avail)).filter(|&n| n <= self.size)
    }

    /// The head of the chain at avail position `position` (a free-running index; the
    /// size is a power of two, as virtio-queue requires, so the slot survives its wrap).
    pub fn avail_head(&self, position: u16) -> Option<u16> {
        let slot = usize::from(position % self.size);
        self.avail
            .read::<u16>(RING_HEADER + slot * AVAIL_ENTRY)
            .map(u16::from_le)
    }

    /// Writes the used entry at position `position` (a free-running index): chain `head`,
    /// `len` bytes written. The driver sees it once [`Self::publish_used_up_to`] passes
    /// it.
    pub fn put_used(&self, position: u16, head: u16, len: u32) -> Result<(), UsedError> {
        if head >= self.size {
            return Err(UsedError::HeadOutOfRange(head));
        }
        let slot = usize::from(position % self.size);
        // struct virtq_used_elem { le32 id; le32 len; }, in one store.
        let elem = (u64::from(len) << 32 | u64::from(head)).to_le();
        self.used
            .write(RING_HEADER + slot * USED_ENTRY, elem)
            .ok_or(UsedError::Unwritable)
    }

    /// Makes the used entries before `next_used` visible to the driver: stores the used
    /// index, after the entries.
    pub fn publish_used_up_to(&self, next_used: u16) -> Result<(), UsedError> {
        self.used
            .store(2, next_used.to_le(), Ordering::Release)
            .ok_or(UsedError::Unwritable)
    }

    /// Whether the driver wants to hear of the used entries from `previous` (the used
    /// index at the last notification check) to `next_used`: with EVENT_IDX, when its
    /// used_event lies among them (as Linux's `vring_need_event`); without, always.
    pub fn needs_notification(&self, previous: u16, next_used: u16) -> bool {
        if !self.event_idx {
            return true;
        }
        // The used index must be visible before the driver's event is read, or both sides
        // may miss each other's update.
        fence(Ordering::SeqCst);
        let offset = RING_HEADER + usize::from(self.size) * AVAIL_ENTRY;
        let Some(used_event) = self.avail.load::<u16>(offset, Ordering::Relaxed) else {
            return true;
        };
        let used_event = u16::from_le(used_event);
        next_used.wrapping_sub(used_event).wrapping_sub(1) < next_used.wrapping_sub(previous)
    }

    /// Walks the chain starting at descriptor `head` into `layout` (cleared first), with
    /// virtio-queue's rules: at most a table's size of descriptors, so a loop ends; an
    /// indirect descriptor switches to its table (not from inside one; its length a
    /// non-zero multiple of 16 bytes); no more than 4 GiB in all. A chain that breaks a
    /// rule, names a descriptor outside its table or lies outside guest memory is a
    /// `BrokenChain`, with what was walked left in `layout`.
    pub fn walk(&self, head: u16, layout: &mut ChainLayout) -> Result<(), RequestError> {
        layout.readable.clear();
        layout.writable.clear();
        // The indirect table the walk has switched to, and its length.
        let mut indirect: Option<(Area<'m, M>, u16)> = None;
        let mut index = head;
        let mut remaining = self.size;
        let mut bytes = 0u32;
        loop {
            let (table, table_len) = match &indirect {
                Some((area, len)) => (area, *len),
                None => (&self.desc, self.size),
            };
            if remaining == 0 || index >= table_len {
                return Err(RequestError::BrokenChain);
            }
            let desc = table
                .read::<Descriptor>(usize::from(index) * DESCRIPTOR_SIZE)
                .ok_or(RequestError::BrokenChain)?;
            let flags = desc.flags();
            if flags & VRING_DESC_F_INDIRECT as u16 != 0 {
                let len = desc.len() as usize;
                if indirect.is_some() || len == 0 || len % DESCRIPTOR_SIZE != 0 {
                    return Err(RequestError::BrokenChain);
                }
                let entries =
                    u16::try_from(len / DESCRIPTOR_SIZE).map_err(|_| RequestError::BrokenChain)?;
                let area =
                    Area::new(self.mem, desc.addr().0, len).ok_or(RequestError::BrokenChain)?;
                indirect = Some((area, entries));
                index = 0;
                remaining = entries;
                continue;
            }
            bytes = bytes
                .checked_add(desc.len())
                .ok_or(RequestError::BrokenChain)?;
            layout.push(
                desc.addr().0,
                desc.len(),
                flags & VRING_DESC_F_WRITE as u16 != 0,
            )?;
            if flags & VRING_DESC_F_NEXT as u16 == 0 {
                return Ok(());
            }
            index = desc.next();
            remaining -= 1;
        }
    }
}

/// Why a used entry could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsedError {
    #[error("descriptor head {0} is outside the ring")]
    HeadOutOfRange(u16),
    #[error("the used ring is not in guest memory")]
    Unwritable,
}

#[cfg(test)]
mod tests;
