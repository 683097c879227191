//! Load generators: closed loop (a fixed number of outstanding requests per queue,
//! like fio with an iodepth) or open loop (fixed arrival rate, capped by the same
//! number), with a block size, read/write mix, sequential or random offsets and an
//! operation type that can produce flush, discard or write-zeroes storms.

use crate::cost_model::IoKind;

use super::scenario::{OpMix, Pattern, WorkloadSection};
use crate::rng::Rng;

/// One generator.
#[derive(Debug)]
pub(crate) struct Workload {
    pub spec: WorkloadSection,
    pub vol: usize,
    pub vol_size: u64,
    /// Requests generated and not completed yet.
    pub outstanding: u64,
    /// Next offset per queue (sequential pattern).
    next_offset: Vec<u64>,
    next_queue: u32,
    /// Open-loop arrivals dropped because the cap was reached.
    pub dropped: u64,
    rng: Rng,
}

impl Workload {
    pub(crate) fn new(spec: WorkloadSection, vol: usize, vol_size: u64, seed: u64) -> Self {
        let queues = spec.queues as usize;
        // Spread sequential streams over the volume.
        let stride = vol_size / queues.max(1) as u64;
        let next_offset = (0..queues).map(|q| (q as u64 * stride) & !4095).collect();
        Workload {
            spec,
            vol,
            vol_size,
            outstanding: 0,
            next_offset,
            next_queue: 0,
            dropped: 0,
            rng: Rng::new(seed),
        }
    }

    /// Maximum outstanding requests.
    pub(crate) fn cap(&self) -> u64 {
        u64::from(self.spec.queues) * u64::from(self.spec.depth)
    }

    /// Is the generator producing at `t` (ns since the start)?
    pub(crate) fn running_at(&self, t: u64) -> bool {
        t >= self.spec.start.0 && self.spec.stop.map_or(true, |s| t < s.0)
    }

    /// Interval between open-loop arrivals, ns.
    pub(crate) fn interval_ns(&self) -> Option<u64> {
        self.spec
            .rate_iops
            .map(|r| ((1e9 / r).round() as u64).max(1))
    }

    /// The next request: `(queue, kind, offset, len)`.
    pub(crate) fn next(&mut self, queue: Option<u32>) -> (u32, IoKind, u64, u64) {
        let q = queue.unwrap_or_else(|| {
            let q = self.next_queue;
            self.next_queue = (self.next_queue + 1) % self.spec.queues.max(1);
            q
        });
        let bs = self.spec.bs.0;
        let kind = match self.spec.op {
            OpMix::Flush => return (q, IoKind::Flush, 0, 0),
            OpMix::Discard => IoKind::Discard,
            OpMix::WriteZeroes => IoKind::WriteZeroes,
            OpMix::Rw => {
                if self.rng.unit() * 100.0 < self.spec.read_pct {
                    IoKind::Read
                } else {
                    IoKind::Write
                }
            }
        };
        let blocks = (self.vol_size / bs.max(1)).max(1);
        let offset = match self.spec.pattern {
            Pattern::Random => self.rng.below(blocks) * bs,
            Pattern::Sequential => {
                let n = self.next_offset.len().max(1);
                let slot = &mut self.next_offset[q as usize % n];
                let off = *slot;
                *slot = if off + 2 * bs > self.vol_size {
                    0
                } else {
                    off + bs
                };
                off
            }
        };
        (q, kind, offset, bs)
    }
}
