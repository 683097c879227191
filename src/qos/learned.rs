//! The cost-model learner inside the controller (the estimator itself is
//! [`crate::cost_model::learn`]).
//!
//! Completions feed the learner's tap from [`super::VolumeQos::complete_batch`]; the
//! planner's thread calls [`QosDevice::learn_tick`] once a period. A move is published
//! like a model set at run time, with vrate multiplied by what the recent traffic costs
//! at the new prices over the old, so the device keeps admitting what it admitted and
//! only the split between kinds of requests changes.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use super::device::QosDevice;
use super::error::QosError;
use super::request::{Charge, Timing};
use crate::cost_model::learn::tap::{LearnTap, TapBatch};
use crate::cost_model::learn::{coefs_ns, params_from_coefs_ns, LearnStatus, Learner, Moved};
use crate::cost_model::{LinearParams, ModelConfig};
use crate::vtime::VTIME_PER_NSEC;

/// The learner's place in the device: the tap the data path feeds and, while learning,
/// the learner with the configuration it refines.
#[derive(Debug, Default)]
pub struct Learning {
    tap: LearnTap,
    on: AtomicBool,
    active: Mutex<Option<Active>>,
}

#[derive(Debug)]
struct Active {
    learner: Learner,
    /// The model configuration learned from: its preset and non-data prices stay.
    base: ModelConfig,
}

/// A learned model as the control plane shows and keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedModel {
    /// The configuration in effect: the base with the learned six numbers.
    pub model: ModelConfig,
    pub status: LearnStatus,
}

impl Active {
    fn view(&self) -> LearnedModel {
        let status = self.learner.status();
        let p = params_from_coefs_ns(&status.coefs_ns);
        LearnedModel {
            model: ModelConfig {
                learn: self.base.learn,
                ..ModelConfig::from_params(p)
            }
            .with_non_data_of(&self.base),
            status,
        }
    }
}

/// Sums a batch of completions into the learner's tap (nothing while the model is
/// pinned). Device time is from submission to completion: waiting for a device slot is
/// the daemon's queue, not the device's.
pub(crate) fn record(learning: &Learning, done: &[(Charge, Timing)]) {
    if !learning.on.load(Relaxed) {
        return;
    }
    let mut batch = TapBatch::default();
    for (charge, t) in done {
        if charge.kind.is_data() {
            let device_ns = t.completed_ns.saturating_sub(t.submitted_ns);
            batch.data(
                &learning.tap,
                charge.kind,
                charge.seq,
                charge.len,
                device_ns,
            );
        } else {
            batch.other(charge.abs_cost / VTIME_PER_NSEC);
        }
    }
    learning.tap.add(&batch);
}

impl QosDevice {
    fn learning_state(&self) -> std::sync::MutexGuard<'_, Option<Active>> {
        let l = &self.shared().learning;
        l.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Learns the model from `base` on, starting from `from` (a model learned by an
    /// earlier run, published at once) or else from `base`'s own numbers.
    pub fn start_learning(
        &self,
        base: &ModelConfig,
        from: Option<LinearParams>,
    ) -> Result<(), QosError> {
        let start = from.unwrap_or_else(|| base.linear_params());
        let now_ns = self.shared().clock.now_ns();
        let active = Active {
            learner: Learner::new(coefs_ns(&start), now_ns),
            base: base.clone(),
        };
        if from.is_some() {
            self.adopt(&active.view().model, 1.0)?;
        }
        *self.learning_state() = Some(active);
        self.shared().learning.on.store(true, Relaxed);
        Ok(())
    }

    /// Pins the model: the learner stops and forgets what it gathered.
    pub fn stop_learning(&self) {
        self.shared().learning.on.store(false, Relaxed);
        *self.learning_state() = None;
    }

    /// The QoS clock's time, ns (the learner's times are on it).
    pub fn now_ns(&self) -> u64 {
        self.shared().clock.now_ns()
    }

    /// The learner's model and status; None while the model is pinned.
    pub fn learned(&self) -> Option<LearnedModel> {
        self.learning_state().as_ref().map(Active::view)
    }

    /// One learner step: call once per planning period. Returns the learned model when
    /// it moved and was published; an error when the moved model cannot be (it would
    /// over-commit the reservations), in which case the old one stays in effect.
    pub fn learn_tick(&self) -> Result<Option<LearnedModel>, QosError> {
        let mut state = self.learning_state();
        let Some(active) = state.as_mut() else {
            return Ok(None);
        };
        let now_ns = self.shared().clock.now_ns();
        let Some(Moved { cost_ratio, .. }) =
            active.learner.tick(&self.shared().learning.tap, now_ns)
        else {
            return Ok(None);
        };
        let view = active.view();
        drop(state);
        self.adopt(&view.model, cost_ratio)?;
        Ok(Some(view))
    }

    /// Publishes `model` as a model set at run time does, then multiplies vrate by
    /// `cost_ratio` (within its bounds). The planner's thread is the only other writer of
    /// vrate, and it is the caller.
    fn adopt(&self, model: &ModelConfig, cost_ratio: f64) -> Result<(), QosError> {
        self.set_model(model)?;
        if cost_ratio != 1.0 {
            let shared = Arc::clone(self.shared());
            let mut st = shared.lock();
            let params = shared.params();
            let rate = (st.vtime_base_rate as f64 * cost_ratio).round() as u64;
            shared.set_base_rate(&mut st, rate.clamp(params.vrate_min(), params.vrate_max()));
            shared.refresh_rate(&st, shared.now());
        }
        Ok(())
    }
}
