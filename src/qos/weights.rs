//! Weights and hierarchical weights (design §4.1 - §4.4).
//!
//! Every node of the tree has a configured `weight` and, while it has IO to do, an
//! `active` weight (= weight) and an `inuse` weight (≤ active). Weights only mean
//! something among *active* siblings: a node's hierarchical weight ("hweight") is the
//! product, from the root down, of its share of its parent's active children:
//!
//! ```text
//!   root ─ A(100) ─ A0(100)      hweight(A0) = 100/400 · 100/200 = 12.5 %
//!        │        └ A1(100)
//!        └ B(300)                hweight(B)  = 300/400            = 75 %
//! ```
//!
//! `hweight_active` (from `active`) is a node's fair share. `hweight_inuse` (from
//! `inuse`) is what it is actually charged against: a node that does not use its share
//! lowers its `inuse` (it *donates*), which raises everyone else's `hweight_inuse`.
//!
//! Weights change only under the device lock, but the issue path reads them without any
//! lock, so every field is an atomic. A change of any weight bumps the device's
//! generation number; each volume caches its hweights together with the generation they
//! were computed for and recomputes them lazily when the generation moved on. All
//! weights are fixed point with [`WEIGHT_ONE`] = 1.0.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::vtime::{cdiv_mul, mul_div, WEIGHT_ONE};

/// Smallest user weight.
pub const WEIGHT_MIN: u32 = 1;
/// Default user weight.
pub const WEIGHT_DEFAULT: u32 = 100;
/// Largest user weight.
pub const WEIGHT_MAX: u32 = 10_000;

/// A user weight outside `WEIGHT_MIN..=WEIGHT_MAX`. Its message follows the name of the
/// field or node the caller puts before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be within {WEIGHT_MIN}..={WEIGHT_MAX} (got {0})")]
pub struct WeightOutOfRange(pub u32);

/// The one check of a user weight (config, control API and the QoS tree alike).
pub fn check_weight(weight: u32) -> Result<(), WeightOutOfRange> {
    if (WEIGHT_MIN..=WEIGHT_MAX).contains(&weight) {
        Ok(())
    } else {
        Err(WeightOutOfRange(weight))
    }
}

/// The weights of one tree node. Written under the device lock, read anywhere.
#[derive(Debug, Default)]
pub(crate) struct NodeWeights {
    /// The user's weight, 1..=10000.
    pub configured: AtomicU32,
    /// The weight the node competes with, × W: the configured weight, reduced for a
    /// background volume (`tree::background_weight`).
    pub weight: AtomicU32,
    /// `weight` while the node is active, else 0.
    pub active: AtomicU32,
    /// The weight the node is charged against (≤ active).
    pub inuse: AtomicU32,
    /// Σ `active` of the children.
    pub child_active_sum: AtomicU64,
    /// Σ `inuse` of the children.
    pub child_inuse_sum: AtomicU64,
}

impl NodeWeights {
    pub(crate) fn new(user_weight: u32) -> Self {
        let w = NodeWeights::default();
        w.configured.store(user_weight, Relaxed);
        w.weight.store(user_weight * WEIGHT_ONE, Relaxed);
        w
    }
}

/// `(hweight_active, hweight_inuse)` of the last node of `path` (root first), computed
/// top-down from the current weights (design §4.2). Lock-free; a racing (de)activation can
/// make one computation slightly off, which the next generation corrects.
pub(crate) fn compute_hweights(path: &[Arc<NodeWeights>]) -> (u32, u32) {
    let one = u64::from(WEIGHT_ONE);
    let (mut hwa, mut hwi) = (one, one);
    for pair in path.windows(2) {
        let (p, c) = (&pair[0], &pair[1]);
        let asum = p.child_active_sum.load(Relaxed);
        let isum = p.child_inuse_sum.load(Relaxed);
        if asum == 0 || isum == 0 {
            continue; // racing (de)activation
        }
        let ca = u64::from(c.active.load(Relaxed));
        let ci = u64::from(c.inuse.load(Relaxed));
        hwa = hwa * ca / asum.max(ca);
        hwi = hwi * ci / isum.max(ci);
    }
    (hwa.max(1) as u32, hwi.max(1) as u32)
}

/// The hweight_inuse the last node of `path` would have if its own `inuse` were raised
/// to its `active`, everything else unchanged (design §4.4).
pub(crate) fn compute_hweight_max(path: &[Arc<NodeWeights>]) -> u32 {
    let Some(me) = path.last() else {
        return WEIGHT_ONE;
    };
    let mut hwm = u64::from(WEIGHT_ONE);
    let mut inuse = u64::from(me.active.load(Relaxed));
    for pair in path.windows(2).rev() {
        let (p, c) = (&pair[0], &pair[1]);
        let cis = p
            .child_inuse_sum
            .load(Relaxed)
            .saturating_add(inuse)
            .saturating_sub(u64::from(c.inuse.load(Relaxed)));
        if cis == 0 {
            return 1;
        }
        hwm = mul_div(hwm, inuse, cis);
        let pas = p.child_active_sum.load(Relaxed);
        inuse = cdiv_mul(u64::from(p.active.load(Relaxed)), cis, pas.max(1));
    }
    (hwm.min(u64::from(WEIGHT_ONE)) as u32).max(1)
}

/// Pack a generation and both hweights into one word for the per-volume cache, so the
/// issue path reads a consistent triple with one atomic load. hweights are 1..=65536 and
/// stored minus one in 16 bits each.
pub(crate) fn pack_cache(gen: u32, hwa: u32, hwi: u32) -> u64 {
    let a = u64::from(hwa.clamp(1, WEIGHT_ONE) - 1);
    let i = u64::from(hwi.clamp(1, WEIGHT_ONE) - 1);
    (u64::from(gen) << 32) | (a << 16) | i
}

/// Inverse of [`pack_cache`]: `(gen, hwa, hwi)`.
pub(crate) fn unpack_cache(word: u64) -> (u32, u32, u32) {
    (
        (word >> 32) as u32,
        ((word >> 16) & 0xffff) as u32 + 1,
        (word & 0xffff) as u32 + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_packing_round_trips() {
        for (g, a, i) in [(0, 1, 1), (7, 65_536, 1), (u32::MAX, 8_192, 65_536)] {
            assert_eq!(unpack_cache(pack_cache(g, a, i)), (g, a, i));
        }
    }
}
