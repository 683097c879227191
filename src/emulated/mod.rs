//! A disk whose behaviour is known: the simulator's hardware and the daemon's
//! `kind = "emulated"` device are both this model.
//!
//! The disk has `channels` servers working in parallel behind one FIFO. Service time comes
//! from a *truth* cost model: a request whose true cost is `c` of device time occupies one
//! channel for `channels · c / speed`, so with every channel busy the disk completes
//! exactly `speed / c` such requests per second: it is exactly as fast as the truth model
//! says. Each request also takes `base_latency` that occupies no channel (the controller's
//! and the bus's fixed cost).
//!
//! Requests are served in arrival order by whichever channel frees first, so a read that
//! arrives behind writes waits for them, as on a real SSD. Because the queue is FIFO, a
//! request's completion time is known the moment it arrives ([`EmulatedDisk::serve`]):
//! no event loop is needed, and the simulator and the daemon share the arithmetic.
//!
//! # The frontier this gives
//!
//! A read waits only when every channel is busy. Next to a writer that keeps `k` requests
//! in the device, a QD1 reader sees no wait at all while `k < channels`, at the price of
//! the writer running at `k / channels` of its solo bandwidth. With the writer's requests
//! all in (`k = channels`), a read waits for the first of them to finish: on average half
//! a write's service time divided by `channels` when the writes are staggered, a whole
//! one when they were issued together. So a perfectly paced writer at half its bandwidth
//! leaves the reader its solo speed; what QoS achieves depends only on how well it paces.

mod config;
pub mod crash;
pub(crate) mod disk;
pub(crate) mod faults;

pub use config::EmulatedConfig;
pub use disk::{EmulatedDisk, Service};
pub use faults::FaultPlan;
