//! virtio-blk as the guest speaks it, free of any transport or I/O.
//!
//! - [`split_ring`]: the split virtqueue's rings, read and written through their mappings.
//! - [`chain`]: a popped descriptor chain to a validated [`request`]; [`request`]: parsing
//!   and validating a virtio-blk request.
//! - [`blk_config`]: features and config space.
//! - [`inflight_log`]: the requests each queue has popped and not returned, in memory the
//!   frontend keeps across a daemon restart.

pub(crate) mod blk_config;
pub mod chain;
pub mod inflight_log;
pub mod request;
pub mod split_ring;
