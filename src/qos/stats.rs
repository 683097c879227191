//! Statistics snapshots (design §10.3): what operators and the simulator look at.
//!
//! Percentages are plain `f64` percent (0..=100, vrate up to 10 000); raw fixed-point
//! values (×65536) are included for exact comparisons.

use serde::Serialize;

/// One volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VolumeStats {
    /// Volume name.
    pub name: String,
    /// Configured weight (1..=10000).
    pub weight: u32,
    /// Active (counted in hweights) right now.
    pub active: bool,
    /// Fair share of the device, percent.
    pub hweight_active: f64,
    /// Share the volume is charged against, percent (< hweight_active while donating).
    pub hweight_inuse: f64,
    /// Share currently donated to others (hweight_active − hweight_inuse), percent.
    pub donated: f64,
    /// Raw `hweight_active` (×65536).
    pub hweight_active_raw: u32,
    /// Raw `hweight_inuse` (×65536).
    pub hweight_inuse_raw: u32,
    /// Raw `inuse` weight (×65536).
    pub inuse_raw: u32,
    /// Device time used over the last planning period, percent of the period.
    pub usage_pct: f64,
    /// Device time used since start, µs (at the modelled speed × vrate).
    pub usage_us: u64,
    /// Time during which the volume had a throttled request, µs.
    pub wait_us: u64,
    /// Requests that had to wait at least once (FIFO heads seen by the core).
    pub throttled: u64,
    /// Times a cap held the FIFO head back.
    pub capped: u64,
    /// Times a background volume's head was held back because of its device time in
    /// flight while a foreground volume was active.
    pub background_held: u64,
    /// Requests admitted on the volume's reservation after its weight's budget refused
    /// them.
    pub reserved: u64,
    /// What the latency class multiplies the volume's weight by (1: none).
    pub boost: f64,
    /// Reads and writes that met the latency target (device latency minus transfer time).
    pub lat_met: u64,
    /// Reads and writes that missed it.
    pub lat_missed: u64,
    /// Time with its next request held back by a cap, and by its class, µs (pressure,
    /// like `wait_us` for the budget).
    pub cap_wait_us: u64,
    pub class_wait_us: u64,
    /// Time its requests waited for a device slot, µs, summed over the requests.
    pub slot_wait_us: u64,
    /// Absolute cost admitted since start: device time at the model's speed, µs.
    pub cost_us: u64,
    /// vnow − its vtime, µs of virtual time: budget it may spend now, or (negative) its
    /// debt, what it ran ahead and waits off.
    pub budget_us: i64,
    /// Latency class: windows of the volume's own target judged, and of those missed.
    pub target_windows: u64,
    pub target_windows_missed: u64,
    /// Device latency (admitted → completed) p50 over the last period, µs.
    pub lat_p50_us_period: Option<u64>,
    /// p99 over the last period, µs.
    pub lat_p99_us_period: Option<u64>,
    /// p50 since start, µs.
    pub lat_p50_us: Option<u64>,
    /// p99 since start, µs.
    pub lat_p99_us: Option<u64>,
}

/// What the planner saw and decided in one period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PeriodRecord {
    /// When the period ended, ns on the QoS clock.
    pub at_ns: u64,
    /// Base vrate before the adjustment, ppm of 100 %.
    pub vrate_before_ppm: u64,
    /// Base vrate after the adjustment, ppm of 100 %.
    pub vrate_after_ppm: u64,
    /// The rate vnow runs at for the next period, ppm: the base vrate (design §5.8).
    pub vrate_effective_ppm: u64,
    /// busy_level after the update.
    pub busy_level: i32,
    /// Missed-latency ppm, `[read, write]`. This and the next three fields are those of
    /// the latency window judged at the end of this period, or of the last one judged
    /// (see `planner::lat_stat::LatWindow`).
    pub missed_ppm: [u32; 2],
    /// Time requests waited for a device slot, percent of the window (can exceed 100).
    pub rq_wait_pct: u32,
    /// Mean device latency minus transfer time, µs, `[read, write]` (0: none completed).
    pub mean_lat_us: [u64; 2],
    /// Mean latency rose above its recent floor near the target, so vrate was not
    /// allowed to rise (see `planner::latency_floor`).
    pub latency_rising: bool,
    /// Periods whose latency was judged at the end of this one (the window's length);
    /// 0 while the window is still gathering completions. busy_level and vrate move
    /// only when a window is judged.
    pub judged_periods: u32,
    /// Reads and writes completed in the period.
    pub nr_done: u64,
    /// Volumes with IO in flight for more than a period.
    pub nr_lagging: u32,
    /// Volumes short of budget.
    pub nr_shortages: u32,
    /// Volumes donating.
    pub nr_donors: u32,
    /// Active volumes at the end of the period.
    pub nr_active: u32,
    /// Consecutive periods, this one included, in whose windows a latency target was missed
    /// while the base vrate was already at its minimum: lowering vrate cannot help any
    /// more, so the target is tighter than the device delivers at that load.
    pub missed_at_min: u32,
    /// The underserved volumes missed their latency target at vrate's minimum, so their
    /// misses no longer lower vrate (see `planner::attainable`).
    pub unreached: bool,
}

/// One device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeviceStats {
    /// Throttling enabled.
    pub enabled: bool,
    /// Some volume is active (the planner is running).
    pub running: bool,
    /// Base vrate, percent of the cost model's speed.
    pub vrate_pct: f64,
    /// Current busy_level (−1000..=1000; > 0 saturated, < 0 starved).
    pub busy_level: i32,
    /// Planning period, µs.
    pub period_us: u64,
    /// Missed-latency ppm of the last period, `[read, write]`.
    pub missed_ppm: [u32; 2],
    /// rq-wait percent of the last period.
    pub rq_wait_pct: u32,
    /// The last planner run.
    pub last_period: PeriodRecord,
    /// Periods with completions and more than one active volume (where QoS arbitrates),
    /// and how many of them missed a latency target, since start.
    pub contended_periods: u64,
    pub contended_periods_missed: u64,
    /// Per-volume statistics.
    pub volumes: Vec<VolumeStats>,
}

/// A volume's latency distribution since start, in the shape of a Prometheus histogram.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyHistogram {
    /// `(upper bound µs, number of requests below it)`, ascending, cumulative.
    pub buckets: Vec<(u64, u64)>,
    /// Sum of all latencies, µs (bucket midpoints: within 12.5 %).
    pub sum_us: u64,
    /// Number of requests.
    pub count: u64,
}
