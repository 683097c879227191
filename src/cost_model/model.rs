//! The cost-model interface: what the QoS core asks a model, and what it gets back.
//!
//! A model turns one request into an *absolute cost*: the device time the request is
//! expected to occupy at 100 % device speed, in vtime units (see [`super::vtime`]). It is
//! occupancy, not latency: "20 ms of cost" means the device can do 50 such requests per
//! second. The linear model of Linux ([`super::LinearModel`]) is the default; other models
//! (learned, table driven, ...) implement the same trait.

use serde::{Deserialize, Serialize};

/// The operation class of a request, as the QoS core sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoKind {
    /// virtio-blk `T_IN`.
    Read,
    /// virtio-blk `T_OUT`.
    Write,
    /// virtio-blk `T_FLUSH`.
    Flush,
    /// virtio-blk `T_DISCARD`.
    Discard,
    /// virtio-blk `T_WRITE_ZEROES`.
    WriteZeroes,
}

impl IoKind {
    /// Reads and writes feed the latency QoS signal; other kinds do not (design §3.7).
    pub fn is_data(self) -> bool {
        matches!(self, IoKind::Read | IoKind::Write)
    }
}

/// Everything a model may look at to price one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostInput {
    /// Operation class.
    pub kind: IoKind,
    /// Byte offset within the volume.
    pub offset: u64,
    /// Length in bytes (0 for a flush).
    pub len: u64,
    /// Byte offset where the volume's previous request ended, if there was one.
    /// The model uses it to tell sequential from random access.
    pub prev_end: Option<u64>,
}

/// A device cost model. Implementations must be cheap (called on every request) and
/// must not panic on any input: lengths and offsets come from untrusted guests.
pub trait CostModel: Send + Sync + std::fmt::Debug {
    /// Absolute cost of the request in vtime units. 0 means "free and unthrottled".
    fn abs_cost(&self, input: &CostInput) -> u64;

    /// The size-proportional part of the cost of a read or write (transfer time), used
    /// to credit large requests in the latency QoS check (design §2.1 "size cost").
    fn size_cost(&self, kind: IoKind, len: u64) -> u64;

    /// Default completion-latency target (µs) for this kind of device, used when the QoS
    /// configuration does not give one (design §2.4: HDD 250 ms, SSD 25 ms, fast SSD 5 ms).
    fn default_latency_us(&self) -> u32 {
        25_000
    }
}
