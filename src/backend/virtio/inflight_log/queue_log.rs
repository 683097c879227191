//! One queue's inflight log in the shared region (QEMU `docs/interop/vhost-user.rst`,
//! "Inflight I/O tracking", split rings), and the recovery of a queue from it.
//!
//! ```text
//! offset  field                    offset        per descriptor i (16 bytes at 16 + 16·i)
//!   0     features        u64        +0          inflight  u8   1: popped, not yet published
//!   8     version         u16        +6          next      u16  link in the last published batch
//!  10     desc_num        u16        +8          counter   u64  pop order
//!  12     last_batch_head u16
//!  14     used_idx        u16      used->idx as of the last finished publication
//! ```
//!
//! The log is written in an order that leaves it recoverable if the process dies between
//! any two stores: a head is marked after its counter and before its request is
//! submitted (in pop order); a batch of completions is linked into the batch list before
//! the used index is published, cleared after, and `used_idx` follows last. Every store
//! goes through an atomic, so the compiler keeps that order; a killed process's stores
//! land in the shared page all the same. Everything read here was written by an earlier
//! process that may have died anywhere, or by a frontend: every index is checked.

use std::sync::atomic::{AtomicU16, AtomicU64, AtomicU8, Ordering};

/// Bytes before the descriptor entries.
pub const HEADER: usize = 16;
/// Bytes per descriptor entry.
pub const ENTRY: usize = 16;
/// A region's layout version.
pub const VERSION: u16 = 1;

/// Bytes one queue's log takes in the region: the header and an entry per descriptor,
/// rounded up to 64 bytes as libvhost-user lays it out.
pub fn queue_stride(queue_size: u16) -> usize {
    (HEADER + ENTRY * usize::from(queue_size)).next_multiple_of(64)
}

/// A queue's log: `desc_num` entries at `base`, which stays mapped while this lives.
#[derive(Debug)]
pub struct QueueLog {
    base: *mut u8,
    desc_num: u16,
    /// The counter of the next pop.
    counter: u64,
    /// What keeps `base` mapped.
    _mapping: std::sync::Arc<dyn std::fmt::Debug + Send + Sync>,
}

// SAFETY: the log is plain shared memory read and written through atomics only; one
// worker writes a queue's log at a time (the caller's rule).
unsafe impl Send for QueueLog {}

/// What recovery found: the requests to resubmit, in their original order, and where the
/// ring's positions resume.
#[derive(Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Heads popped and not published, oldest first.
    pub resubmit: Vec<u16>,
    /// The avail position to pop from next: the used index plus the resubmitted requests.
    pub next_avail: u16,
}

impl QueueLog {
    /// # Safety
    /// `base` points at `queue_stride(desc_num)` bytes of mapped memory, 8-byte aligned,
    /// that stay mapped while `mapping` lives.
    pub unsafe fn new(
        base: *mut u8,
        desc_num: u16,
        mapping: std::sync::Arc<dyn std::fmt::Debug + Send + Sync>,
    ) -> Self {
        QueueLog {
            base,
            desc_num,
            counter: 0,
            _mapping: mapping,
        }
    }

    fn u8_at(&self, offset: usize) -> &AtomicU8 {
        // SAFETY: offsets come from `entry`/the header and lie within the stride.
        unsafe { &*(self.base.add(offset) as *const AtomicU8) }
    }

    fn u16_at(&self, offset: usize) -> &AtomicU16 {
        // SAFETY: as above; every u16 field sits at an even offset of an aligned base.
        unsafe { &*(self.base.add(offset) as *const AtomicU16) }
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: as above, at a multiple of 8.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn entry(head: u16) -> usize {
        HEADER + ENTRY * usize::from(head)
    }

    fn version(&self) -> &AtomicU16 {
        self.u16_at(8)
    }
    fn last_batch_head(&self) -> &AtomicU16 {
        self.u16_at(12)
    }
    fn used_idx(&self) -> &AtomicU16 {
        self.u16_at(14)
    }
    fn inflight(&self, head: u16) -> &AtomicU8 {
        self.u8_at(Self::entry(head))
    }
    fn next(&self, head: u16) -> &AtomicU16 {
        self.u16_at(Self::entry(head) + 6)
    }
    fn counter_of(&self, head: u16) -> &AtomicU64 {
        self.u64_at(Self::entry(head) + 8)
    }

    /// Marks `head` popped (P2, P3): call in pop order, before its request is submitted.
    /// A head beyond the log is not tracked (the ring checks heads before this).
    pub fn mark_popped(&mut self, head: u16) {
        if head >= self.desc_num {
            return;
        }
        self.counter_of(head).store(self.counter, Ordering::Relaxed);
        self.counter += 1;
        self.inflight(head).store(1, Ordering::Release);
    }

    /// Links a batch about to be published into the batch list (C3): call after its used
    /// entries are written and before the used index is stored.
    pub fn link_batch(&self, heads: impl Iterator<Item = u16>) {
        for head in heads.filter(|&h| h < self.desc_num) {
            let last = self.last_batch_head().load(Ordering::Relaxed);
            self.next(head).store(last, Ordering::Relaxed);
            self.last_batch_head().store(head, Ordering::Release);
        }
    }

    /// Clears a published batch (C5, C6): call after the used index was stored as
    /// `used_idx`.
    pub fn clear_batch(&self, heads: impl Iterator<Item = u16>, used_idx: u16) {
        self.clear_heads(heads);
        self.used_idx().store(used_idx, Ordering::Release);
    }

    /// Clears heads of a published batch (C5) without recording the used index yet.
    pub fn clear_heads(&self, heads: impl Iterator<Item = u16>) {
        for head in heads.filter(|&h| h < self.desc_num) {
            self.inflight(head).store(0, Ordering::Release);
        }
    }

    /// Forgets the log: the queue was stopped with nothing in flight, and may restart on
    /// new rings (a guest reset). The next start initialises it afresh.
    pub fn forget(&self) {
        self.version().store(0, Ordering::Release);
    }

    /// Recovers the queue when it starts: `used_now` is the used ring's index as the
    /// guest sees it, `ring_size` the queue's size, `avail_now` the avail ring's index.
    /// A fresh log (version 0) is initialised and resumes nothing. A log that is
    /// inconsistent is refused, never guessed at.
    pub fn recover(
        &mut self,
        used_now: u16,
        ring_size: u16,
        avail_now: u16,
    ) -> Result<Recovered, String> {
        if ring_size > self.desc_num {
            return Err(format!(
                "the queue has {ring_size} descriptors, the inflight log {}",
                self.desc_num
            ));
        }
        match self.version().load(Ordering::Acquire) {
            0 => {
                self.u16_at(10).store(self.desc_num, Ordering::Relaxed);
                self.last_batch_head().store(0, Ordering::Relaxed);
                self.used_idx().store(used_now, Ordering::Relaxed);
                for head in 0..self.desc_num {
                    self.inflight(head).store(0, Ordering::Relaxed);
                }
                self.version().store(VERSION, Ordering::Release);
                self.counter = 0;
                return Ok(Recovered {
                    resubmit: Vec::new(),
                    next_avail: used_now,
                });
            }
            VERSION => {}
            v => return Err(format!("inflight log version {v} (expected {VERSION})")),
        }
        self.fix_last_batch(used_now, ring_size)?;
        let mut popped: Vec<(u64, u16)> = Vec::new();
        for head in 0..self.desc_num {
            if self.inflight(head).load(Ordering::Acquire) == 0 {
                continue;
            }
            if head >= ring_size {
                return Err(format!(
                    "descriptor {head} in flight beyond the ring's {ring_size}"
                ));
            }
            popped.push((self.counter_of(head).load(Ordering::Relaxed), head));
        }
        popped.sort_unstable();
        let next_avail = used_now.wrapping_add(popped.len() as u16);
        if avail_now.wrapping_sub(next_avail) > ring_size {
            return Err(format!(
                "{} requests in flight, but the guest published only {} past the used index",
                popped.len(),
                avail_now.wrapping_sub(used_now)
            ));
        }
        self.counter = popped.last().map_or(0, |&(c, _)| c + 1);
        Ok(Recovered {
            resubmit: popped.into_iter().map(|(_, h)| h).collect(),
            next_avail,
        })
    }

    /// A batch published (the used index stored) but not cleared: clears it by walking the
    /// batch list, then records the used index (R4). Idempotent.
    fn fix_last_batch(&self, used_now: u16, ring_size: u16) -> Result<(), String> {
        let n = used_now.wrapping_sub(self.used_idx().load(Ordering::Acquire));
        if n == 0 {
            return Ok(());
        }
        if n > ring_size {
            return Err(format!(
                "the used index moved by {n}, more than the ring's {ring_size}"
            ));
        }
        let mut head = self.last_batch_head().load(Ordering::Acquire);
        for _ in 0..n {
            if head >= ring_size {
                return Err(format!(
                    "batch list names descriptor {head} beyond the ring"
                ));
            }
            self.inflight(head).store(0, Ordering::Release);
            head = self.next(head).load(Ordering::Relaxed);
        }
        self.used_idx().store(used_now, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
