//! What the planner remembers about each node of the weight tree between periods (its
//! counters at the last period's end, this period's usage and latency, whether it is a
//! victim, donation and latency-class state), and the buffers one run reuses.

use std::sync::atomic::Ordering::Relaxed;

use crate::qos::shared::DeviceState;
use crate::qos::tree::NodeId;

use super::lat_stat::LatCounts;
use super::service_share::Service;

/// Reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Donor volumes of the current run.
    pub surpluses: Vec<NodeId>,
    /// Inner nodes above the donors.
    pub inner: Vec<NodeId>,
    /// Marks inner nodes already collected in this run.
    pub stamp: u64,
    /// Latency-class groups with active volumes in this run.
    pub latency_groups: Vec<NodeId>,
}

/// What the planner remembers about one tree node.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeBook {
    // --- volumes: counters at the end of the previous period, and this period's usage ---
    pub last_abs_vusage: u64,
    pub usage_delta_us: u64,
    pub last_met: [u32; 2],
    pub last_missed: [u32; 2],
    pub last_rq_wait_ns: u64,
    pub last_lat_sum_us: [u64; 2],
    pub last_lat_sq_sum: [u64; 2],
    /// This period's latency counters of the volume alone.
    pub lat_period: LatCounts,
    /// This period's usage in absolute cost (model time at 100 %).
    pub usage_delta_abs: u64,
    /// Set by `victims::mark`: the volume gets less than it is entitled to, so its
    /// latency misses are a reason to throttle the others (see `lat_stat::of_victims`).
    pub victim: bool,
    /// Its recent share of the device's service (see `victims`).
    pub service: Service,
    /// When `victims::mark` last saw the volume active, ns.
    pub seen_active_ns: u64,
    /// Until when a volume back from a long pause counts as a victim whatever its share
    /// (see `victims::mark`), ns; 0 when it is not in that grace.
    pub back_until_ns: u64,
    // --- donation (design §6.5), valid during one planner run ---
    pub hweight_donating: u32,
    pub hweight_after: u32,
    pub stamp: u64,
    pub b: u64,
    pub b_prime: u64,
    pub t: u64,
    pub t_prime: u64,
    pub child_adjusted_sum: u64,
    // --- the latency class (design §15) ---
    /// Windows in a row that met the target with margin.
    pub latency_met_streak: u32,
    /// The boost changed: the next window shows the old boost's effect, skip it.
    pub latency_skip: bool,
    /// Above the margin at the last judgment: vrate must not rise.
    pub latency_unmet: bool,
}

/// Collect and reset-by-snapshot the counters of the active volumes: each volume's own
/// period is kept in its book (for [`of_victims`]), and the device's total returned.
pub(crate) fn collect(st: &DeviceState, books: &mut [NodeBook], elapsed_ns: u64) -> LatCounts {
    let mut c = LatCounts {
        elapsed_ns,
        ..LatCounts::default()
    };
    // Only active volumes can have completed anything since the last run: a volume is
    // deactivated only after a whole period with nothing in flight, and this runs
    // before deactivation.
    for (id, v) in st.active.iter() {
        let node = &mut books[*id];
        let mut own = LatCounts::default();
        for rw in 0..2 {
            let m = v.lat.nr_met[rw].load(Relaxed);
            let x = v.lat.nr_missed[rw].load(Relaxed);
            own.met[rw] = u64::from(m.wrapping_sub(node.last_met[rw]));
            own.missed[rw] = u64::from(x.wrapping_sub(node.last_missed[rw]));
            node.last_met[rw] = m;
            node.last_missed[rw] = x;
            let l = v.lat.lat_sum_us[rw].load(Relaxed);
            own.lat_sum_us[rw] = l.wrapping_sub(node.last_lat_sum_us[rw]);
            node.last_lat_sum_us[rw] = l;
            let q = v.lat.lat_sq_sum[rw].load(Relaxed);
            own.lat_sq_sum[rw] = q.wrapping_sub(node.last_lat_sq_sum[rw]);
            node.last_lat_sq_sum[rw] = q;
        }
        let w = v.lat.rq_wait_ns.load(Relaxed);
        own.rq_wait_ns = w.wrapping_sub(node.last_rq_wait_ns);
        node.last_rq_wait_ns = w;
        c.add(&own);
        node.lat_period = own;
    }
    c
}

/// The latency signal the controller steers by under `protect = "underserved"`: the
/// period's completions of the *victims* only (volumes served below their share or
/// reservation, marked by [`super::victims::mark`]), with the device's slot waits and
/// period length from `total`.
pub(crate) fn of_victims(st: &DeviceState, books: &[NodeBook], total: &LatCounts) -> LatCounts {
    let mut c = LatCounts {
        rq_wait_ns: total.rq_wait_ns,
        elapsed_ns: total.elapsed_ns,
        ..LatCounts::default()
    };
    for (id, _) in st.active.iter() {
        let book = &books[*id];
        if book.victim {
            let own = LatCounts {
                rq_wait_ns: 0,
                elapsed_ns: 0,
                ..book.lat_period
            };
            c.add(&own);
        }
    }
    c
}
