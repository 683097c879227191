//! The data path's whole view of the QoS core: price and admit a request, report its
//! completion. Everything else (weights, vtime, the planner) stays behind this trait, so
//! the data path can run without QoS and the QoS core can be tested without a data path.
//! The request description ([`IoRequest`]) is the QoS core's own plain-data type.

pub use crate::qos::{IoKind, IoRequest};

/// The answer to "may this request go to the device now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision<T> {
    /// Issue now; the cost is already charged. Hand the ticket back on completion.
    Go(T),
    /// Not yet: ask again for the same request at (or after) this monotonic time.
    WaitUntil { ns: u64 },
}

/// When a request passed each stage, in monotonic nanoseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Admitted by QoS (throttled time ends here).
    pub admitted_ns: u64,
    /// Got a device slot and was submitted (device-queue wait ends here).
    pub submitted_ns: u64,
    /// The device completed it.
    pub completed_ns: u64,
}

/// Admission control for one volume. Called only from that volume's worker thread, in FIFO
/// order: after a `WaitUntil`, the same request is offered again before any later one.
pub trait Admission: Send + Sync + 'static {
    type Ticket: Copy + Send + 'static;
    /// The clock `Decision::WaitUntil` and `Timing` are expressed in.
    fn now_ns(&self) -> u64;
    fn admit(&self, io: &IoRequest) -> Decision<Self::Ticket>;
    fn complete(&self, ticket: Self::Ticket, timing: Timing);
    /// The request last told to wait will not be offered again (its queue is being
    /// drained and it goes without admission).
    fn abandon_wait(&self) {}
}

impl<A: Admission> Admission for std::sync::Arc<A> {
    type Ticket = A::Ticket;
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn admit(&self, io: &IoRequest) -> Decision<A::Ticket> {
        (**self).admit(io)
    }
    fn complete(&self, ticket: A::Ticket, timing: Timing) {
        (**self).complete(ticket, timing)
    }
    fn abandon_wait(&self) {
        (**self).abandon_wait()
    }
}

/// The QoS core behind the data path's interface.
impl Admission for crate::qos::VolumeQos {
    type Ticket = crate::qos::Charge;
    fn now_ns(&self) -> u64 {
        self.dev.clock.now_ns()
    }
    fn admit(&self, io: &IoRequest) -> Decision<crate::qos::Charge> {
        match crate::qos::VolumeQos::admit(self, io) {
            crate::qos::Admission::Go(charge) => Decision::Go(charge),
            crate::qos::Admission::Wait { until_ns } => Decision::WaitUntil { ns: until_ns },
        }
    }
    fn complete(&self, charge: crate::qos::Charge, t: Timing) {
        crate::qos::VolumeQos::complete(
            self,
            &charge,
            t.admitted_ns,
            t.submitted_ns,
            t.completed_ns,
        )
    }
    fn abandon_wait(&self) {
        self.cancel_wait()
    }
}
