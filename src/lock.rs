//! Poison-tolerant locking, the one way this crate takes a lock.
//!
//! A panic in one thread must not stop every other user of what it held: the daemon
//! serves many volumes, and one volume's bug must not wedge the rest. Every holder keeps
//! its data consistent at each point where it could panic, so a poisoned lock is taken as
//! it is.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], poison or not.
pub trait Locked<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// [`RwLock::read`] and [`RwLock::write`], poison or not.
pub trait RwLocked<T: ?Sized> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T>;
    fn write_locked(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLocked<T> for RwLock<T> {
    fn read_locked(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_locked(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_as_it_is() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let r = std::sync::Arc::new(RwLock::new(2));
        let (m2, r2) = (m.clone(), r.clone());
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            let _w = r2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(m.is_poisoned() && r.is_poisoned());
        *m.locked() += 1;
        *r.write_locked() += 1;
        assert_eq!((*m.locked(), *r.read_locked()), (2, 3));
    }
}
