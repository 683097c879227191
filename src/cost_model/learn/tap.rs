//! What the data path tells the learner: per completion, what the request was and
//! whether it queued in the device, summed in atomics the learner drains once a period.
//!
//! A request *queued* when its device latency exceeds the floor of its class (same
//! direction, access kind and size within a factor of two) by more than the device's
//! floor (the lowest floor of any class): it waited for at least one whole unloaded
//! request. A work-conserving device only makes requests wait while it is busy, so a
//! window whose completions nearly all queued is one in which the device never idled.
//!
//! Floors are minimums over two generations: the learner starts a new generation every
//! [`super::FLOOR_GENERATION_NS`], so a device that became slower raises them within two.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use crate::cost_model::IoKind;

/// Size classes: 4 KiB, 8 KiB, ..., 1 MiB and larger.
const SIZE_CLASSES: usize = 9;
/// Direction × access kind × size.
const CLASSES: usize = 4 * SIZE_CLASSES;
/// The floor slot after the classes': the device's, the lowest of any class.
const DEVICE: usize = CLASSES;
/// The learner's features: `[read pages, sequential reads, random reads, write pages,
/// sequential writes, random writes]`.
pub const FEATURES: usize = 6;

/// What completed since the last drain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TapCounts {
    /// Pages and requests by feature (reads and writes only).
    pub features: [u64; FEATURES],
    /// Reads and writes completed.
    pub done: u64,
    /// Of them, those that queued in the device.
    pub queued: u64,
    /// Modelled device time of the other requests (flush, discard, write-zeroes), ns.
    pub other_ns: u64,
}

/// The shared counters and latency floors.
#[derive(Debug)]
pub struct LearnTap {
    features: [AtomicU64; FEATURES],
    done: AtomicU64,
    queued: AtomicU64,
    other_ns: AtomicU64,
    /// Latency floors, ns, per generation and class, then the device's (`u64::MAX`:
    /// none yet).
    floors: [[AtomicU64; CLASSES + 1]; 2],
    generation: AtomicUsize,
}

impl Default for LearnTap {
    fn default() -> Self {
        LearnTap {
            features: Default::default(),
            done: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            other_ns: AtomicU64::new(0),
            floors: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(u64::MAX))),
            generation: AtomicUsize::new(0),
        }
    }
}

/// One batch's sums, added to the tap once.
#[derive(Debug, Default)]
pub struct TapBatch {
    counts: TapCounts,
}

impl TapBatch {
    /// A read or write of `len` bytes, sequential or not, `device_ns` in the device.
    pub fn data(&mut self, tap: &LearnTap, kind: IoKind, seq: bool, len: u64, device_ns: u64) {
        let write = kind == IoKind::Write;
        let pages = (len >> super::super::linear::PAGE_SHIFT).max(1);
        let base = if write { 3 } else { 0 };
        self.counts.features[base] += pages;
        self.counts.features[base + if seq { 1 } else { 2 }] += 1;
        self.counts.done += 1;
        if tap.queued(class(write, seq, pages), device_ns) {
            self.counts.queued += 1;
        }
    }

    /// A flush, discard or write-zeroes the model prices at `cost_ns`.
    pub fn other(&mut self, cost_ns: u64) {
        self.counts.other_ns += cost_ns;
    }
}

fn class(write: bool, seq: bool, pages: u64) -> usize {
    let size = (pages.ilog2() as usize).min(SIZE_CLASSES - 1);
    (usize::from(write) * 2 + usize::from(seq)) * SIZE_CLASSES + size
}

impl LearnTap {
    /// Adds a batch's sums.
    pub fn add(&self, batch: &TapBatch) {
        let c = &batch.counts;
        if c.done == 0 && c.other_ns == 0 {
            return;
        }
        for (a, v) in self.features.iter().zip(c.features) {
            if v != 0 {
                a.fetch_add(v, Relaxed);
            }
        }
        self.done.fetch_add(c.done, Relaxed);
        self.queued.fetch_add(c.queued, Relaxed);
        if c.other_ns != 0 {
            self.other_ns.fetch_add(c.other_ns, Relaxed);
        }
    }

    /// Takes what completed since the last drain.
    pub fn drain(&self) -> TapCounts {
        TapCounts {
            features: std::array::from_fn(|k| self.features[k].swap(0, Relaxed)),
            done: self.done.swap(0, Relaxed),
            queued: self.queued.swap(0, Relaxed),
            other_ns: self.other_ns.swap(0, Relaxed),
        }
    }

    /// Starts a new generation of floors, forgetting the older one.
    pub fn new_floor_generation(&self) {
        let next = (self.generation.load(Relaxed) + 1) % 2;
        for f in &self.floors[next] {
            f.store(u64::MAX, Relaxed);
        }
        self.generation.store(next, Relaxed);
    }

    fn floor(&self, class: usize) -> u64 {
        self.floors[0][class]
            .load(Relaxed)
            .min(self.floors[1][class].load(Relaxed))
    }

    /// Records `device_ns` in the floors and says whether the request queued.
    fn queued(&self, class: usize, device_ns: u64) -> bool {
        let floor = self.floor(class);
        if device_ns < floor {
            let current = &self.floors[self.generation.load(Relaxed)];
            current[class].fetch_min(device_ns, Relaxed);
            current[DEVICE].fetch_min(device_ns, Relaxed);
            return false;
        }
        device_ns - floor > self.floor(DEVICE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_queued_when_it_waited_longer_than_the_shortest_unloaded_one() {
        let tap = LearnTap::default();
        let mut b = TapBatch::default();
        // Unloaded: a 4 KiB read takes 100 µs, a 1 MiB write 2 ms.
        b.data(&tap, IoKind::Read, false, 4096, 100_000);
        b.data(&tap, IoKind::Write, true, 1 << 20, 2_000_000);
        // A write that waited 50 µs did not queue; one that waited 150 µs did.
        b.data(&tap, IoKind::Write, true, 1 << 20, 2_050_000);
        b.data(&tap, IoKind::Write, true, 1 << 20, 2_150_000);
        b.other(7);
        tap.add(&b);
        let c = tap.drain();
        assert_eq!(c.features, [1, 0, 1, 3 * 256, 3, 0]);
        assert_eq!((c.done, c.queued, c.other_ns), (4, 1, 7));
        assert_eq!(tap.drain(), TapCounts::default());
    }

    #[test]
    fn floors_forget_after_two_generations() {
        let tap = LearnTap::default();
        let mut b = TapBatch::default();
        b.data(&tap, IoKind::Read, false, 4096, 100_000);
        tap.new_floor_generation();
        // Still remembered one generation on: 400 µs queued.
        assert!(tap.queued(class(false, false, 1), 400_000));
        tap.new_floor_generation();
        // Forgotten: the device became slower and 400 µs is its new floor.
        assert!(!tap.queued(class(false, false, 1), 400_000));
        assert!(!tap.queued(class(false, false, 1), 450_000));
    }
}
