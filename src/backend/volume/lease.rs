//! Which of a volume's connections may use its rings (design §8.9).
//!
//! A volume takes a second frontend on its hand-over socket, so that a migration's
//! destination QEMU on the same host can attach while the source is still connected. Two
//! connections must never serve the guest's rings at once: the volume's QoS state and the
//! guest's own ordering assume one frontend. The lease is that rule. A connection's worker
//! takes it when one of its rings is first ready and kicked, and gives it back once every
//! ring it served has been stopped (GET_VRING_BASE, after which its requests are all
//! answered), or when the connection ends. A worker kicked while the other holds the lease
//! remembers the kick and is woken when the lease comes free. A connection with several
//! workers (`workers`) holds the lease while any of them serves a ring
//! ([`ConnectionLease`]).
//!
//! With QEMU the lease is never contended: the source stops its rings before the
//! destination starts its own. It turns a mistake (a stale source resumed after its
//! destination took over) into waiting rather than two writers.

use crate::lock::Locked;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vmm_sys_util::eventfd::EventFd;

/// A connection's identity in its volume's lease (never 0, which means "free").
pub type Holder = u64;

#[derive(Default)]
pub struct DataPlaneLease {
    holder: AtomicU64,
    last_id: AtomicU64,
    /// Every connection of the volume, with the eventfds that wake its workers.
    peers: Mutex<Vec<(Holder, Arc<EventFd>)>>,
}

impl DataPlaneLease {
    /// A new connection, whose workers are woken through `wakes` when the lease comes free.
    pub fn join(&self, wakes: &[Arc<EventFd>]) -> Holder {
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock()
            .extend(wakes.iter().map(|wake| (id, wake.clone())));
        id
    }

    /// The connection is over: it gives the lease back if it held it.
    pub fn leave(&self, id: Holder) {
        self.release(id);
        self.lock().retain(|(peer, _)| *peer != id);
    }

    /// Takes the lease for `id`; true if `id` holds it now.
    pub fn try_hold(&self, id: Holder) -> bool {
        match self
            .holder
            .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(current) => current == id,
        }
    }

    /// Gives the lease back if `id` holds it, and wakes the other connections.
    pub fn release(&self, id: Holder) {
        if self
            .holder
            .compare_exchange(id, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            for (peer, wake) in self.lock().iter() {
                if *peer != id {
                    let _ = wake.write(1);
                }
            }
        }
    }

    /// The connection holding the lease, 0 when free.
    #[cfg(test)]
    fn holder(&self) -> Holder {
        self.holder.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Holder, Arc<EventFd>)>> {
        self.peers.locked()
    }
}

/// One connection's part in its volume's lease, shared by the connection's workers: the
/// connection holds the lease while any of them serves a ring, and leaves it when the
/// last of them is gone.
pub struct ConnectionLease {
    lease: Arc<DataPlaneLease>,
    id: Holder,
    /// Workers serving a ring now. Changed under the lock, so that one worker's release
    /// cannot cross another's start.
    serving_workers: Mutex<u32>,
}

impl ConnectionLease {
    pub fn join(lease: Arc<DataPlaneLease>, wakes: &[Arc<EventFd>]) -> Self {
        let id = lease.join(wakes);
        ConnectionLease {
            lease,
            id,
            serving_workers: Mutex::new(0),
        }
    }

    /// A worker starts serving rings: true if the connection holds the lease (it takes
    /// it if free).
    pub fn start_serving(&self) -> bool {
        let mut serving = self.lock();
        if *serving == 0 && !self.lease.try_hold(self.id) {
            return false;
        }
        *serving += 1;
        true
    }

    /// A worker serves no ring any more: the last one gives the lease back.
    pub fn stop_serving(&self) {
        let mut serving = self.lock();
        debug_assert!(
            *serving > 0,
            "a worker stopped serving more often than it started"
        );
        *serving = serving.saturating_sub(1);
        if *serving == 0 {
            self.lease.release(self.id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u32> {
        self.serving_workers.locked()
    }
}

impl Drop for ConnectionLease {
    fn drop(&mut self) {
        self.lease.leave(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> Arc<EventFd> {
        Arc::new(EventFd::new(libc::EFD_NONBLOCK).unwrap())
    }

    #[test]
    fn one_holder_at_a_time_and_the_other_is_woken_on_release() {
        let lease = DataPlaneLease::default();
        let (wake_a, wake_b) = (eventfd(), eventfd());
        let a = lease.join(std::slice::from_ref(&wake_a));
        let b = lease.join(std::slice::from_ref(&wake_b));
        assert_ne!(a, b);
        assert!(lease.try_hold(a));
        assert!(lease.try_hold(a), "holding again is a no-op");
        assert!(!lease.try_hold(b));
        lease.release(b);
        assert_eq!(lease.holder(), a, "only the holder releases");
        assert!(wake_b.read().is_err(), "nothing to wake for yet");
        lease.release(a);
        assert_eq!(wake_b.read().unwrap(), 1, "b is woken");
        assert!(wake_a.read().is_err(), "the releaser is not");
        assert!(lease.try_hold(b));
    }

    #[test]
    fn leaving_gives_the_lease_back() {
        let lease = DataPlaneLease::default();
        let wake_b = eventfd();
        let a = lease.join(&[eventfd()]);
        let b = lease.join(std::slice::from_ref(&wake_b));
        assert!(lease.try_hold(a));
        lease.leave(a);
        assert_eq!(lease.holder(), 0);
        assert_eq!(wake_b.read().unwrap(), 1);
        lease.leave(b);
        assert!(lease.lock().is_empty());
    }

    #[test]
    fn a_connection_holds_the_lease_while_any_of_its_workers_serves() {
        let lease = Arc::new(DataPlaneLease::default());
        let (wake_1, wake_2, wake_other) = (eventfd(), eventfd(), eventfd());
        let connection = ConnectionLease::join(lease.clone(), &[wake_1.clone(), wake_2.clone()]);
        let other = ConnectionLease::join(lease.clone(), std::slice::from_ref(&wake_other));
        assert!(connection.start_serving());
        assert!(
            connection.start_serving(),
            "its second worker shares the lease"
        );
        assert!(!other.start_serving());
        connection.stop_serving();
        assert!(!other.start_serving(), "one worker still serves");
        assert!(wake_other.read().is_err());
        connection.stop_serving();
        assert_eq!(
            wake_other.read().unwrap(),
            1,
            "the other connection is woken"
        );
        assert!(other.start_serving());
        assert!(!connection.start_serving());
        drop(other);
        assert_eq!(
            wake_1.read().unwrap(),
            1,
            "leaving wakes every worker of the rest"
        );
        assert_eq!(wake_2.read().unwrap(), 1);
        assert!(connection.start_serving());
        drop(connection);
        assert!(lease.lock().is_empty());
    }
}
