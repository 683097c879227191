//! Learning the six coefficients of the linear model from live traffic.
//!
//! vrate scales every price by one factor, so it corrects a model that is uniformly too
//! fast or too slow, but never a wrong *ratio*: a model that prices writes at half their
//! real cost gives writers twice their share whatever vrate does. The learner corrects
//! the ratios (and the scale) from what the device does under load.
//!
//! # The signal
//! The data path ([`tap`]) sums, per completion, the pages and requests of each kind and
//! whether the request queued in the device. Every [`WINDOW_NS`] the learner closes a
//! window. One in which at least [`SATURATED_PCT`] % of at least [`MIN_DONE`] reads and
//! writes queued had the device busy throughout, so its completions filled its duration:
//! `x · c = t` (minus the modelled time of flushes and discards). Other windows say
//! nothing and are dropped. The last [`MAX_WINDOWS`] saturated windows are kept.
//!
//! # The estimate
//! Once [`MIN_WINDOWS`] are kept, every closed window refits the coefficients
//! ([`fit`]: anchored, outlier-robust least squares) and moves those the fit is sure of
//! (standard error under [`MAX_SE`] of the estimate) and that are off by more than
//! [`DEAD_BAND`] and two standard errors, by at most [`MAX_STEP`]× per window. A coefficient the traffic does not exercise stays.
//! Windows of different mixes (readers and writers coming and going) tell the
//! coefficients apart; a single steady mix fixes only its total price, and the anchor
//! then keeps the ratios where they were.
//!
//! # Keeping vrate steady
//! A move reports how much the kept windows' traffic costs at the new prices relative to
//! the old: the controller multiplies vrate by it ([`crate::qos::QosDevice::adopt_learned`]),
//! so the device admits what it admitted before, only split differently.
//!
//! | tunable | value | why |
//! |---|---|---|
//! | [`WINDOW_NS`] | 1 s | thousands of completions, many planning periods |
//! | [`SATURATED_PCT`] | 90 % | a standing queue, not a burst |
//! | [`MIN_DONE`] | 64 | enough requests to judge the window |
//! | [`MIN_WINDOWS`], [`MAX_WINDOWS`] | 6, 60 | a fit over the last minute of saturation |
//! | [`MAX_SE`] | 0.1 | move only what is known within 10 % |
//! | [`DEAD_BAND`] | 3 % | do not chase noise |
//! | [`MAX_STEP`] | 1.5× | a 5× error is gone in 4 windows, a bad one is bounded |
//! | [`FLOOR_GENERATION_NS`] | 10 s | latency floors follow a device that slowed |

pub mod fit;
pub mod tap;

use std::collections::VecDeque;

use fit::Sample;
use tap::{LearnTap, FEATURES};

use super::linear::LinearParams;
use crate::vtime::VTIME_PER_SEC;

/// Length of a learning window.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// Share of a window's completions that must have queued for it to count, percent.
pub const SATURATED_PCT: u64 = 90;
/// Least reads and writes a window must complete to count.
pub const MIN_DONE: u64 = 64;
/// Saturated windows needed before the first fit.
pub const MIN_WINDOWS: usize = 6;
/// Saturated windows kept.
pub const MAX_WINDOWS: usize = 60;
/// Largest standard error of a coefficient that may move, relative to its estimate.
pub const MAX_SE: f64 = 0.1;
/// Relative change below which a coefficient stays.
pub const DEAD_BAND: f64 = 0.03;
/// Largest factor a coefficient moves by per window.
pub const MAX_STEP: f64 = 1.5;
/// Latency floors are renewed this often.
pub const FLOOR_GENERATION_NS: u64 = 10_000_000_000;

/// The coefficient names, in the learner's order.
pub const COEF_NAMES: [&str; FEATURES] =
    ["rpage", "rseqio", "rrandio", "wpage", "wseqio", "wrandio"];

/// The learner's state as the control plane shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LearnStatus {
    /// Current coefficients, ns.
    pub coefs_ns: [f64; FEATURES],
    /// Relative standard error of each at the last fit (infinite: not estimated).
    pub se: [f64; FEATURES],
    /// When a coefficient last moved, ns on the QoS clock.
    pub moved_at_ns: Option<u64>,
    /// Moves so far.
    pub moves: u64,
    /// Saturated windows kept (filled in by [`Learner::status`]).
    pub windows: usize,
}

/// A move: the new coefficients and what the kept traffic costs at them over the old.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moved {
    pub coefs_ns: [f64; FEATURES],
    pub cost_ratio: f64,
}

/// The learner of one device.
#[derive(Debug)]
pub struct Learner {
    status: LearnStatus,
    kept: VecDeque<Sample>,
    window_start_ns: u64,
    open: tap::TapCounts,
    floors_renewed_ns: u64,
}

impl Learner {
    /// Starts from `coefs_ns` at `now_ns`.
    pub fn new(coefs_ns: [f64; FEATURES], now_ns: u64) -> Self {
        Learner {
            status: LearnStatus {
                coefs_ns,
                se: [f64::INFINITY; FEATURES],
                ..LearnStatus::default()
            },
            kept: VecDeque::new(),
            window_start_ns: now_ns,
            open: tap::TapCounts::default(),
            floors_renewed_ns: now_ns,
        }
    }

    pub fn status(&self) -> LearnStatus {
        LearnStatus {
            windows: self.kept.len(),
            ..self.status
        }
    }

    /// Drains the tap; when a window closes, keeps it if saturated and refits. Returns
    /// the move, if the coefficients moved.
    pub fn tick(&mut self, tap: &LearnTap, now_ns: u64) -> Option<Moved> {
        let c = tap.drain();
        for (o, v) in self.open.features.iter_mut().zip(c.features) {
            *o += v;
        }
        self.open.done += c.done;
        self.open.queued += c.queued;
        self.open.other_ns += c.other_ns;
        if now_ns.saturating_sub(self.floors_renewed_ns) >= FLOOR_GENERATION_NS {
            tap.new_floor_generation();
            self.floors_renewed_ns = now_ns;
        }
        let elapsed = now_ns.saturating_sub(self.window_start_ns);
        if elapsed < WINDOW_NS {
            return None;
        }
        let w = std::mem::take(&mut self.open);
        self.window_start_ns = now_ns;
        let busy_ns = elapsed.saturating_sub(w.other_ns);
        let saturated = w.done >= MIN_DONE && w.queued * 100 >= w.done * SATURATED_PCT;
        if !saturated || busy_ns < elapsed / 2 {
            return None;
        }
        if self.kept.len() == MAX_WINDOWS {
            self.kept.pop_front();
        }
        self.kept.push_back(Sample {
            x: w.features.map(|v| v as f64),
            t_ns: busy_ns as f64,
        });
        self.refit(now_ns)
    }

    fn refit(&mut self, now_ns: u64) -> Option<Moved> {
        if self.kept.len() < MIN_WINDOWS {
            return None;
        }
        let samples: Vec<Sample> = self.kept.iter().copied().collect();
        let old = self.status.coefs_ns;
        let f = fit::fit(&samples, &old)?;
        self.status.se = f.se;
        let mut new = old;
        for k in 0..FEATURES {
            let theta = f.theta[k];
            let significant = (theta - 1.0).abs() > DEAD_BAND.max(2.0 * f.se[k]);
            if f.se[k] < MAX_SE * theta && theta.is_finite() && significant {
                new[k] = old[k] * theta.clamp(1.0 / MAX_STEP, MAX_STEP);
            }
        }
        if new == old {
            return None;
        }
        let cost = |c: &[f64; FEATURES]| -> f64 {
            samples
                .iter()
                .map(|s| s.x.iter().zip(c).map(|(x, c)| x * c).sum::<f64>())
                .sum()
        };
        let cost_ratio = cost(&new) / cost(&old).max(f64::MIN_POSITIVE);
        self.status.coefs_ns = new;
        self.status.moved_at_ns = Some(now_ns);
        self.status.moves += 1;
        Some(Moved {
            coefs_ns: new,
            cost_ratio,
        })
    }
}

/// The coefficients of `params`, ns, in the learner's order.
pub fn coefs_ns(params: &LinearParams) -> [f64; FEATURES] {
    let c = params.coefs();
    [c.rpage, c.rseqio, c.rrandio, c.wpage, c.wseqio, c.wrandio]
        .map(|v| v as f64 * 1e9 / VTIME_PER_SEC as f64)
}

/// The six measured numbers whose coefficients are `coefs_ns` (the inverse of
/// [`coefs_ns`], to the model's rounding).
pub fn params_from_coefs_ns(coefs_ns: &[f64; FEATURES]) -> LinearParams {
    let per_sec = |ns: f64| -> u64 {
        let v = 1e9 / ns.max(1e-3);
        if v.is_finite() {
            (v.round() as u64).max(1)
        } else {
            u64::MAX
        }
    };
    let [rpage, rseqio, rrandio, wpage, wseqio, wrandio] = *coefs_ns;
    LinearParams {
        rbps: per_sec(rpage).saturating_mul(4096),
        rseqiops: per_sec(rseqio + rpage),
        rrandiops: per_sec(rrandio + rpage),
        wbps: per_sec(wpage).saturating_mul(4096),
        wseqiops: per_sec(wseqio + wpage),
        wrandiops: per_sec(wrandio + wpage),
    }
}

#[cfg(test)]
mod tests;
