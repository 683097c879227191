//! The device's global virtual clock ("vnow").
//!
//! vnow advances at `rate` (the base vrate) vtime units per wall µs from the start of the current
//! planning period: `vnow = period_at_vtime + (now - period_at) · rate`. At 100 % vrate
//! one wall second adds 2^37 units, i.e. one second of modelled device time. A rate of
//! 150 % hands out 1.5× the budget the model says the device can do.
//!
//! The three values must be read as a consistent triple while the planner replaces them,
//! so they sit behind a sequence lock (the kernel uses a seqcount for the same pair).
//! Readers never block and never take a lock: this is read on every request.
//!
//! Deviation: the kernel computes vnow from µs; this uses ns (`rate · ns / 1000`) so that
//! short simulated intervals do not lose up to 1 µs of vtime per request.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A consistent snapshot of both clocks, taken once per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Wall time, ns.
    pub now_ns: u64,
    /// Global vtime at `now_ns`.
    pub vnow: u64,
}

/// The seqlock-protected period origin and rate.
#[derive(Debug)]
pub(crate) struct VClock {
    seq: AtomicU64,
    period_at_ns: AtomicU64,
    period_at_vtime: AtomicU64,
    rate: AtomicU64,
}

/// vtime advanced over `elapsed_ns` at `rate` vtime units per µs.
fn advance(elapsed_ns: u64, rate: u64) -> u64 {
    match elapsed_ns.checked_mul(rate) {
        Some(p) => p / 1000,
        None => (u128::from(elapsed_ns) * u128::from(rate) / 1000) as u64, // wraps like vtime
    }
}

impl VClock {
    pub(crate) fn new(now_ns: u64, rate: u64) -> Self {
        VClock {
            seq: AtomicU64::new(0),
            period_at_ns: AtomicU64::new(now_ns),
            period_at_vtime: AtomicU64::new(0),
            rate: AtomicU64::new(rate),
        }
    }

    /// `(period_at_ns, period_at_vtime, rate)`, consistent.
    pub(crate) fn read(&self) -> (u64, u64, u64) {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let pa = self.period_at_ns.load(Ordering::Relaxed);
            let pav = self.period_at_vtime.load(Ordering::Relaxed);
            let rate = self.rate.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return (pa, pav, rate);
            }
        }
    }

    /// Global vtime at wall time `now_ns`.
    pub(crate) fn vnow_at(&self, now_ns: u64) -> u64 {
        let (pa, pav, rate) = self.read();
        pav.wrapping_add(advance(now_ns.saturating_sub(pa), rate))
    }

    /// Replace the triple. Only called with the device lock held (one writer at a time).
    pub(crate) fn set(&self, period_at_ns: u64, period_at_vtime: u64, rate: u64) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.period_at_ns.store(period_at_ns, Ordering::Relaxed);
        self.period_at_vtime
            .store(period_at_vtime, Ordering::Relaxed);
        self.rate.store(rate, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vtime::{VTIME_PER_SEC, VTIME_PER_USEC};

    #[test]
    fn advances_at_rate_and_rebases() {
        let c = VClock::new(1_000, VTIME_PER_USEC);
        assert_eq!(c.vnow_at(1_000), 0);
        assert_eq!(c.vnow_at(1_000 + 1_000_000_000), VTIME_PER_USEC * 1_000_000);
        assert!(VTIME_PER_SEC - c.vnow_at(1_000 + 1_000_000_000) < 1_000_000);
        c.set(2_000, 500, 2 * VTIME_PER_USEC);
        assert_eq!(c.vnow_at(3_000), 500 + 2 * VTIME_PER_USEC);
        assert_eq!(c.vnow_at(1_500), 500, "reads before the origin clamp to it");
        // Very long idle gaps at the maximum rate do not overflow.
        let _ = c.vnow_at(u64::MAX);
    }
}
