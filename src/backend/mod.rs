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
//! `virtio/request.rs` parse it (`parse_reusing`); `worker/mod.rs` offers it through
//! `admission` (`dispatch`) to the QoS core, which prices it with the cost model and
//! admits it (`qos/volume.rs`, `admit_at`); `worker/inflight.rs` submits it to
//! `io/engine.rs` (`start`) and finishes it on completion (`complete_one`), and
//! `worker/ring.rs` returns it on the used ring (`finish`, `publish_used`).

pub(crate) mod admission;
pub(crate) mod guest_memory;
pub mod io;
pub(crate) mod vhost_user;
pub mod virtio;
pub(crate) mod volume;
pub(crate) mod worker;
