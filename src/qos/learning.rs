//! The learner's place in the device (the estimator itself is
//! [`crate::cost_model::learn`]): the tap the issue path's completions feed, and, while
//! learning, the learner with the model configuration it refines.
//! [`super::learned`] steps it from the planner's thread and publishes its moves.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

use super::request::{Charge, Timing};
use crate::cost_model::learn::tap::{LearnTap, TapBatch};
use crate::cost_model::learn::{params_from_coefs_ns, LearnStatus, Learner};
use crate::cost_model::ModelConfig;
use crate::vtime::VTIME_PER_NSEC;

/// The learner's place in the device: the tap the data path feeds and, while learning,
/// the learner with the configuration it refines.
#[derive(Debug, Default)]
pub struct Learning {
    pub(super) tap: LearnTap,
    pub(super) on: AtomicBool,
    pub(super) active: Mutex<Option<Active>>,
}

#[derive(Debug)]
pub(super) struct Active {
    pub(super) learner: Learner,
    /// The model configuration learned from: its preset and non-data prices stay.
    pub(super) base: ModelConfig,
}

/// A learned model as the control plane shows and keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedModel {
    /// The configuration in effect: the base with the learned six numbers.
    pub model: ModelConfig,
    pub status: LearnStatus,
}

impl Active {
    pub(super) fn view(&self) -> LearnedModel {
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
