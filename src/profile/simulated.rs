//! Profiling target backed by the simulator's disk model, in virtual time: a device whose
//! service times follow a known linear model exactly, so a profile can be checked against
//! the truth.

use super::plan::Target;
use super::plan::{Job, JobResult};
use crate::cost_model::{CostInput, IoKind, LinearModel};
use crate::emulated::EmulatedDisk;
use crate::rng::Rng;
use hdrhistogram::Histogram;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub struct SimTarget {
    /// The disk as it is when idle; each job starts from a copy.
    idle: EmulatedDisk,
    size: u64,
    rng: Rng,
}

impl SimTarget {
    /// A disk of `size` bytes whose true costs are `truth`, with `channels` requests
    /// served in parallel.
    pub fn new(truth: LinearModel, channels: usize, size: u64) -> Self {
        Self::from_disk(EmulatedDisk::new(truth, 1.0, channels, 0), size)
    }

    /// Measures `idle` (an emulated device's disk) in virtual time.
    pub fn from_disk(idle: EmulatedDisk, size: u64) -> Self {
        SimTarget {
            idle,
            size,
            rng: Rng::new(1),
        }
    }
}

impl Target for SimTarget {
    fn size(&self) -> u64 {
        self.size
    }

    /// A closed loop: `depth` requests outstanding, each served by the first free channel
    /// for its true service time; paced jobs submit no faster than their rate.
    fn run(&mut self, job: &Job, progress: &mut dyn FnMut(f64)) -> std::io::Result<JobResult> {
        let end_ns = job.duration.as_nanos() as u64;
        let blocks = (self.size / job.block_size).max(1);
        let interval_ns = job.rate_iops.map(|r| (1e9 / r.max(1e-3)) as u64);
        let kind = if job.pattern.is_write() {
            IoKind::Write
        } else {
            IoKind::Read
        };
        let mut disk = self.idle.clone();
        // Outstanding requests by completion time, with their submission time.
        let mut in_flight: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
        let mut latency_us = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        let (mut now, mut next_submit, mut ios, mut next_block, mut prev_end) =
            (0u64, 0u64, 0u64, 0u64, None);
        let mut last_report = 0u64;
        // Rate = completions / time of the last counted completion: with few, long requests
        // completing in waves, dividing by the whole duration would round the rate down.
        let mut last_done = 0u64;
        loop {
            while in_flight.len() < job.depth as usize && now < end_ns && now >= next_submit {
                let block = if job.pattern.is_random() {
                    self.rng.below(blocks)
                } else {
                    next_block = (next_block + 1) % blocks;
                    next_block
                };
                let offset = block * job.block_size;
                let input = CostInput {
                    kind,
                    offset,
                    len: job.block_size,
                    prev_end,
                };
                prev_end = Some(offset + job.block_size - 1);
                let done = disk.serve(now, &input).done_ns;
                in_flight.push(Reverse((done, now)));
                if let Some(i) = interval_ns {
                    next_submit = next_submit.max(now) + i;
                }
            }
            // Advance to the next event: a completion, or the next paced submission.
            let next_done = in_flight.peek().map(|Reverse((d, _))| *d);
            match next_done {
                Some(d)
                    if interval_ns.is_none()
                        || d <= next_submit
                        || now >= end_ns
                        || in_flight.len() >= job.depth as usize =>
                {
                    let Reverse((done, submitted)) = in_flight.pop().expect("peeked");
                    now = done;
                    if done <= end_ns {
                        ios += 1;
                        last_done = done;
                        let _ = latency_us.record(((done - submitted) / 1000).max(1));
                    }
                }
                _ if now >= end_ns => break,
                _ => now = next_submit,
            }
            if now >= last_report + end_ns / 10 {
                last_report = now;
                progress((now as f64 / end_ns as f64).min(1.0));
            }
        }
        Ok(JobResult {
            ios,
            seconds: last_done.max(1) as f64 / 1e9,
            latency_us,
        })
    }
}
