//! Proportional, work-conserving IO control in the style of Linux `blk-iocost`.
//!
//! # The idea
//!
//! Every request is priced by a device cost model ([`crate::cost_model`]) in *device
//! time*. Each volume gets a weight, volumes are grouped in a tree, and a volume's share
//! of the device is the product of its weight fractions among its active siblings on
//! the way up (its *hierarchical weight*, hweight):
//!
//! ```text
//!   root ─ A(100) ─ A0(100)      A0: 100/400 · 100/200 = 12.5 %
//!        │        └ A1(100)      A1: 12.5 %
//!        └ B(300)                B:  300/400            = 75 %
//! ```
//!
//! The device runs a global virtual clock, `vnow`, which advances at `vrate` (100 % =
//! one second of modelled device time per wall second). Each volume has a local clock,
//! `vtime`, advanced by `abs_cost / hweight` for every request it issues: a volume with a
//! 25 % share pays four times the device time. A request may go iff `vtime + cost ≤
//! vnow`. The gap `vnow − vtime` is the volume's budget: it starts at half a planning
//! period when a volume becomes active and is capped there, so an idle volume cannot
//! bank credit and then flood the device.
//!
//! # Who decides what
//!
//! * The **issue path** ([`VolumeQos::admit`]) runs per request, takes no lock in the
//!   common case, and answers "go now (charged)" or "wait until t". The data path parks
//!   waiting requests in a per-volume FIFO; the core never queues. The data path calls
//!   it in batches: [`VolumeQos::admit_at`] with one clock reading per batch, and
//!   [`VolumeQos::complete_batch`] once per batch of completions.
//! * The **planner** ([`crate::planner::Planner`], which owns its own state) runs once
//!   per period. It measures how much of its budget each volume used, lets volumes that
//!   do not need their share *donate* it to those that do (by lowering their `inuse`
//!   weight, which raises everyone else's hweight), deactivates volumes that went idle,
//!   and moves `vrate` up or down from completion latencies and device-slot waits. A
//!   donor that needs its share back takes it back on the issue path immediately.
//! * **vrate** absorbs the model's error: if the model is pessimistic the device has
//!   spare capacity while volumes are throttled, and vrate rises; if it is optimistic,
//!   latencies miss their target and vrate falls.
//!
//! # Files
//!
//! * [`clock`]: time sources; [`vclock`]: the global vtime;
//! * [`config`] / [`params`]: `[device.qos]` and what is derived from it (period,
//!   margins, vrate bounds);
//! * [`weights`] / [`tree`]: weights, hweights and their propagation;
//! * [`device`]: [`QosDevice`]; [`volume`]: [`VolumeQos`] and the issue path;
//! * [`request`]: the request/decision types; [`stats`]: statistics snapshots;
//! * [`caps`], [`class`], [`reserve`]: hard limits, the background class and
//!   reservations (design §12–§14);
//! * [`learned`]: the cost-model learner's tap and its published moves.
//!
//! # Deviations from the kernel, in one place
//!
//! * FLUSH, DISCARD and WRITE_ZEROES are priced and throttled (they are free there).
//! * No "must issue" class, so no debt, delay or debt forgiveness (design §3.8): every
//!   guest request can wait. The kernel's debt machinery only serves swap, metadata and
//!   merges, none of which exist here.
//! * No automatic preset switching (design §2.4): the preset comes from configuration.
//! * The core does not own wait queues or timers; it returns a retry time, and the
//!   planner cannot kick waiters itself (the caller re-offers heads after each `plan`).
//! * `plan()` may be called at any time and only runs when a period is due.
//! * busy_level is kept, not reset, by a window without completions while IO is lagging
//!   (design §5.6).
//! * Latency and usage counters are per volume (atomics), not per CPU.
//! * The shortest planning period is 10 ms, not 1 ms ([`params`]), and latency is
//!   judged over windows of periods holding enough completions
//!   (`planner::lat_stat::LatWindow`).
//! * The controller aims at 40 % of the misses a target allows, and vrate falls 4 % at
//!   once in a busy window; only rises keep the slow start (`planner::busy`,
//!   `planner::vrate`). Other controller deviations are commented where they are made.
//! * A volume active alone, with no neighbour for a second, is not throttled
//!   ([`device`]: `DeviceShared::alone`); it is charged, and owes only its queue when a
//!   neighbour arrives (design §5.9).
//! * vnow runs at the base vrate: budget the planner discards is not handed out again
//!   (design §5.8).
//! * Caps ([`caps`], design §12) are checked before the vtime decision.
//! * Classes the kernel does not have: background volumes ([`class`], design §13) and
//!   reservations ([`reserve`], design §14), which admit what the vtime decision refuses.

pub(crate) mod cap_meter;
pub(crate) mod caps;
pub(crate) mod class;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod device;
pub(crate) mod device_service;
pub(crate) mod error;
pub(crate) mod histogram;
pub(crate) mod learned;
pub(crate) mod learning;
pub(crate) mod node_id;
pub(crate) mod params;
pub(crate) mod policy;
pub(crate) mod request;
pub(crate) mod reserve;
pub(crate) mod reserve_shares;
pub(crate) mod shared;
pub(crate) mod stats;
pub(crate) mod tree;
pub mod tunables;
pub(crate) mod vclock;
pub(crate) mod volume;
pub(crate) mod volume_core;
pub(crate) mod volume_stats;
pub(crate) mod weights;

pub use crate::cost_model::{CostModel, IoKind};
pub use cap_meter::CapMeter;
pub use caps::{CapsConfig, OpCapsConfig};
pub use class::{Class, LatencyTarget};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::{Protect, QosConfig};
pub use device::{NodeInfo, QosDevice};
pub use error::QosError;
pub use learning::LearnedModel;
pub use params::QosParams;
pub use policy::{GroupPolicy, ServiceChange, VolumePolicy};
pub use request::{Charge, Decision, IoRequest, Timing};
pub use reserve::{reservable_ppm, ReserveConfig};
pub use stats::{DeviceStats, LatencyHistogram, PeriodRecord, VolumeStats};
pub use volume::VolumeQos;
pub use weights::{check_weight, WeightOutOfRange, WEIGHT_DEFAULT, WEIGHT_MAX, WEIGHT_MIN};

#[cfg(test)]
mod class_tests;
#[cfg(test)]
pub(crate) mod test_util;
#[cfg(test)]
mod tests;
