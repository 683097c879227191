//! The learned cost model in the control plane: which model is learned from, where the
//! learner starts, and its place in the state file.
//!
//! The model learned from (the *base*) is the one otherwise in effect: a runtime model,
//! else the calibrated one, else the config's. It learns when its `learn` says so, else
//! when it is a preset or a calibration (guesses about this device's writes); six
//! numbers the operator gave stay pinned. Each move is kept in the state file with the
//! device and base it was learned from, and the next start on the same device and base
//! resumes from it; a new base (a `PUT /v1/device/model`) starts learning afresh.

use super::context::Control;
use super::state::{LearnedEntry, RuntimeState};
use crate::cost_model::ModelConfig;
use crate::lock::Locked;
use crate::qos::LearnedModel;

impl Control {
    /// The model learned from, and whether it learns.
    fn learning_base(&self, st: &RuntimeState) -> (ModelConfig, bool) {
        let calibrated = self.calibrated.as_ref().map(|c| &c.model);
        let base = match (&st.model, calibrated) {
            (Some(m), _) => m.clone(),
            (None, Some(c)) => ModelConfig {
                learn: self.config().device.model.learn,
                ..c.clone()
            },
            (None, None) => self.config().device.model.clone(),
        };
        let learns = base
            .learn
            .unwrap_or(base.rbps.is_none() || (st.model.is_none() && calibrated.is_some()));
        (base, learns)
    }

    /// The device's name as the calibration records it (its path; a device without one,
    /// `kind = "null"`, by its kind).
    fn device_name(&self) -> String {
        let d = &self.config().device;
        crate::calibration::device_name(d).unwrap_or_else(|| format!("{:?}", d.kind))
    }

    /// Starts (or stops) learning as the model in effect says, resuming from the state
    /// file's learned model when it was learned on this device from this base; a stale
    /// one is dropped from `st`.
    pub(super) fn start_learning(&self, st: &mut RuntimeState) -> Result<(), String> {
        self.qos.stop_learning();
        let (base, learns) = self.learning_base(st);
        let device = self.device_name();
        let resume = st
            .learned
            .as_ref()
            .filter(|e| learns && e.device == device && e.base == base)
            .map(|e| e.model.linear_params());
        if resume.is_none() {
            st.learned = None;
        }
        if !learns {
            return Ok(());
        }
        self.qos
            .start_learning(&base, resume)
            .map_err(|e| format!("learned model: {e}"))?;
        if resume.is_some() {
            tracing::info!(device = %device, "device.model: resuming from the learned model in the state file");
        }
        Ok(())
    }

    /// Keeps a move of the learned model in the state file.
    pub fn keep_learned(&self, m: &LearnedModel) {
        let mut st = self.state.locked();
        let (base, _) = self.learning_base(&st);
        st.learned = Some(LearnedEntry {
            device: self.device_name(),
            base,
            model: m.model.clone(),
        });
        if let Err(e) = st.save(&self.state_path) {
            tracing::warn!(path = %self.state_path.display(), "cannot keep the learned model in the state file: {e}");
        }
    }
}
