//! Inflight I/O tracking (`VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD`): a log of the requests
//! each queue has popped and not yet returned, kept in memory the frontend holds across a
//! restart of the daemon, so that a daemon killed at any instruction resumes every queue
//! exactly: requests in flight are resubmitted once, in their order, and none the guest
//! already saw is redone.
//!
//! * [`region`]: the shared region (a sealed memfd) a frontend asks for with
//!   GET_INFLIGHT_FD and hands back with SET_INFLIGHT_FD, one log per queue;
//! * [`queue_log`]: one queue's log: marking pops, publishing batches, and recovery.

pub mod queue_log;
pub mod region;

pub use queue_log::QueueLog;
pub use region::Region;
