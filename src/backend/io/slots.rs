//! The device-wide in-flight limit (`device.queue_depth`), shared by every volume.
//!
//! A worker that finds no free slot parks its request and registers its wake eventfd;
//! whichever worker frees a slot next wakes the waiters. This is also the "request wait"
//! signal the planner uses to detect a saturated device.

use crate::lock::Locked;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vmm_sys_util::eventfd::EventFd;

pub struct DeviceSlots {
    in_flight: AtomicU32,
    limit: u32,
    waiting: AtomicUsize,
    waiters: Mutex<Vec<Arc<EventFd>>>,
}

impl DeviceSlots {
    pub fn new(limit: u32) -> Self {
        DeviceSlots {
            in_flight: AtomicU32::new(0),
            limit: limit.max(1),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
        }
    }

    pub fn try_acquire(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Registers `wake` to be signalled when a slot frees, then tries once more so that a
    /// release racing with the registration is not lost.
    pub fn acquire_or_wait(&self, wake: &Arc<EventFd>) -> bool {
        let mut waiters = self.waiters.locked();
        if !waiters.iter().any(|w| Arc::ptr_eq(w, wake)) {
            waiters.push(wake.clone());
            self.waiting.fetch_add(1, Ordering::AcqRel);
        }
        drop(waiters);
        self.try_acquire()
    }

    /// Takes a slot even past the limit (draining a stopped queue must not wait).
    pub fn force_acquire(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    pub fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) > 0 {
            let woken = std::mem::take(&mut *self.waiters.locked());
            self.waiting.fetch_sub(woken.len(), Ordering::AcqRel);
            for w in woken {
                let _ = w.write(1);
            }
        }
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_enforced_and_release_wakes_waiters() {
        let slots = DeviceSlots::new(2);
        assert!(slots.try_acquire());
        assert!(slots.try_acquire());
        assert!(!slots.try_acquire());
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK).unwrap());
        assert!(!slots.acquire_or_wait(&wake));
        assert!(wake.read().is_err(), "not signalled yet");
        slots.release();
        assert_eq!(wake.read().unwrap(), 1);
        assert!(slots.try_acquire());
        assert_eq!(slots.in_flight(), 2);
    }
}
