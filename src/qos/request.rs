//! What the data path hands the QoS core per request, and what it gets back.
//!
//! The core never queues anything itself. For each request it answers either
//! [`Decision::Go`] (the cost is already charged; submit now and keep the [`Charge`]
//! with the in-flight request) or [`Decision::Wait`] (nothing charged; park the request
//! in the volume's FIFO and offer the FIFO head again at `until_ns`).

pub use crate::cost_model::IoKind;

/// One guest request as the QoS core sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// Operation class.
    pub kind: IoKind,
    /// Byte offset within the volume (ignored for flushes).
    pub offset: u64,
    /// Length in bytes (0 for flushes).
    pub len: u64,
}

/// The charge of an admitted request; the caller passes it back on completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    /// Operation class.
    pub kind: IoKind,
    /// Length in bytes.
    pub len: u64,
    /// Local vtime charged (0 when QoS is disabled or the request is free).
    pub cost: u64,
    /// Absolute (device-time) cost of the request, vtime units.
    pub abs_cost: u64,
    /// Counted in a background volume's device time in flight (design §13).
    pub background: bool,
    /// Priced as sequential (near where the volume's previous request ended).
    pub seq: bool,
}

/// When an admitted request passed each stage, in ns on the QoS clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// Arrived: popped from the virtqueue (any wait in the daemon starts here).
    pub arrived_ns: u64,
    /// Admitted (any throttling wait ends here).
    pub admitted_ns: u64,
    /// Got a device slot and was submitted (device-queue wait ends here).
    pub submitted_ns: u64,
    /// The device completed it.
    pub completed_ns: u64,
}

/// The issue decision. Generic so that the data path's seam (`backend::admission`) can
/// carry its own ticket type; the QoS core answers with a [`Charge`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<T = Charge> {
    /// Submit now; the cost has been committed. Hand the ticket back on completion.
    Go(T),
    /// Not yet: park the request and offer it again at (or after) `until_ns` on the QoS
    /// clock. Nothing has been charged.
    Wait {
        /// Earliest useful time to retry, ns.
        until_ns: u64,
    },
}
