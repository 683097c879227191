//! The emulated disk's arithmetic: channels behind one FIFO, priced by the truth model
//! (the module's header explains the model and the frontier it gives).

use crate::cost_model::{CostInput, CostModel, LinearModel};
use crate::vtime::vtime_to_ns;

/// When a request the disk accepted completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Service {
    /// Completion time, on the caller's clock.
    pub done_ns: u64,
    /// Device time the request really costs, ns: the busy time it adds to the disk as a
    /// whole (summed over channels).
    pub cost_ns: u64,
}

/// The disk's state: when each channel is next free.
#[derive(Debug, Clone)]
pub struct EmulatedDisk {
    truth: LinearModel,
    speed: f64,
    base_latency_ns: u64,
    free_at_ns: Vec<u64>,
}

impl EmulatedDisk {
    /// A disk as fast as `truth` times `speed`, with `channels` (at least 1) servers.
    pub fn new(truth: LinearModel, speed: f64, channels: usize, base_latency_ns: u64) -> Self {
        EmulatedDisk {
            truth,
            speed,
            base_latency_ns,
            free_at_ns: vec![0; channels.max(1)],
        }
    }

    /// Requests served in parallel.
    pub fn channels(&self) -> usize {
        self.free_at_ns.len()
    }

    /// Device time the request really costs, ns.
    pub fn true_cost_ns(&self, input: &CostInput) -> u64 {
        let ns = vtime_to_ns(self.truth.abs_cost(input)) as f64 / self.speed;
        (ns.round() as u64).max(1)
    }

    /// Accepts a request arriving at `now_ns` (arrivals must come in time order) and says
    /// when it completes: on the first channel to free, after every earlier arrival.
    pub fn serve(&mut self, now_ns: u64, input: &CostInput) -> Service {
        let cost_ns = self.true_cost_ns(input);
        let busy_ns = cost_ns.saturating_mul(self.free_at_ns.len() as u64);
        let channel = self
            .free_at_ns
            .iter_mut()
            .min()
            .expect("at least one channel");
        let start = (*channel).max(now_ns);
        *channel = start.saturating_add(busy_ns);
        Service {
            done_ns: channel.saturating_add(self.base_latency_ns),
            cost_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost_model::{IoKind, LinearParams};

    fn disk(channels: usize, base_latency_ns: u64) -> EmulatedDisk {
        // 1 GB/s and 100k IOPS both ways: a 4 KiB random request costs 10 µs.
        let p = LinearParams {
            rbps: 1_000_000_000,
            rseqiops: 100_000,
            rrandiops: 100_000,
            wbps: 1_000_000_000,
            wseqiops: 100_000,
            wrandiops: 100_000,
        };
        EmulatedDisk::new(LinearModel::new(p), 1.0, channels, base_latency_ns)
    }

    fn rand_io(kind: IoKind, len: u64) -> CostInput {
        CostInput {
            kind,
            offset: 1 << 30,
            len,
            prev_end: None,
        }
    }

    #[test]
    fn a_full_disk_completes_exactly_at_the_truth_rate() {
        let mut d = disk(4, 0);
        let read = rand_io(IoKind::Read, 4096);
        assert_eq!(d.true_cost_ns(&read), 10_000);
        // 400 reads arriving at once finish in 400 × 10 µs: 100k IOPS, whatever the
        // channel count.
        let last = (0..400).map(|_| d.serve(0, &read).done_ns).max().unwrap();
        assert_eq!(last, 4_000_000);
    }

    #[test]
    fn an_idle_disk_serves_at_once_plus_the_base_latency() {
        let mut d = disk(8, 50_000);
        let s = d.serve(1_000_000, &rand_io(IoKind::Read, 4096));
        assert_eq!(s.done_ns, 1_000_000 + 8 * 10_000 + 50_000);
    }

    #[test]
    fn a_read_waits_only_when_every_channel_is_busy() {
        let mut d = disk(2, 0);
        let write = rand_io(IoKind::Write, 1 << 20);
        let read = rand_io(IoKind::Read, 4096);
        let w1 = d.serve(0, &write);
        // One channel still free: the read goes at once.
        assert_eq!(d.serve(0, &read).done_ns, 20_000);
        let w2 = d.serve(0, &write);
        assert!(w2.done_ns > w1.done_ns, "second write behind the read");
        // Both channels now hold writes: the next read starts when the first one ends.
        assert_eq!(d.serve(30_000, &read).done_ns, w1.done_ns + 20_000);
    }
}
