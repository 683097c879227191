//! Reservations: a volume's guaranteed minimum while it has demand (PAIO's guarantees;
//! design §14).
//!
//! A reservation is a share of the device's time: `iops` random 4 KiB reads per second
//! or `bps` bytes per second of 128 KiB sequential reads, priced by the cost model (the
//! larger of the two when both are given), or `pct` of the device directly. It is a
//! floor, not an add-on: what the volume's weight already gives it counts towards it.
//!
//! Each reserved volume has a reservation budget of absolute cost that refills at its
//! reserved rate, up to one planning period's worth. Every admission takes its cost out
//! of the budget (down to zero: service by weight is not banked). When the vtime budget
//! refuses a request and the reservation budget holds it, the request goes anyway,
//! charged to the reservation and not to vtime. So a volume whose weight gives it less
//! than its reservation is topped up to it, and the extra load shows in the device's
//! latency, which makes the planner lower vrate: the reservation is taken from everyone
//! else's share, whatever the weights.
//!
//! The sum of reservations is checked against the device: at most 90 % of `min` or of
//! 80 %, whichever is higher ([`reservable_ppm`]), so that the controller has room to
//! keep latency targets.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

use crate::cost_model::{CostInput, CostModel, IoKind};
use crate::size::ByteSize;
use crate::vtime::VTIME_PER_SEC;

/// `reserve = { ... }` of a volume: the minimum it gets while it has demand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveConfig {
    /// Random 4 KiB reads per second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iops: u64,
    /// Bytes per second of 128 KiB sequential reads.
    #[serde(default, skip_serializing_if = "ByteSize::is_zero")]
    pub bps: ByteSize,
    /// Percent of the device's time.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub pct: f64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

impl ReserveConfig {
    pub fn is_set(&self) -> bool {
        self.iops != 0 || !self.bps.is_zero() || self.pct != 0.0
    }

    /// The error names the key under `reserve`.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.pct.is_finite() && (0.0..=100.0).contains(&self.pct)) {
            return Err(format!(
                "reserve.pct: must be within 0..=100 (got {})",
                self.pct
            ));
        }
        Ok(())
    }

    /// The reserved share of the device's time, parts per million, priced by `model`.
    pub fn share_ppm(&self, model: &dyn CostModel) -> u64 {
        let price = |len: u64, sequential: bool| {
            model.abs_cost(&CostInput {
                kind: IoKind::Read,
                offset: 1 << 30,
                len,
                prev_end: sequential.then_some(1 << 30),
            })
        };
        let per_sec = |vtime_per_sec: u128| {
            (vtime_per_sec * 1_000_000 / u128::from(VTIME_PER_SEC)).min(u128::from(u64::MAX)) as u64
        };
        let iops = per_sec(u128::from(self.iops) * u128::from(price(4096, false)));
        let bps =
            per_sec(u128::from(self.bps.0) * u128::from(price(128 << 10, true)) / (128 << 10));
        let pct = (self.pct * 10_000.0) as u64;
        iops.max(bps).max(pct).min(1_000_000)
    }
}

/// The highest sum of reserved shares (ppm) a device with vrate bounds `min_pct` may
/// take: 90 % of the higher of 80 % and `min` (at most 100 %). Reservations are priced
/// by the cost model; a device whose vrate has to fall far below 80 % is one whose model
/// should be measured again (`profile`), not one to promise more on.
pub fn reservable_ppm(min_pct: f64) -> u64 {
    let slowest = min_pct.clamp(80.0, 100.0);
    (slowest * 0.9 * 10_000.0) as u64
}

/// The reservation budget of one volume (absolute cost, vtime units). Written only by
/// the volume's admitting thread, except the rate, which the control plane sets.
#[derive(Debug, Default)]
pub(crate) struct ReserveBudget {
    /// Reserved share, ppm of the device's time; 0 = none.
    pub share_ppm: AtomicU64,
    budget: AtomicI64,
    refilled_at_ns: AtomicU64,
}

impl ReserveBudget {
    /// Set the reserved share. A volume that had none starts with an empty budget; one
    /// whose share changes (its group's members came or went) keeps what it has.
    pub(crate) fn set(&self, share_ppm: u64, now_ns: u64) {
        if self.share_ppm.swap(share_ppm, Relaxed) == 0 {
            self.budget.store(0, Relaxed);
            self.refilled_at_ns.store(now_ns, Relaxed);
        }
    }

    /// Refill up to `now_ns` (capped at `period_ns` worth) and return the budget and the
    /// share; None without a reservation.
    fn refill(&self, now_ns: u64, period_ns: u64) -> Option<(i64, u64)> {
        let share = self.share_ppm.load(Relaxed);
        if share == 0 {
            return None;
        }
        let last = self.refilled_at_ns.load(Relaxed);
        let elapsed = now_ns.saturating_sub(last);
        let budget = self
            .budget
            .load(Relaxed)
            .saturating_add(full_budget(share, elapsed))
            .min(full_budget(share, period_ns));
        self.budget.store(budget, Relaxed);
        self.refilled_at_ns.store(last.max(now_ns), Relaxed);
        Some((budget, share))
    }

    /// A request of absolute cost `abs` was admitted by weight: it counts towards the
    /// reservation. The budget may go as far below zero as it may hold above: service by
    /// weight keeps the reservation from adding to it (a floor, not an add-on), and is
    /// not banked for more than a period.
    pub(crate) fn served(&self, abs: u64, now_ns: u64, period_ns: u64) {
        if let Some((budget, share)) = self.refill(now_ns, period_ns) {
            // Never raises it: a large request taken on the reservation stays owed.
            let floor = (-full_budget(share, period_ns)).min(budget);
            self.budget
                .store(budget.saturating_sub(abs as i64).max(floor), Relaxed);
        }
    }

    /// Whether `used` (absolute cost served over the last `elapsed_ns`) fell short of
    /// the reservation; false without one.
    pub(crate) fn unmet(&self, used: u64, elapsed_ns: u64) -> bool {
        let share = self.share_ppm.load(Relaxed);
        share != 0 && i64::try_from(used).unwrap_or(i64::MAX) < full_budget(share, elapsed_ns)
    }

    /// Try to admit a request of absolute cost `abs` on the reservation: Ok on success
    /// (charged), else the time at which the budget will hold it (None: no reservation).
    pub(crate) fn take(&self, abs: u64, now_ns: u64, period_ns: u64) -> Result<(), Option<u64>> {
        let Some((budget, share)) = self.refill(now_ns, period_ns) else {
            return Err(None);
        };
        // A request larger than a full budget goes when the budget is full.
        let need = (abs as i64).min(full_budget(share, period_ns));
        if budget >= need {
            self.budget.store(budget - abs as i64, Relaxed);
            return Ok(());
        }
        let short = (need - budget) as u128;
        let wait_ns =
            short * 1_000_000_000_000_000 / (u128::from(share) * u128::from(VTIME_PER_SEC));
        Err(Some(now_ns.saturating_add(wait_ns as u64 + 1)))
    }
}

/// The absolute cost a reserved share of `share_ppm` earns in `ns`.
fn full_budget(share_ppm: u64, ns: u64) -> i64 {
    (u128::from(ns) * u128::from(share_ppm) * u128::from(VTIME_PER_SEC) / 1_000_000_000_000_000)
        .min(i64::MAX as u128) as i64
}
