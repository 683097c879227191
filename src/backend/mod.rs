//! The data path, in layers; each imports only the ones below it.
//!
//! - [`vhost_user`]: frontends connect and hand over memory and rings.
//! - [`worker`]: a volume's event loop: popping the rings (`ring`), admission (`mod`),
//!   requests on the device (`inflight`), the inflight log (`inflight_log`).
//! - [`volume`]: one guest disk and what outlives a connection (QoS handle, counters,
//!   the lease on its rings, whose frontends it serves).
//! - [`virtio`]: requests and rings as the guest writes them.
//! - [`guest_memory`]: the frontend's memory as mapped here, its dirty log, SIGBUS.
//! - [`io`]: the host disk, io_uring, bounce buffers, the device's in-flight slots.
//! - [`admission`]: the only interface to the QoS core, and the FIFO in front of it.
//!
//! A request's way: `worker/ring.rs` pops a chain (`pop_all`); `virtio/chain.rs` and
//! `virtio/request.rs` parse it (`parse_reusing`); `worker/mod.rs` (`dispatch`) offers the
//! FIFO head (`admission/queue.rs`, `next`) to the QoS core, which prices it
//! (`qos/volume.rs` `admit_by_budget`, through `cost_model/linear.rs` `abs_cost`) and
//! answers go or wait (`admit_at`); `worker/inflight.rs` builds the device operation
//! (`start`, `submit_op`) and queues it on `io/engine.rs` (`push`, submitted by
//! `submit`), reaps it (`complete_ready`) and finishes it (`complete_one`), and
//! `worker/ring.rs` writes the status, returns the chain on the used ring and notifies
//! the guest (`finish`, `publish_used`).

pub(crate) mod admission;
pub(crate) mod guest_memory;
pub mod io;
pub(crate) mod vhost_user;
pub mod virtio;
pub(crate) mod volume;
pub(crate) mod worker;
