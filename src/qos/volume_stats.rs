//! What a volume's handle reports to the control plane: its statistics, its latency
//! histogram and its pressure (time held back by QoS).

use std::sync::atomic::Ordering::*;

use super::stats::{LatencyHistogram, VolumeStats};
use super::volume::VolumeQos;
use crate::lock::Locked;
use crate::vtime::{vdiff, VTIME_PER_USEC, WEIGHT_ONE};

impl VolumeQos {
    /// Time with a request held back by QoS (budget, cap or class) since start, ns: the
    /// volume's pressure, sampled once a second for its share of the last second.
    pub fn qos_wait_ns(&self) -> u64 {
        let now = self.dev.clock.now_ns();
        let [cap, class] = self.core.held_ns_total(now);
        self.core.wait_ns_total(now) + cap + class
    }

    /// Device latency (admitted → completed) since start, counted below each of
    /// `bounds_us` (ascending; powers of two give exact counts).
    pub fn latency_histogram(&self, bounds_us: &[u64]) -> LatencyHistogram {
        let h = self.core.hist.locked();
        let (counts, sum_us, count) = h.all.cumulative(bounds_us);
        LatencyHistogram {
            buckets: bounds_us.iter().copied().zip(counts).collect(),
            sum_us,
            count,
        }
    }

    /// A statistics snapshot.
    pub fn stats(&self) -> VolumeStats {
        let dev = &*self.dev;
        let v = &*self.core;
        let now = dev.now();
        let held_ns = v.held_ns_total(now.now_ns);
        let gen = dev.hweight_gen.load(Acquire);
        let active = v.on_active.load(Relaxed);
        let (hwa, hwi) = if active { v.hweights(gen) } else { (0, 0) };
        let pct = |hw: u32| f64::from(hw) * 100.0 / f64::from(WEIGHT_ONE);
        let w = v.weights();
        let period = dev.cur_period.load(Relaxed);
        let (p50p, p99p, p50, p99) = {
            let mut h = v.hist.locked();
            h.rotate(period);
            (
                h.last().percentile(50.0),
                h.last().percentile(99.0),
                h.all.percentile(50.0),
                h.all.percentile(99.0),
            )
        };
        VolumeStats {
            name: v.name.clone(),
            weight: w.configured.load(Relaxed),
            active,
            hweight_active: pct(hwa),
            hweight_inuse: pct(hwi),
            donated: pct(hwa.saturating_sub(hwi)),
            hweight_active_raw: hwa,
            hweight_inuse_raw: hwi,
            inuse_raw: w.inuse.load(Relaxed),
            usage_pct: f64::from(v.usage_ppm.load(Relaxed)) / 10_000.0,
            usage_us: v.usage_us.load(Relaxed),
            wait_us: v.wait_ns_total(now.now_ns) / 1000,
            throttled: v.io.throttled.load(Relaxed),
            capped: v.io.capped.load(Relaxed),
            background_held: v.io.background_held.load(Relaxed),
            reserved: v.io.reserved.load(Relaxed),
            boost: v.boost_ppm.load(Relaxed) as f64 / 1e6,
            lat_met: v.io.lat_met.load(Relaxed),
            lat_missed: v.io.lat_missed.load(Relaxed),
            cap_wait_us: held_ns[0] / 1000,
            class_wait_us: held_ns[1] / 1000,
            slot_wait_us: v.lat.rq_wait_ns.load(Relaxed) / 1000,
            cost_us: v.abs_vusage.load(Relaxed) / VTIME_PER_USEC,
            budget_us: vdiff(now.vnow, v.vtime.load(Relaxed)) / VTIME_PER_USEC as i64,
            target_windows: v.io.target_windows.load(Relaxed),
            target_windows_missed: v.io.target_windows_missed.load(Relaxed),
            lat_p50_us_period: p50p,
            lat_p99_us_period: p99p,
            lat_p50_us: p50,
            lat_p99_us: p99,
        }
    }
}
