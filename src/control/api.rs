//! The JSON documents of the REST API (see `docs/openapi.json` for the full schema).
//!
//! Values that can be changed at runtime are reported with their origin:
//! `"weight": {"value": 300, "source": "runtime"}`; `source` is `"config"` when the value
//! comes from the config file and `"runtime"` when it was set over the API (and is kept
//! in the state file, see [`super::state`]).

use crate::cost_model::learn::COEF_NAMES;
use crate::cost_model::ModelConfig;
use crate::qos::{
    CapsConfig, Class, LatencyTarget, LearnedModel, OpCapsConfig, QosConfig, ReserveConfig,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Config,
    Runtime,
    /// Measured from the device at start-up (`crate::calibration`).
    Calibrated,
    /// Refined from live traffic (`crate::cost_model::learn`).
    Learned,
}

/// A value and its origin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    /// A value in effect, `runtime` when it was set over the API.
    pub fn new(value: T, runtime: bool) -> Self {
        let source = if runtime {
            Source::Runtime
        } else {
            Source::Config
        };
        Sourced { value, source }
    }

    /// `runtime` when an override exists, else the config value.
    pub fn pick(config: T, runtime: Option<T>) -> Self {
        match runtime {
            Some(value) => Sourced {
                value,
                source: Source::Runtime,
            },
            None => Sourced {
                value: config,
                source: Source::Config,
            },
        }
    }
}

/// `GET /v1/device/model`: the cost model in effect, where it comes from, and for a
/// calibrated one what was measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelView {
    pub value: ModelConfig,
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<crate::calibration::Calibration>,
    /// The learner's estimate while the model learns (absent while it is pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<LearnedView>,
}

/// What the cost-model learner knows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnedView {
    /// The six coefficients, ns of device time: per 4 KiB page, per sequential and per
    /// random request, for reads and writes.
    pub coefs_ns: std::collections::BTreeMap<String, Option<f64>>,
    /// Each coefficient's standard error at the last fit, percent of it (null: the
    /// traffic has not exercised it enough to estimate).
    pub stderr_pct: std::collections::BTreeMap<String, Option<f64>>,
    /// Windows in which the device was saturated, the last minute's of which are fitted.
    pub saturated_windows: usize,
    /// Times the coefficients moved.
    pub moves: u64,
    /// Seconds since they last moved (null: never).
    pub last_moved_s_ago: Option<f64>,
}

/// `PATCH /v1/groups/{name}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupPatch {
    pub weight: Option<u32>,
    /// Move the group, with everything under it, under this group (`"root"`: the top).
    pub parent: Option<String>,
    /// New caps on the sum of the group's volumes; `{}` removes them.
    pub caps: Option<CapsConfig>,
    /// New reservation for the group's volumes together; `{}` removes it.
    pub reserve: Option<ReserveConfig>,
    /// `"normal"`, `"latency"` or `"background"`.
    pub class: Option<Class>,
    /// The latency class's target for the group's volumes together, e.g. `"p99 2ms"`.
    pub latency_target: Option<LatencyTarget>,
}

/// `PATCH /v1/volumes/{name}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumePatch {
    pub weight: Option<u32>,
    /// Grow the volume to this many bytes (`"20GiB"`); the guest is told.
    pub size: Option<crate::size::ByteSize>,
    /// A group name, or `"root"` (`parent` is the same key).
    #[serde(alias = "parent")]
    pub group: Option<String>,
    /// New caps; `{}` removes them.
    pub caps: Option<CapsConfig>,
    /// New caps per operation; `{}` removes them.
    pub op_caps: Option<OpCapsConfig>,
    /// `"normal"`, `"latency"` or `"background"`.
    pub class: Option<Class>,
    /// The latency class's target, `"p99 2ms"`.
    pub latency_target: Option<LatencyTarget>,
    /// New reservation; `{}` removes it.
    pub reserve: Option<ReserveConfig>,
}

/// The QoS parameters actually in use (latency targets resolved from the model).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EffectiveQos {
    pub enable: bool,
    pub rpct: f64,
    pub rlat_us: u32,
    pub wpct: f64,
    pub wlat_us: u32,
    pub min_pct: f64,
    pub max_pct: f64,
    /// Whose latency misses lower vrate.
    pub protect: crate::qos::Protect,
}

/// `GET /v1/device`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceView {
    pub model: Sourced<ModelConfig>,
    pub qos: Sourced<QosConfig>,
    pub effective: EffectiveQos,
    pub vrate_pct: f64,
    pub busy_level: i32,
    pub period_us: u64,
    /// Some volume is active and the planner is running.
    pub running: bool,
}

/// A group.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupView {
    pub name: String,
    pub weight: Sourced<u32>,
    /// Parent group, `"root"` for the top level.
    pub parent: String,
    /// Caps on the sum of the group's volumes (`{}`: none).
    pub caps: Sourced<CapsConfig>,
    /// The minimum the group's volumes get together (`{}`: none).
    pub reserve: Sourced<ReserveConfig>,
    pub class: Sourced<Class>,
    /// The latency class's target (null when none was given).
    pub latency_target: Sourced<Option<LatencyTarget>>,
    /// What the latency class multiplies the group's weight by now (1: none).
    pub boost: f64,
    /// Volumes directly in this group.
    pub volumes: Vec<String>,
}

/// `GET /v1/groups`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupList {
    pub groups: Vec<GroupView>,
}

/// A volume.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeView {
    pub name: String,
    pub weight: Sourced<u32>,
    /// The group, `"root"` for the top level.
    pub group: Sourced<String>,
    /// The volume's own caps (`{}`: none); its groups' caps apply too.
    pub caps: Sourced<CapsConfig>,
    /// Caps per operation (`{}`: none).
    pub op_caps: Sourced<OpCapsConfig>,
    pub class: Sourced<Class>,
    /// The latency class's target (null when none was given).
    pub latency_target: Sourced<Option<LatencyTarget>>,
    /// The volume's reservation (`{}`: none; a background volume then has a 1 % floor).
    pub reserve: Sourced<ReserveConfig>,
    /// Absolute (a relative path in the config is the daemon's working directory's).
    pub socket: String,
    /// The frontends' user and group ids served (both empty: any that can connect).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_uids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_gids: Vec<u32>,
    /// Where a second frontend attaches while the first is connected: the destination of
    /// a migration on this host (`<socket>.handover`).
    #[serde(default)]
    pub handover_socket: String,
    pub size: u64,
    /// Where its bytes are: its own file or block device (`path`), else `offset` on the
    /// device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default)]
    pub offset: u64,
    pub read_only: bool,
    /// Virtqueues.
    #[serde(default)]
    pub num_queues: u16,
    /// Worker threads serving them, per connection.
    #[serde(default)]
    pub workers: u16,
    /// The CPUs `cpu_affinity` names, worker `t` on the `t % len`-th (`[]`: not pinned);
    /// a worker whose CPU the daemon cannot use runs unpinned, with a warning in the log.
    #[serde(default)]
    pub cpu_affinity: Vec<u16>,
    /// Frontend connections accepted since start.
    pub connections: u64,
    /// A frontend is connected now (a removal needs `force` then).
    #[serde(default)]
    pub connected: bool,
    /// Frontends connected now: 2 while a migration on this host hands the volume over.
    #[serde(default)]
    pub frontends: u32,
}

/// `GET /v1/volumes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<VolumeView>,
}

/// Device part of `GET /v1/stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceStatsView {
    pub enabled: bool,
    pub running: bool,
    pub vrate_pct: f64,
    pub busy_level: i32,
    pub period_us: u64,
    /// Missed-latency ppm of the last period, `[read, write]`.
    pub missed_ppm: [u32; 2],
    pub rq_wait_pct: u32,
    /// Planning periods with completions and more than one active volume, since start,
    /// and how many of them missed a latency target.
    pub contended_periods: u64,
    pub contended_periods_missed: u64,
    /// The device-wide latency targets in effect, `"p90 375us"`; null: that direction
    /// is not judged (its `missed_ppm` then means nothing).
    pub read_target: Option<String>,
    pub write_target: Option<String>,
}

/// One volume in `GET /v1/stats`. Rates are over the last sampling interval (1 s);
/// counters are since start; `*_period` latencies are over the last planning period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeStatsView {
    pub name: String,
    pub group: String,
    pub weight: u32,
    pub connections: u64,
    pub iops: f64,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    /// Completed requests and bytes (what the guest got), since start.
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub write_zeroes: u64,
    pub errors: u64,
    /// Counted in the weight tree right now.
    pub active: bool,
    /// Device time used in the last planning period, percent of the period.
    pub usage_pct: f64,
    pub hweight_active_pct: f64,
    pub hweight_inuse_pct: f64,
    /// Share lent to others (hweight_active − hweight_inuse), percent.
    pub donated_pct: f64,
    /// Time with a throttled request, µs since start.
    pub wait_us: u64,
    /// Requests that had to wait for budget, since start.
    pub throttled: u64,
    /// Times a cap held the volume's next request back, since start.
    pub capped: u64,
    /// Times a background volume's next request was held back for the foreground.
    pub background_held: u64,
    /// Requests admitted on the volume's reservation after its weight's budget refused
    /// them.
    pub reserved: u64,
    /// What the latency class multiplies the volume's weight by (1: none).
    pub boost: f64,
    /// Pressure: share of the last sampling interval (1 s) in which the volume had a
    /// request held back by QoS (budget, cap or class), percent.
    pub pressure_pct: f64,
    /// Time held back by a cap, and by its class, since start, µs (`wait_us`: by its
    /// budget).
    pub cap_wait_us: u64,
    pub class_wait_us: u64,
    /// Time its requests waited for a device slot, µs, summed over the requests.
    pub slot_wait_us: u64,
    /// Absolute cost admitted since start: device time at the model's speed, µs.
    pub cost_us: u64,
    /// Budget it may spend now, µs of virtual time; negative: its debt.
    pub budget_us: i64,
    /// Latency class: windows of the volume's own target judged since start, and of
    /// those missed.
    pub latency_target_windows: u64,
    pub latency_target_windows_missed: u64,
    pub lat_p50_us_period: Option<u64>,
    pub lat_p99_us_period: Option<u64>,
    pub lat_p50_us: Option<u64>,
    pub lat_p99_us: Option<u64>,
}

/// `GET /v1/stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsView {
    pub uptime_s: f64,
    /// Length of the interval the rates were measured over, s (0 before the first one).
    pub interval_s: f64,
    pub device: DeviceStatsView,
    pub volumes: Vec<VolumeStatsView>,
    /// Volumes the query selected before `offset` and `limit` (all of them without one).
    #[serde(default)]
    pub volumes_total: usize,
}

impl LearnedView {
    /// The learner's status as `GET /v1/device/model` shows it; `now_ns` on the QoS clock.
    pub fn of(m: &LearnedModel, now_ns: u64) -> LearnedView {
        let s = &m.status;
        let named = |f: &dyn Fn(usize) -> Option<f64>| -> BTreeMap<String, Option<f64>> {
            (0..COEF_NAMES.len())
                .map(|k| (COEF_NAMES[k].to_string(), f(k)))
                .collect()
        };
        LearnedView {
            coefs_ns: named(&|k| Some((s.coefs_ns[k] * 10.0).round() / 10.0)),
            stderr_pct: named(&|k| {
                s.se[k]
                    .is_finite()
                    .then(|| (s.se[k] * 1000.0).round() / 10.0)
            }),
            saturated_windows: s.windows,
            moves: s.moves,
            last_moved_s_ago: s
                .moved_at_ns
                .map(|t| (now_ns.saturating_sub(t) / 100_000_000) as f64 / 10.0),
        }
    }
}
