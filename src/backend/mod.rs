//! The data path: vhost-user glue, virtio-blk request parsing, and the io_uring engine.
//!
//! - [`request`]: transport-free parsing and validation of virtio-blk requests.
//! - [`split_ring`]: the split virtqueue's rings, read and written through their
//!   mappings; [`chain`]: a popped descriptor chain to a validated request.
//! - [`blk_config`]: features and config space.
//! - [`disk`], [`bounce`], [`engine`]: the host disk, O_DIRECT bounce buffers, io_uring.
//! - [`slots`]: the device-wide in-flight limit.
//! - [`admission`]: the only interface to the QoS core; [`admit_queue`]: the volume FIFO
//!   in front of it (only the head is offered; shared with the simulator).
//! - [`worker`]: a volume's event loop state: popping the rings (`ring`), admission
//!   (`mod`), requests on the device (`inflight`).
//! - [`vhost`]: the `VhostUserBackend` implementation for one connection;
//!   [`dirty_log`]: guest memory's dirty bitmap, the migration log.
//! - [`acceptor`]: one thread waiting for frontends on every volume's socket;
//!   [`server`]: a volume's connections (a thread each), reconnects and graceful
//!   shutdown; [`handshake`]: the deadline for a new frontend's first message;
//!   [`lease`]: which of a volume's two connections (its socket and its hand-over
//!   socket) may use the rings; [`peer`]: whose connections a volume serves.

pub(crate) mod acceptor;
pub(crate) mod admission;
pub(crate) mod admit_queue;
pub(crate) mod blk_config;
pub(crate) mod bounce;
pub mod chain;
pub(crate) mod dirty_log;
pub mod disk;
pub(crate) mod engine;
pub(crate) mod guest_memory;
pub(crate) mod handshake;
pub mod inflight_log;
pub(crate) mod lease;
pub mod peer;
pub mod request;
pub(crate) mod server;
pub(crate) mod sigbus;
pub(crate) mod slots;
pub mod split_ring;
pub(crate) mod vhost;
pub(crate) mod vhost_inflight;
pub(crate) mod vhost_memory;
pub(crate) mod volume;
pub(crate) mod worker;
