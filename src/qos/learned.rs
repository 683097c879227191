//! The cost-model learner's control side (its state is [`super::learning`], the estimator
//! [`crate::cost_model::learn`]).
//!
//! Completions feed the learner's tap from [`super::VolumeQos::complete_batch`]; the
//! planner's thread calls [`QosDevice::learn_tick`] once a period. A move is published
//! like a model set at run time, with vrate multiplied by what the recent traffic costs
//! at the new prices over the old, so the device keeps admitting what it admitted and
//! only the split between kinds of requests changes.

use crate::lock::Locked;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::device::QosDevice;
use super::error::QosError;
use super::learning::{Active, LearnedModel};
use crate::cost_model::learn::{coefs_ns, Learner, Moved};
use crate::cost_model::{LinearParams, ModelConfig};

impl QosDevice {
    fn learning_state(&self) -> std::sync::MutexGuard<'_, Option<Active>> {
        let l = &self.shared().learning;
        l.active.locked()
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
