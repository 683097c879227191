//! The data path's whole view of the QoS core: price and admit a request, report its
//! completion. Everything else (weights, vtime, the planner) stays behind this trait, so
//! the data path can run without QoS and the QoS core can be tested without a data path.

/// What kind of work a request asks of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoClass {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
}

/// A request as the QoS core sees it: offsets in bytes within the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoDesc {
    pub class: IoClass,
    pub offset: u64,
    pub len: u64,
}

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
    fn admit(&self, io: &IoDesc, now_ns: u64) -> Decision<Self::Ticket>;
    fn complete(&self, io: &IoDesc, ticket: Self::Ticket, timing: Timing);
}

/// No QoS: every request goes at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unlimited;

impl Admission for Unlimited {
    type Ticket = ();
    fn admit(&self, _io: &IoDesc, _now_ns: u64) -> Decision<()> {
        Decision::Go(())
    }
    fn complete(&self, _io: &IoDesc, _ticket: (), _timing: Timing) {}
}

impl<A: Admission> Admission for std::sync::Arc<A> {
    type Ticket = A::Ticket;
    fn admit(&self, io: &IoDesc, now_ns: u64) -> Decision<A::Ticket> {
        (**self).admit(io, now_ns)
    }
    fn complete(&self, io: &IoDesc, ticket: A::Ticket, timing: Timing) {
        (**self).complete(io, ticket, timing)
    }
}

/// Monotonic nanoseconds (CLOCK_MONOTONIC), the data path's clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
