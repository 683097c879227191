//! The simulated disk: the emulated disk's channels ([`crate::emulated`], shared with the
//! daemon's `kind = "emulated"` device) behind `slots` places in the device queue.
//!
//! A request that finds all slots taken waits outside the device (that wait is the
//! rq-wait signal of the planner); one that gets a slot is served by the emulated disk,
//! where it may still wait in the FIFO for a free channel, so latency grows with queue
//! depth and overload is visible.

use std::collections::VecDeque;

use crate::emulated::EmulatedDisk;

/// Disk state.
#[derive(Debug)]
pub(crate) struct Disk {
    pub emulated: EmulatedDisk,
    pub slots: usize,
    /// Requests holding a slot (waiting for a channel or in service).
    pub in_device: usize,
    /// Volumes whose admitted FIFO head waits for a slot, in the order they asked.
    pub slot_waiters: VecDeque<usize>,
}

impl Disk {
    pub(crate) fn new(emulated: EmulatedDisk, slots: usize) -> Self {
        Disk {
            emulated,
            slots,
            in_device: 0,
            slot_waiters: VecDeque::new(),
        }
    }
}
