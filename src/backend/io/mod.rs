//! The I/O layer: the host disk and what runs operations on it.
//!
//! - [`disk`]: the host disk or a volume's own file, opened and sized.
//! - [`engine`]: one io_uring per worker thread (and the null and emulated devices'
//!   completions through it).
//! - [`medium`]: what serves a worker's operations: the file, nothing (null), or the
//!   file on the emulated disk's clock.
//! - [`bounce`]: O_DIRECT bounce buffers for guest buffers that break alignment.
//! - [`slots`]: the device-wide in-flight limit.

pub(crate) mod bounce;
pub mod disk;
pub(crate) mod engine;
pub(crate) mod medium;
pub(crate) mod slots;
