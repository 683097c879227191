//! An early sign of saturation: device latency against its recent floor.
//!
//! Deviation from the kernel. The kernel raises vrate whenever the latency percentiles
//! meet their targets with margin and some volume is short of budget. On a device whose
//! latency stays flat until it saturates and then grows with its queue, the percentile
//! only misses once several requests queue, so vrate keeps climbing for many periods
//! past the saturation point, and then has to fall below it to drain the queue: the
//! controller limit-cycles around saturation (simulator, model 2× optimistic: vrate
//! 40–55 %, p95 4.9 ms against a 2 ms target).
//!
//! The earlier sign is the mean latency (minus transfer time) rising above 115 % of the
//! lowest per-period mean of the last 10 s, per direction. It only counts once the mean
//! is at least a quarter of the latency target, so a device far from its target is not
//! held back for queueing it can afford. While latency is *rising*, vrate may not rise
//! ([`super::busy`] holds busy_level at 0); lowering vrate is left to the percentile
//! misses. With it the same simulation holds vrate at 49 % with p95 1.2 ms.
//!
//! An earlier version also counted a mean above 150 % of the floor as saturated, which
//! lowered vrate. On the real file that held vrate at its minimum for good: a QD1
//! reader met its p50 target with room to spare (2–15 % misses where 50 % are allowed),
//! but with ~55 reads per period its mean swung by a third around a floor that is the
//! lowest of those noisy means, so 150 % was crossed every few periods and each
//! crossing pushed vrate down again (BENCHMARKS.md §2). A signal that can only stop a
//! rise cannot do that.

use crate::cost_model::vtime::MILLION;

/// Above this percentage of the floor, latency is rising: a queue is forming.
pub const QUEUE_RISING_PCT: u64 = 115;
/// The floor is the lowest per-period mean seen in this window (like BBR's min-RTT
/// window): a device that really became slower sets a new floor after it.
pub const FLOOR_WINDOW_NS: u64 = 10_000_000_000;

/// What the mean latency says about the device queue, worst direction first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Queue {
    /// No queue to speak of, or far from the latency target, or no completions.
    #[default]
    Clear,
    /// Latency is rising above its floor near the target: vrate should not rise.
    Rising,
}

/// The latency floor per direction.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LatFloors {
    us: [u64; 2],
    at_ns: [u64; 2],
}

impl LatFloors {
    /// Takes this period's `[read, write]` mean latencies (µs, 0 = no completions) and
    /// allowed misses `ppm_thr` (1e6 = no target) with the targets `target_us`, updates
    /// the floors and says what the means show.
    pub(crate) fn observe(
        &mut self,
        mean_us: [u64; 2],
        ppm_thr: [u32; 2],
        target_us: [u32; 2],
        now_ns: u64,
    ) -> Queue {
        let mut worst = Queue::Clear;
        for rw in 0..2 {
            let mean = mean_us[rw];
            if mean == 0 || u64::from(ppm_thr[rw]) >= MILLION {
                continue;
            }
            let expired = now_ns.saturating_sub(self.at_ns[rw]) > FLOOR_WINDOW_NS;
            if self.us[rw] == 0 || mean <= self.us[rw] || expired {
                self.us[rw] = mean;
                self.at_ns[rw] = now_ns;
            }
            let floor = self.us[rw];
            let this =
                if mean * 4 >= u64::from(target_us[rw]) && mean * 100 > floor * QUEUE_RISING_PCT {
                    Queue::Rising
                } else {
                    Queue::Clear
                };
            worst = worst.max(this);
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P95: [u32; 2] = [50_000, 50_000];
    const TARGET: [u32; 2] = [2_000, 2_000];

    #[test]
    fn a_mean_above_its_floor_near_the_target_is_rising() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([900, 0], P95, TARGET, 0), Queue::Clear);
        assert_eq!(f.observe([1_000, 0], P95, TARGET, 1), Queue::Clear); // 111 %
        assert_eq!(f.observe([1_050, 0], P95, TARGET, 2), Queue::Rising); // 117 %
        assert_eq!(f.observe([1_400, 0], P95, TARGET, 3), Queue::Rising); // 156 %
                                                                          // A lower mean lowers the floor at once.
        assert_eq!(f.observe([800, 0], P95, TARGET, 4), Queue::Clear);
        assert_eq!(f.observe([1_000, 0], P95, TARGET, 5), Queue::Rising);
    }

    #[test]
    fn far_from_the_target_queueing_is_allowed() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([100, 0], P95, [5_000, 5_000], 0), Queue::Clear);
        // Twelve times the floor, still below a quarter of the target.
        assert_eq!(f.observe([1_200, 0], P95, [5_000, 5_000], 1), Queue::Clear);
        assert_eq!(f.observe([1_300, 0], P95, [5_000, 5_000], 2), Queue::Rising);
    }

    #[test]
    fn directions_are_judged_apart_and_the_worst_counts() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([900, 300], P95, TARGET, 0), Queue::Clear);
        // Writes are at 160 % of their floor but below a quarter of the target.
        assert_eq!(f.observe([900, 480], P95, TARGET, 1), Queue::Clear);
        assert_eq!(f.observe([900, 1_200], P95, TARGET, 2), Queue::Rising);
        // No target for a direction (ppm_thr 1e6): never judged.
        let none = [50_000, MILLION as u32];
        assert_eq!(f.observe([900, 9_000], none, TARGET, 3), Queue::Clear);
    }

    #[test]
    fn the_floor_expires_after_its_window() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([1_000, 0], P95, TARGET, 0), Queue::Clear);
        assert_eq!(f.observe([1_600, 0], P95, TARGET, 1), Queue::Rising);
        // Ten seconds later the device is simply slower: the new mean is the floor.
        let later = FLOOR_WINDOW_NS + 2;
        assert_eq!(f.observe([1_600, 0], P95, TARGET, later), Queue::Clear);
    }
}
