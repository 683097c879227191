//! The data path's whole view of the QoS core (design §8.3): price and admit a request,
//! report its completion. Everything else (weights, vtime, the planner) stays behind this
//! trait, so the data path can run without QoS and the QoS core can be tested without a
//! data path. The request description ([`IoRequest`]) is the QoS core's own plain-data type.
//!
//! [`queue`]: the volume's FIFO in front of admission (only its head is offered;
//! shared with the simulator).

pub(crate) mod queue;

pub use crate::qos::{Decision, IoKind, IoRequest, Timing};

/// Admission control for one volume. Called from one thread at a time (the volume's
/// worker, or with several workers the one holding the volume's admission turn), in FIFO
/// order: after a `Decision::Wait`, the same request is offered again before any later one
/// of that worker's.
/// The worker calls in batches (every request popped on a kick, every completion reaped
/// on a wake-up), so the clock is read once per batch and completions are reported
/// together: at a million requests per second every nanosecond here shows.
pub trait Admission: Send + Sync + 'static {
    type Ticket: Copy + Send + 'static;
    /// The clock `Decision::Wait` and `Timing` are expressed in.
    fn now_ns(&self) -> u64;
    /// Price and decide `io` at `now_ns`, a reading of [`Admission::now_ns`] taken for
    /// the current batch.
    fn admit(&self, io: &IoRequest, now_ns: u64) -> Decision<Self::Ticket>;
    /// Reports the completions of one batch.
    fn complete(&self, done: &[(Self::Ticket, Timing)]);
    /// The request last told to wait will not be offered again (its queue is being
    /// drained and it goes without admission).
    fn abandon_wait(&self) {}
    /// Whether a request of `kind` told to wait may be passed by the requests behind it
    /// (its operation has caps of its own); otherwise a waiting head holds the rest.
    fn may_pass(&self, _kind: IoKind) -> bool {
        false
    }
}

impl<A: Admission> Admission for std::sync::Arc<A> {
    type Ticket = A::Ticket;
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn admit(&self, io: &IoRequest, now_ns: u64) -> Decision<A::Ticket> {
        (**self).admit(io, now_ns)
    }
    fn complete(&self, done: &[(A::Ticket, Timing)]) {
        (**self).complete(done)
    }
    fn abandon_wait(&self) {
        (**self).abandon_wait()
    }
    fn may_pass(&self, kind: IoKind) -> bool {
        (**self).may_pass(kind)
    }
}

/// The QoS core behind the data path's interface.
impl Admission for crate::qos::VolumeQos {
    type Ticket = crate::qos::Charge;
    fn now_ns(&self) -> u64 {
        self.dev.clock.now_ns()
    }
    fn admit(&self, io: &IoRequest, now_ns: u64) -> Decision<crate::qos::Charge> {
        self.admit_at(io, now_ns)
    }
    fn complete(&self, done: &[(crate::qos::Charge, Timing)]) {
        self.complete_batch(done)
    }
    fn abandon_wait(&self) {
        self.cancel_wait()
    }
    fn may_pass(&self, kind: IoKind) -> bool {
        crate::qos::VolumeQos::may_pass(self, kind)
    }
}
