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
//! The earlier sign is the mean latency (minus transfer time) rising above the lowest
//! per-period mean of the last 10 s, per direction. It only counts once the mean is at
//! least a quarter of the latency target, so a device far from its target is not held
//! back for queueing it can afford. Against the floor: above 150 % is *building* (busy_level
//! treats it like a miss), 115–150 % is the hysteresis band (vrate holds), below is
//! *clear*. With it the same simulation holds vrate at 46–48 % with p99 1.3 ms.

use crate::cost_model::vtime::MILLION;

/// Above this percentage of the floor a queue is building.
pub const QUEUE_BUILDING_PCT: u64 = 150;
/// At most this percentage of the floor: no queue to speak of.
pub const QUEUE_CLEAR_PCT: u64 = 115;
/// The floor is the lowest per-period mean seen in this window (like BBR's min-RTT
/// window): a device that really became slower sets a new floor after it.
pub const FLOOR_WINDOW_NS: u64 = 10_000_000_000;

/// What the mean latency says about the device queue, worst direction first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Queue {
    /// No queue to speak of, or far from the latency target, or no completions.
    #[default]
    Clear,
    /// In the hysteresis band.
    Unclear,
    /// Requests are queueing and latency approaches the target.
    Building,
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
            let this = if mean * 4 < u64::from(target_us[rw]) {
                Queue::Clear
            } else if mean * 100 > floor * QUEUE_BUILDING_PCT {
                Queue::Building
            } else if mean * 100 > floor * QUEUE_CLEAR_PCT {
                Queue::Unclear
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
    fn rising_mean_near_the_target_is_a_building_queue() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([900, 0], P95, TARGET, 0), Queue::Clear);
        assert_eq!(f.observe([1_000, 0], P95, TARGET, 1), Queue::Clear); // 111 %
        assert_eq!(f.observe([1_200, 0], P95, TARGET, 2), Queue::Unclear); // 133 %
        assert_eq!(f.observe([1_400, 0], P95, TARGET, 3), Queue::Building); // 156 %
                                                                            // A lower mean lowers the floor at once.
        assert_eq!(f.observe([800, 0], P95, TARGET, 4), Queue::Clear);
        assert_eq!(f.observe([1_300, 0], P95, TARGET, 5), Queue::Building);
    }

    #[test]
    fn far_from_the_target_queueing_is_allowed() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([100, 0], P95, [5_000, 5_000], 0), Queue::Clear);
        // Twelve times the floor, still below a quarter of the target.
        assert_eq!(f.observe([1_200, 0], P95, [5_000, 5_000], 1), Queue::Clear);
        assert_eq!(
            f.observe([1_300, 0], P95, [5_000, 5_000], 2),
            Queue::Building
        );
    }

    #[test]
    fn directions_are_judged_apart_and_the_worst_counts() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([900, 300], P95, TARGET, 0), Queue::Clear);
        // Writes are at 160 % of their floor but below a quarter of the target.
        assert_eq!(f.observe([900, 480], P95, TARGET, 1), Queue::Clear);
        assert_eq!(f.observe([900, 1_200], P95, TARGET, 2), Queue::Building);
        // No target for a direction (ppm_thr 1e6): never judged.
        let none = [50_000, MILLION as u32];
        assert_eq!(f.observe([900, 9_000], none, TARGET, 3), Queue::Clear);
    }

    #[test]
    fn the_floor_expires_after_its_window() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([1_000, 0], P95, TARGET, 0), Queue::Clear);
        assert_eq!(f.observe([1_600, 0], P95, TARGET, 1), Queue::Building);
        // Ten seconds later the device is simply slower: the new mean is the floor.
        let later = FLOOR_WINDOW_NS + 2;
        assert_eq!(f.observe([1_600, 0], P95, TARGET, later), Queue::Clear);
    }
}
