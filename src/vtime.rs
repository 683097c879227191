//! Virtual time ("vtime") units and the integer helpers every QoS computation uses.
//!
//! One second of device time at 100 % device speed is `2^37` vtime units, so one µs is
//! 137 438 units and one ns 137 units (design §1.3). Costs, budgets and the device's
//! global clock are all expressed in this unit. vtime is a `u64` that wraps (after about
//! 4.25 years at 100 % vrate, about 15 days at 10 000 %), so ordering must always use the
//! wrapping helpers [`after`], [`before`] and [`before_eq`], never `<`.
//!
//! Weights and hierarchical weights are fixed-point fractions of [`WEIGHT_ONE`] (= 1.0).
//! Every product that can exceed 64 bits (`x * W`, `x * hw`, `x * vrate`) goes through
//! `u128`, and every ceiling division of the kernel is kept: rounding costs up prevents free
//! IO.

/// 10^6, the ppm base.
pub const MILLION: u64 = 1_000_000;
/// log2 of [`VTIME_PER_SEC`].
pub const VTIME_PER_SEC_SHIFT: u32 = 37;
/// vtime units in one second of device time at 100 % vrate.
pub const VTIME_PER_SEC: u64 = 1 << VTIME_PER_SEC_SHIFT;
/// vtime units per µs; also the vrate that means "100 %".
pub const VTIME_PER_USEC: u64 = VTIME_PER_SEC / 1_000_000;
/// vtime units per ns (truncated, as in the kernel).
pub const VTIME_PER_NSEC: u64 = VTIME_PER_SEC / 1_000_000_000;
/// Fixed-point 1.0 for weights and hweights.
pub const WEIGHT_ONE: u32 = 1 << 16;

/// Largest absolute cost one request may be charged (1000 s of device time). A guest can
/// ask for a multi-terabyte discard; capping keeps every later `vtime + cost` far away
/// from the 2^63 limit of the wrapping comparisons.
pub const MAX_ABS_COST: u64 = 1000 * VTIME_PER_SEC;
/// Largest local (hweight-scaled) cost, for the same reason.
pub const MAX_LOCAL_COST: u64 = 1 << 61;

/// Ceiling division on u64. Division by zero saturates to `u64::MAX` instead of panicking;
/// callers never divide by zero on purpose, this only keeps hostile inputs harmless.
#[inline]
pub fn cdiv(a: u64, b: u64) -> u64 {
    if b == 0 {
        return u64::MAX;
    }
    a / b + u64::from(a % b != 0)
}

/// Ceiling division on u128, saturating into u64.
#[inline]
pub fn cdiv_wide(a: u128, b: u128) -> u64 {
    if b == 0 {
        return u64::MAX;
    }
    let q = a / b + u128::from(a % b != 0);
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// `⌈a · b / c⌉`, in u64 when the product fits (the common case: u128 division is a
/// slow library call) and through u128 otherwise; saturating, `c == 0` gives `u64::MAX`.
#[inline]
pub fn cdiv_mul(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => cdiv(p, c),
        None => cdiv_wide(u128::from(a) * u128::from(b), u128::from(c)),
    }
}

/// Truncating `a * b / c` through u128, saturating into u64 (`c == 0` gives `u64::MAX`).
#[inline]
pub fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    if c == 0 {
        return u64::MAX;
    }
    if let Some(p) = a.checked_mul(b) {
        return p / c;
    }
    u64::try_from(u128::from(a) * u128::from(b) / u128::from(c)).unwrap_or(u64::MAX)
}

/// `a` is later than `b` on the wrapping vtime axis.
#[inline]
pub fn after(a: u64, b: u64) -> bool {
    (b.wrapping_sub(a) as i64) < 0
}

/// `a` is earlier than `b` on the wrapping vtime axis.
#[inline]
pub fn before(a: u64, b: u64) -> bool {
    after(b, a)
}

/// `a` is earlier than or equal to `b` on the wrapping vtime axis.
#[inline]
pub fn before_eq(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) <= 0
}

/// Signed distance `a - b` on the wrapping vtime axis.
#[inline]
pub fn vdiff(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

/// Local vtime a group with hierarchical share `hw` must spend for an absolute cost
/// (design §3.2): `⌈abs · W / hw⌉`, capped at [`MAX_LOCAL_COST`].
#[inline]
pub fn abs_cost_to_cost(abs: u64, hw: u32) -> u64 {
    let hw = hw.max(1);
    cdiv_wide(u128::from(abs) * u128::from(WEIGHT_ONE), u128::from(hw)).min(MAX_LOCAL_COST)
}

/// Absolute cost of a local cost at hierarchical share `hw`: `⌈cost · hw / W⌉`.
#[inline]
pub fn cost_to_abs_cost(cost: u64, hw: u32) -> u64 {
    cdiv_wide(u128::from(cost) * u128::from(hw), u128::from(WEIGHT_ONE))
}

/// Device nanoseconds represented by an absolute cost at 100 % vrate.
#[inline]
pub fn vtime_to_ns(vtime: u64) -> u64 {
    mul_div(vtime, 1_000_000_000, VTIME_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_spec() {
        assert_eq!(VTIME_PER_SEC, 137_438_953_472);
        assert_eq!(VTIME_PER_USEC, 137_438);
        assert_eq!(VTIME_PER_NSEC, 137);
        assert_eq!(WEIGHT_ONE, 65_536);
    }

    #[test]
    fn wrapping_comparisons() {
        assert!(after(5, 3));
        assert!(!after(3, 5));
        assert!(after(2, u64::MAX - 3)); // wrapped
        assert!(before(u64::MAX - 3, 2));
        assert!(before_eq(7, 7));
        assert_eq!(vdiff(2, u64::MAX), 3);
    }

    #[test]
    fn conversions_round_up_and_never_panic() {
        assert_eq!(abs_cost_to_cost(100, WEIGHT_ONE), 100);
        assert_eq!(abs_cost_to_cost(100, WEIGHT_ONE / 3), 301); // 300.0006 -> 301
        assert_eq!(abs_cost_to_cost(u64::MAX, 0), MAX_LOCAL_COST);
        assert_eq!(cost_to_abs_cost(301, WEIGHT_ONE / 3), 101);
        assert_eq!(cdiv(1, 0), u64::MAX);
        assert_eq!(mul_div(u64::MAX, u64::MAX, 1), u64::MAX);
    }
}
