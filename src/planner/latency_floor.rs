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
//! The earlier sign is the mean latency (minus transfer time) rising above its floor,
//! per direction: above both 115 % of the floor and the floor plus three standard errors
//! of this period's mean (the standard deviation of its latencies over √n). The floor is the
//! lowest running median of the last five per-period means since it was set, so one
//! lucky period cannot pull it down. It only counts once the mean is at least a quarter
//! of the latency target, so a device far from its target is not held back for queueing
//! it can afford. While latency is *rising*, vrate may not rise ([`super::busy`] holds
//! busy_level at 0); lowering vrate is left to the percentile misses. With it the same
//! simulation holds vrate at 49.5 % with p95 1.27 ms.
//!
//! The floor starts again from the current mean after a gross miss (a mean of at least
//! 4× the target, as when a heavy writer joins: once its queue has drained, the new
//! level is the one to hold against), and from the current median when it has not been
//! lowered for 10 s (a device that really became slower).
//!
//! Why a median of window means and a noise margin, not the lowest mean: with 50–250
//! reads per period a QD1 reader's mean swings by a third from one period to the next,
//! and the lowest of those noisy means lies far below their level, so "above 115 % of
//! the lowest mean" holds in 76–99 % of the periods of a steady load on a real disk.
//! Counting that as saturated holds vrate at its minimum; only holding vrate on it makes
//! every fall stick (after a writer joins, vrate stays wherever the descent stopped, and
//! that decides the split). A simulated device serves requests in their modelled time:
//! its standard errors are small and the median of a steady level is that level, so
//! there the rule is nearly "115 % of the lowest mean".

use super::lat_stat::is_gross;
pub use crate::qos::tunables::{
    FLOOR_WINDOW_NS, MEDIAN_PERIODS, NOISE_MARGIN_SE, QUEUE_RISING_PCT,
};
use crate::vtime::MILLION;

/// What the mean latency says about the device queue, worst direction first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LatencyTrend {
    /// No queue to speak of, or far from the latency target, or no completions.
    #[default]
    Clear,
    /// Latency is rising above its floor near the target: vrate should not rise.
    Rising,
}

/// The latency floor per direction: the lowest running median of the per-period means
/// (µs, 0 = none yet) since it was set, when it was set, and the recent means.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LatFloors {
    us: [u64; 2],
    at_ns: [u64; 2],
    recent: [RecentMeans; 2],
}

/// The last [`MEDIAN_PERIODS`] per-period means of a direction, µs.
#[derive(Clone, Copy, Debug, Default)]
struct RecentMeans {
    ring: [u64; MEDIAN_PERIODS],
    len: usize,
    next: usize,
}

impl RecentMeans {
    /// Adds a mean and returns the median of those kept (the upper middle one of an
    /// even count).
    fn push(&mut self, mean: u64) -> u64 {
        self.ring[self.next] = mean;
        self.next = (self.next + 1) % MEDIAN_PERIODS;
        self.len = (self.len + 1).min(MEDIAN_PERIODS);
        let mut sorted = self.ring;
        let kept = &mut sorted[..self.len];
        kept.sort_unstable();
        kept[self.len / 2]
    }
}

impl LatFloors {
    /// Takes this period's `[read, write]` mean latencies and their standard errors
    /// (µs, mean 0 = no completions), the allowed misses `ppm_thr` (1e6 = no target) and
    /// the targets `target_us`, updates the floors and says what the means show.
    pub(crate) fn observe(
        &mut self,
        mean_us: [u64; 2],
        se_us: [u64; 2],
        ppm_thr: [u32; 2],
        target_us: [u32; 2],
        now_ns: u64,
    ) -> LatencyTrend {
        let mut worst = LatencyTrend::Clear;
        for rw in 0..2 {
            // Clamped so that `mean * 4` and `floor * QUEUE_RISING_PCT` cannot overflow.
            let mean = mean_us[rw].min(u64::MAX / QUEUE_RISING_PCT);
            if mean == 0 || u64::from(ppm_thr[rw]) >= MILLION {
                continue;
            }
            let gross = is_gross(mean, target_us[rw]);
            if gross {
                // A new regime: the floor starts again from this period's mean.
                self.recent[rw] = RecentMeans::default();
            }
            let median = self.recent[rw].push(mean);
            let expired = now_ns.saturating_sub(self.at_ns[rw]) > FLOOR_WINDOW_NS;
            if self.us[rw] == 0 || gross || expired || median <= self.us[rw] {
                self.us[rw] = median;
                self.at_ns[rw] = now_ns;
            }
            // Both large (15 %) and clear of this period's noise (3 standard errors).
            let floor = self.us[rw];
            let bar = (floor * QUEUE_RISING_PCT / 100).max(floor + se_us[rw] * NOISE_MARGIN_SE);
            if mean * 4 >= u64::from(target_us[rw]) && mean > bar {
                worst = LatencyTrend::Rising;
            }
        }
        worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LatencyTrend::{Clear, Rising};

    const P95: [u32; 2] = [50_000, 50_000];
    const TARGET: [u32; 2] = [2_000, 2_000];
    const NO_SE: [u64; 2] = [0, 0];

    #[test]
    fn a_mean_above_its_floor_near_the_target_is_rising() {
        let mut f = LatFloors::default();
        for t in 0..5 {
            assert_eq!(f.observe([900, 0], NO_SE, P95, TARGET, t), Clear);
        }
        // 111 %, then 117 % and 156 % of the floor:
        assert_eq!(f.observe([1_000, 0], NO_SE, P95, TARGET, 5), Clear);
        assert_eq!(f.observe([1_050, 0], NO_SE, P95, TARGET, 6), Rising);
        assert_eq!(f.observe([1_400, 0], NO_SE, P95, TARGET, 7), Rising);
    }

    #[test]
    fn one_low_period_does_not_lower_the_floor_but_a_lower_level_does() {
        let mut f = LatFloors::default();
        for t in 0..5 {
            f.observe([1_000, 0], NO_SE, P95, TARGET, t);
        }
        // One lucky period: the floor stays at 1 000 µs, so 1 100 µs is not rising
        // (against 600 µs it would be 183 %).
        assert_eq!(f.observe([600, 0], NO_SE, P95, TARGET, 5), Clear);
        assert_eq!(f.observe([1_100, 0], NO_SE, P95, TARGET, 6), Clear);
        // Two more periods at 600 µs make three of the last five, and their median is
        // the floor. 117 % of 600 µs:
        for t in 7..9 {
            f.observe([600, 0], NO_SE, P95, TARGET, t);
        }
        assert_eq!(f.observe([700, 0], NO_SE, P95, TARGET, 9), Rising);
    }

    #[test]
    fn far_from_the_target_queueing_is_allowed() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([100, 0], NO_SE, P95, [5_000, 5_000], 0), Clear);
        // Twelve times the floor, still below a quarter of the target.
        assert_eq!(f.observe([1_200, 0], NO_SE, P95, [5_000, 5_000], 1), Clear);
        assert_eq!(f.observe([1_300, 0], NO_SE, P95, [5_000, 5_000], 2), Rising);
    }

    #[test]
    fn directions_are_judged_apart_and_the_worst_counts() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([900, 300], NO_SE, P95, TARGET, 0), Clear);
        // Writes are at 160 % of their floor but below a quarter of the target.
        assert_eq!(f.observe([900, 480], NO_SE, P95, TARGET, 1), Clear);
        assert_eq!(f.observe([900, 1_200], NO_SE, P95, TARGET, 2), Rising);
        // No target for a direction (ppm_thr 1e6): never judged.
        let none = [50_000, MILLION as u32];
        assert_eq!(f.observe([900, 9_000], NO_SE, none, TARGET, 3), Clear);
    }

    #[test]
    fn the_floor_expires_after_its_window() {
        let mut f = LatFloors::default();
        assert_eq!(f.observe([1_000, 0], NO_SE, P95, TARGET, 0), Clear);
        assert_eq!(f.observe([1_600, 0], NO_SE, P95, TARGET, 1), Rising);
        // Ten seconds later the device is simply slower: the new mean is the floor.
        let later = FLOOR_WINDOW_NS + 2;
        assert_eq!(f.observe([1_600, 0], NO_SE, P95, TARGET, later), Clear);
    }

    #[test]
    fn a_rise_within_the_noise_of_the_mean_is_not_rising() {
        let target = [500, 500];
        let mut f = LatFloors::default();
        assert_eq!(f.observe([200, 0], NO_SE, P95, target, 0), Clear);
        // 130 % of the floor, but the mean is only known to ±30 µs (one standard
        // error): the bar is 3 × 30 above the floor, 290 µs.
        assert_eq!(f.observe([260, 0], [30, 0], P95, target, 1), Clear);
        assert_eq!(f.observe([300, 0], [30, 0], P95, target, 2), Rising);
        // Known to ±5 µs, the 115 % bar (230 µs) is the higher one.
        assert_eq!(f.observe([225, 0], [5, 0], P95, target, 3), Clear);
        assert_eq!(f.observe([235, 0], [5, 0], P95, target, 4), Rising);
    }

    #[test]
    fn a_gross_miss_resets_the_floor() {
        let target = [500, 500];
        // Reads settled at 100 µs, then one period at `spike` µs, then the host's queue
        // drains and reads settle at 200 µs, twice the old floor. Returns the floors and
        // what the spike period said.
        let spike_then_settle = |spike: u64| {
            let mut f = LatFloors::default();
            for t in 0..5 {
                f.observe([100, 0], NO_SE, P95, target, t);
            }
            let at_spike = f.observe([spike, 0], NO_SE, P95, target, 5);
            for (t, mean) in [1_000, 200, 200, 200].into_iter().enumerate() {
                f.observe([mean, 0], NO_SE, P95, target, 6 + t as u64);
            }
            (f, at_spike)
        };
        // A writer joins a reader: reads at 8× their target. The floor is the new level:
        // 220 µs is 110 % of it.
        let (mut f, at_spike) = spike_then_settle(4_000);
        assert_eq!(at_spike, Clear);
        assert_eq!(f.observe([220, 0], NO_SE, P95, target, 10), Clear);
        assert_eq!(f.observe([240, 0], NO_SE, P95, target, 11), Rising);
        // A miss that is not gross (3× the target) keeps the old floor, 100 µs: 220 µs
        // is rising against it.
        let (mut f, at_spike) = spike_then_settle(1_500);
        assert_eq!(at_spike, Rising);
        assert_eq!(f.observe([220, 0], NO_SE, P95, target, 10), Rising);
    }
}
