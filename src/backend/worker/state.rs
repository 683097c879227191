//! A worker's state: what its event loop keeps between events, and the types it holds.
//! The methods are by concern in the files beside it.

use std::sync::Arc;

use vhost_user_backend::VringRwLock;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

use super::early_return::EarlyReturn;
use super::inflight_log::QueueLogs;
use super::poll_window::PollWindow;
use super::records::Records;
use crate::backend::admission::queue::{AdmitQueue, Parked, WaitDeadline};
use crate::backend::admission::{Admission, Timing};
use crate::backend::guest_memory::{CurrentMemory, Mem};
use crate::backend::io::engine::Engine;
use crate::backend::io::medium::Medium;
use crate::backend::virtio::request::{ChainLayout, RequestKind, Segment};
use crate::backend::volume::lease::ConnectionLease;
use crate::backend::volume::Volume;
use crate::logging::LogLimiter;

pub type Vring = VringRwLock<vm_memory::GuestMemoryAtomic<Mem>>;

/// A validated request as popped: where it came from, what starting it needs beyond the
/// [`Parked::io`] it waits with (its offset and length), and the guest memory it points
/// into. Small enough (with the rest of `Parked`) that moving it between the FIFO and
/// the device is copied inline rather than through a memcpy call.
pub(super) struct Popped {
    pub(super) queue: u16,
    pub(super) head: u16,
    pub(super) kind: RequestKind,
    pub(super) data: Vec<Segment>,
    pub(super) status_addr: u64,
    pub(super) mem: Arc<Mem>,
}

// Up to 128 bytes, x86-64 builds copy it inline; past that each move between the FIFO and
// the start was a memcpy call (design §8.12).
const _: () = assert!(std::mem::size_of::<Parked<Popped, crate::qos::Charge>>() <= 128);

/// Which guest queues a worker serves: the crate numbers a worker's vrings from 0, and
/// its `i`-th is guest queue `first + i * stride`.
#[derive(Clone, Copy, Debug)]
pub struct QueueNumbers {
    pub first: u16,
    pub stride: u16,
}

impl QueueNumbers {
    /// This worker's guest queues among the first `num_queues`, a bit per queue.
    pub fn mask(self, num_queues: u16) -> u64 {
        (self.first..num_queues.min(64))
            .step_by(usize::from(self.stride.max(1)))
            .fold(0, |mask, q| mask | 1 << q)
    }
}

pub struct Worker<A: Admission> {
    pub(super) volume: Arc<Volume<A>>,
    /// Queue numbers below are this worker's own (its vrings); logs give the guest's.
    pub(super) queues: QueueNumbers,
    pub(super) engine: Engine,
    pub timer: TimerFd,
    pub(super) timer_deadline: WaitDeadline,
    pub wake_evt: Arc<EventFd>,
    pub(super) waiting_for_slot: bool,
    /// The frontend acked LOG_ALL (a migration): reads log the guest pages they wrote.
    pub dirty_logging: bool,
    /// This connection in the volume's data-plane lease ([`crate::backend::volume::lease`]).
    pub(super) lease: Arc<ConnectionLease>,
    /// Queues served (kicked while ready) since they were last stopped: the connection
    /// holds the lease while any worker's is not empty.
    pub(super) serving: u64,
    /// Queues kicked while the volume's other connection held the lease, popped when it
    /// comes free.
    pub(super) deferred: u64,
    /// A kick waited for the other connection's rings since this one last served.
    pub(super) waited_for_rings: bool,
    pub(super) fifo: AdmitQueue<Popped, A::Ticket>,
    /// The requests on the device.
    pub(super) records: Records<A::Ticket>,
    /// The vrings of this connection, captured from the first event (for `drain`, which
    /// runs outside the event loop).
    pub(super) vrings: Vec<Vring>,
    /// Vrings with new used entries since the last notification (bit per queue).
    pub(super) touched: u64,
    /// Queues being stopped: no more pops, parked requests go without waiting.
    pub(super) stopping: u64,
    /// Set by a shutdown drain: a later GET_VRING_BASE must not re-enable popping.
    pub(super) shutting_down: bool,
    /// Queues whose guest broke the ring protocol (an avail index that cannot be right,
    /// or more chains outstanding than the ring holds): not served until restarted.
    pub(super) broken: u64,
    /// Chains popped from each queue and not yet published on its used ring. A driver can
    /// never have more than the ring size outstanding; this bounds what a guest can make
    /// the worker hold.
    pub(super) outstanding: Vec<u32>,
    pub(super) warn: LogLimiter,
    /// Scratch space reused per request or batch, so the hot path does not allocate:
    /// reaped completions, the heads of the chains popped together, the descriptor layout of the
    /// chain being parsed, and the data segment vectors of started requests.
    pub(super) reaped: Vec<(u64, i32)>,
    pub(super) layout: ChainLayout,
    pub(super) popped_heads: Vec<u16>,
    pub(super) segment_pool: Vec<Vec<Segment>>,
    /// Completions to report to admission control, once per pump (see `settle`).
    pub(super) settled: Vec<(A::Ticket, Timing)>,
    /// What serves this worker's operations (file, null or emulated).
    pub(super) medium: Medium,
    /// Chains popped plus completions reaped, ever: polling's measure of work found.
    pub(super) progress: u64,
    pub(super) poll: PollWindow,
    /// Queues popped from in the current poll phase, their notifications off.
    pub(super) polled_queues: u64,
    /// From which chain of a batch completions go back early.
    pub(super) early_return: EarlyReturn,
    /// Scratch: the requests one dispatch admitted, started once the turn is released.
    pub(super) admitted: Vec<Parked<Popped, A::Ticket>>,
    /// The frontend's memory table, read for every batch popped or published.
    pub(super) memory: CurrentMemory,
    /// Chains returned since the used rings were last published: (queue, head, length).
    pub(super) used: Vec<(u16, u16, u32)>,
    /// Each queue's inflight log, when its frontend keeps one, and the requests a
    /// previous run left in flight, to resubmit before popping ([`inflight_log`]).
    pub(super) logs: QueueLogs,
    /// Scratch: the heads of the used batch being published.
    pub(super) batch_heads: Vec<u16>,
}
