//! The simulated disk.
//!
//! A disk has `channels` servers working in parallel and `slots` places in its queue.
//! A request that finds all slots taken waits outside the device (that wait is the
//! rq-wait signal of the planner); one that gets a slot but no free channel waits in the
//! device's FIFO, so latency grows with queue depth and overload is visible.
//!
//! Service time comes from a *truth* cost model: a request whose true cost is `c` of
//! device time occupies one channel for `channels · c / speed`. With all channels busy
//! the disk then completes exactly `speed / c` such requests per second, i.e. it is
//! exactly as fast as the truth model says (times `speed`). A cost model that equals the
//! truth model is perfect; `speed = 2` makes it 2× pessimistic.

use std::collections::VecDeque;

use crate::cost_model::vtime::vtime_to_ns;
use crate::cost_model::{CostInput, CostModel, LinearModel};

use super::engine::ReqId;

/// Disk state.
#[derive(Debug)]
pub(crate) struct Disk {
    truth: LinearModel,
    speed: f64,
    pub channels: Vec<Option<ReqId>>,
    pub slots: usize,
    /// Requests holding a slot (in the FIFO or in service).
    pub in_device: usize,
    /// Holding a slot, waiting for a channel.
    pub fifo: VecDeque<ReqId>,
    /// Waiting for a slot.
    pub slot_wait: VecDeque<ReqId>,
}

impl Disk {
    pub(crate) fn new(truth: LinearModel, speed: f64, channels: usize, slots: usize) -> Self {
        Disk {
            truth,
            speed,
            channels: vec![None; channels],
            slots,
            in_device: 0,
            fifo: VecDeque::new(),
            slot_wait: VecDeque::new(),
        }
    }

    /// Device time the request really occupies, ns (summed over channels: the busy
    /// time it adds to the device as a whole).
    pub(crate) fn true_cost_ns(&self, input: &CostInput) -> u64 {
        let ns = vtime_to_ns(self.truth.abs_cost(input)) as f64 / self.speed;
        (ns.round() as u64).max(1)
    }

    /// How long one channel is busy serving a request of true cost `cost_ns`.
    pub(crate) fn service_ns(&self, cost_ns: u64) -> u64 {
        cost_ns.saturating_mul(self.channels.len() as u64)
    }

    pub(crate) fn free_channel(&self) -> Option<usize> {
        self.channels.iter().position(Option::is_none)
    }
}
