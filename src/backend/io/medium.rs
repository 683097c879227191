//! What serves a worker's operations, behind one seam: the worker builds the same
//! operation for every device and hands it here to learn what to submit and until when
//! its completion is held.
//!
//! - [`Medium::File`]: the host file or block device; operations go to io_uring as built.
//! - [`Medium::Null`] (`kind = "null"`): nothing is read or written; each operation
//!   completes at once through the engine, so the whole completion path still runs.
//! - [`Medium::Emulated`] (`kind = "emulated"`): the host file, with each completion held
//!   until the emulated disk's clock says it is done.

use super::engine::DeviceOp;
use crate::cost_model::{CostInput, IoKind};
use crate::emulated::EmulatedDisk;
use crate::lock::Locked;
use crate::monotonic::monotonic_now_ns;
use std::sync::{Arc, Mutex};

/// One worker's view of its device.
pub enum Medium {
    File,
    Null,
    Emulated {
        disk: Arc<Mutex<EmulatedDisk>>,
        /// End of this worker's previous request: the emulated disk prices sequential and
        /// random access apart, and sees each worker's requests in order.
        prev_end: Option<u64>,
    },
}

impl Medium {
    /// The medium of a volume whose data lives in a file (`has_file`) or nowhere, on a
    /// device that may be emulated.
    pub fn new(has_file: bool, emulated: Option<&Arc<Mutex<EmulatedDisk>>>) -> Self {
        match (has_file, emulated) {
            (false, _) => Medium::Null,
            (true, Some(disk)) => Medium::Emulated {
                disk: Arc::clone(disk),
                prev_end: None,
            },
            (true, None) => Medium::File,
        }
    }

    /// io_uring entries one operation takes: an emulated one also submits its deadline.
    pub fn entries_per_op(&self) -> u32 {
        match self {
            Medium::Emulated { .. } => 2,
            Medium::File | Medium::Null => 1,
        }
    }

    /// `op` (a `kind` request of `len` bytes at host offset `offset`) as this medium runs
    /// it, and the CLOCK_MONOTONIC time its completion is held until, if any.
    pub fn prepare(
        &mut self,
        op: DeviceOp,
        kind: IoKind,
        offset: u64,
        len: u64,
    ) -> (DeviceOp, Option<u64>) {
        match self {
            Medium::File => (op, None),
            Medium::Null => (DeviceOp::Nop, None),
            Medium::Emulated { disk, prev_end } => {
                let input = CostInput {
                    kind,
                    offset,
                    len,
                    prev_end: *prev_end,
                };
                if kind != IoKind::Flush {
                    *prev_end = Some(offset.saturating_add(len));
                }
                let now = monotonic_now_ns();
                let done_ns = disk.locked().serve(now, &input).done_ns;
                (op, Some(done_ns))
            }
        }
    }
}
