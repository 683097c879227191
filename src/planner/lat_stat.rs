//! Latency and device-slot wait over the last period (spec G.1).
//!
//! Completions report whether they met the latency target and how long they waited for
//! a device slot; the counters are monotonic per volume. The planner takes the
//! differences since its last run and turns them into the two saturation signals:
//! missed-latency ppm per direction and rq-wait as a percentage of the period.

use crate::cost_model::vtime::{cdiv, MILLION};
use crate::qos::device::DeviceState;

use std::sync::atomic::Ordering::Relaxed;

/// A direction's mean latency at least this many times its target is a gross miss.
pub const GROSS_MISS_FACTOR: u64 = 4;

/// A mean latency of `mean_us` against a target of `target_us` (µs) is a gross miss: not
/// a percentile grazing its threshold but a device queue many requests deep.
pub(crate) fn is_gross(mean_us: u64, target_us: u32) -> bool {
    target_us > 0 && mean_us >= GROSS_MISS_FACTOR * u64::from(target_us)
}

/// The saturation signals of one period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LatStat {
    /// `[read, write]` share of completions that missed the target, ppm.
    pub missed_ppm: [u32; 2],
    /// Σ device-slot wait over the period, percent of the period (may exceed 100).
    pub rq_wait_pct: u32,
    /// Reads and writes completed.
    pub nr_done: u64,
    /// `[read, write]` mean device latency minus transfer time, µs (0 without
    /// completions).
    pub mean_lat_us: [u64; 2],
    /// `[read, write]` standard error of those means, µs: the standard deviation of the
    /// latencies over √n. A QD1 reader's 50–250 reads per period make its mean swing by
    /// a third from period to period; this says how much to expect.
    pub mean_se_us: [u64; 2],
}

impl LatStat {
    /// More completions missed their target than the percentile allows, in either
    /// direction. `ppm_thr` = `[1e6 − rppm, 1e6 − wppm]`, the misses allowed.
    pub(crate) fn missed_target(&self, ppm_thr: [u32; 2]) -> bool {
        self.missed_ppm[0] > ppm_thr[0] || self.missed_ppm[1] > ppm_thr[1]
    }

    /// Some direction with a target missed it grossly ([`is_gross`]; see
    /// [`super::vrate`]).
    pub(crate) fn grossly_missed(&self, ppm_thr: [u32; 2], target_us: [u32; 2]) -> bool {
        (0..2).any(|rw| {
            u64::from(ppm_thr[rw]) < MILLION && is_gross(self.mean_lat_us[rw], target_us[rw])
        })
    }
}

/// Collect and reset-by-snapshot the counters of the active volumes.
pub(crate) fn collect(st: &mut DeviceState, elapsed_ns: u64) -> LatStat {
    let mut met = [0u64; 2];
    let mut missed = [0u64; 2];
    let mut rq_wait_ns = 0u64;
    let mut lat_sum_us = [0u64; 2];
    let mut lat_sq_sum = [0u64; 2];
    // Only active volumes can have completed anything since the last run: a volume is
    // deactivated only after a whole period with nothing in flight, and this runs
    // before deactivation.
    let DeviceState { tree, active, .. } = st;
    for (id, v) in active.iter() {
        let node = &mut tree.nodes[*id];
        for rw in 0..2 {
            let m = v.lat.nr_met[rw].load(Relaxed);
            let x = v.lat.nr_missed[rw].load(Relaxed);
            met[rw] += u64::from(m.wrapping_sub(node.last_met[rw]));
            missed[rw] += u64::from(x.wrapping_sub(node.last_missed[rw]));
            node.last_met[rw] = m;
            node.last_missed[rw] = x;
            let l = v.lat.lat_sum_us[rw].load(Relaxed);
            lat_sum_us[rw] += l.wrapping_sub(node.last_lat_sum_us[rw]);
            node.last_lat_sum_us[rw] = l;
            let q = v.lat.lat_sq_sum[rw].load(Relaxed);
            lat_sq_sum[rw] = lat_sq_sum[rw].wrapping_add(q.wrapping_sub(node.last_lat_sq_sum[rw]));
            node.last_lat_sq_sum[rw] = q;
        }
        let w = v.lat.rq_wait_ns.load(Relaxed);
        rq_wait_ns = rq_wait_ns.saturating_add(w.wrapping_sub(node.last_rq_wait_ns));
        node.last_rq_wait_ns = w;
    }
    let mut missed_ppm = [0u32; 2];
    for rw in 0..2 {
        let total = met[rw] + missed[rw];
        if total > 0 {
            missed_ppm[rw] = cdiv(missed[rw].saturating_mul(MILLION), total) as u32;
        }
    }
    let rq_wait_pct = (u128::from(rq_wait_ns) * 100 / u128::from(elapsed_ns.max(1)))
        .min(u128::from(u32::MAX)) as u32;
    let mean = |rw: usize| lat_sum_us[rw] / (met[rw] + missed[rw]).max(1);
    let se = |rw: usize| standard_error(met[rw] + missed[rw], lat_sum_us[rw], lat_sq_sum[rw]);
    LatStat {
        missed_ppm,
        rq_wait_pct,
        nr_done: met[0] + met[1] + missed[0] + missed[1],
        mean_lat_us: [mean(0), mean(1)],
        mean_se_us: [se(0), se(1)],
    }
}

/// Standard error of the mean of `n` samples with sum `sum` and sum of squares `sq`:
/// √((sq/n − mean²) / n), or 0 with fewer than two samples.
fn standard_error(n: u64, sum: u64, sq: u64) -> u64 {
    if n < 2 {
        return 0;
    }
    let (n, sum, sq) = (n as f64, sum as f64, sq as f64);
    let variance = (sq / n - (sum / n).powi(2)).max(0.0);
    (variance / n).sqrt().round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_error_of_the_mean() {
        // 100 and 300 µs: mean 200, standard deviation 100, over √2.
        assert_eq!(standard_error(2, 400, 100_000), 71);
        // 100 samples at 200 µs ± 100 (half each side): sd 100, over √100.
        assert_eq!(
            standard_error(100, 20_000, 50 * 100 * 100 + 50 * 300 * 300),
            10
        );
        // All alike: no noise. Fewer than two samples: none to speak of.
        assert_eq!(standard_error(50, 50 * 930, 50 * 930 * 930), 0);
        assert_eq!(standard_error(1, 500, 250_000), 0);
        assert_eq!(standard_error(0, 0, 0), 0);
    }
}
