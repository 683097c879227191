//! The records of the requests a worker has on the device, indexed by the io_uring user
//! data of their operation.
//!
//! A record is about 200 bytes. Records are boxed and reused, so a request's record
//! moves by pointer from its start to its completion, where moving it by value took four
//! memcpy calls per request (design §8.12), and a reused record keeps the capacity of
//! its iovec and copy-back arrays.

use super::inflight::InFlight;

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
