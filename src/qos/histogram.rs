//! A small fixed-size latency histogram (log-linear buckets, µs).
//!
//! Each power of two is split into 8 buckets, so a reported percentile is within 12.5 %
//! of the true value; values from 0 to 2^36 µs (19 h) fit in 272 `u32` counters (about
//! 1 KiB). Small enough to keep three per volume (current period, last period, since
//! start) for ten thousand volumes, cheap enough to record on every completion, and
//! resettable with one `fill(0)`.

const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const MAX_EXP: u32 = 35;
const BUCKETS: usize = SUB + (MAX_EXP as usize - SUB_BITS as usize + 1) * SUB;
const MAX_VALUE: u64 = (1 << (MAX_EXP + 1)) - 1;

/// Latency histogram in µs.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    counts: Box<[u32; BUCKETS]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
        }
    }
}

fn bucket_of(us: u64) -> usize {
    let v = us.min(MAX_VALUE);
    if v < SUB as u64 {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros();
    let mant = (v >> (exp - SUB_BITS)) as usize & (SUB - 1);
    SUB + (exp - SUB_BITS) as usize * SUB + mant
}

/// Midpoint of a bucket's value range.
fn value_of(bucket: usize) -> u64 {
    if bucket < SUB {
        return bucket as u64;
    }
    let exp = ((bucket - SUB) / SUB) as u32 + SUB_BITS;
    let mant = ((bucket - SUB) % SUB) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    ((SUB as u64 + mant) << (exp - SUB_BITS)) + width / 2
}

impl Histogram {
    pub(crate) fn record(&mut self, us: u64) {
        self.record_in(bucket_of(us));
    }

    fn record_in(&mut self, bucket: usize) {
        let b = &mut self.counts[bucket];
        *b = b.saturating_add(1);
        self.total = self.total.saturating_add(1);
    }

    /// Add `other`'s values to this one's.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        if other.total == 0 {
            return;
        }
        for (c, &o) in self.counts.iter_mut().zip(other.counts.iter()) {
            *c = c.saturating_add(o);
        }
        self.total = self.total.saturating_add(other.total);
    }

    pub(crate) fn clear(&mut self) {
        if self.total != 0 {
            self.counts.fill(0);
            self.total = 0;
        }
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.total
    }

    /// The `pct`-th percentile (0..=100) in µs, or None when empty.
    pub(crate) fn percentile(&self, pct: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let want = ((pct.clamp(0.0, 100.0) / 100.0) * self.total as f64)
            .ceil()
            .max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= want {
                return Some(value_of(i));
            }
        }
        Some(value_of(BUCKETS - 1))
    }
}

impl Histogram {
    /// How many values lie in buckets reported above `us` (their midpoint is above it).
    pub(crate) fn count_above(&self, us: u64) -> u64 {
        let first = (bucket_of(us)..BUCKETS)
            .find(|&i| value_of(i) > us)
            .unwrap_or(BUCKETS);
        self.counts[first..].iter().map(|&c| u64::from(c)).sum()
    }

    /// For an exported (Prometheus-style) histogram: the number of values below each of
    /// `bounds_us` (ascending), the approximate sum (bucket midpoints) and the count.
    /// Exact when each bound is a bucket edge (any power of two is one).
    pub(crate) fn cumulative(&self, bounds_us: &[u64]) -> (Vec<u64>, u64, u64) {
        let mut out = vec![0u64; bounds_us.len()];
        let mut sum = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let c = u64::from(c);
            sum = sum.saturating_add(value_of(i).saturating_mul(c));
            let lower = if i < SUB { i as u64 } else { lower_of(i) };
            for (slot, &b) in out.iter_mut().zip(bounds_us) {
                if lower < b {
                    *slot += c;
                }
            }
        }
        (out, sum, self.total)
    }
}

/// Smallest value of a bucket (`i >= SUB`).
fn lower_of(bucket: usize) -> u64 {
    let exp = ((bucket - SUB) / SUB) as u32 + SUB_BITS;
    let mant = ((bucket - SUB) % SUB) as u64;
    (SUB as u64 + mant) << (exp - SUB_BITS)
}

/// Latency of one volume over the current period, the last full period and all time,
/// and, for a latency-class volume, the window its target is judged over, and for a
/// volume under a latency-class group, what it saw since the planner last took it into
/// the group's window.
#[derive(Debug, Default)]
pub(crate) struct LatencyWindows {
    period: u64,
    current: Histogram,
    last: Histogram,
    pub all: Histogram,
    pub target: TargetWindow,
    pub group: TargetWindow,
}

/// What a latency-class volume's requests saw since its target was last judged
/// (`planner::latency_class`): latency in the daemon, arrival to completion, and how much
/// of it was waiting to be admitted and how much on the device.
#[derive(Clone, Debug, Default)]
pub(crate) struct TargetWindow {
    pub total: Histogram,
    pub wait_us: u64,
    pub device_us: u64,
    pub since_ns: u64,
}

impl TargetWindow {
    pub(crate) fn record(&mut self, wait_us: u64, device_us: u64) {
        self.total.record(wait_us + device_us);
        self.wait_us = self.wait_us.saturating_add(wait_us);
        self.device_us = self.device_us.saturating_add(device_us);
    }

    pub(crate) fn count(&self) -> u64 {
        self.total.total
    }

    /// Add what `other` saw (a group's window gathers its volumes').
    pub(crate) fn merge(&mut self, other: &TargetWindow) {
        self.total.merge(&other.total);
        self.wait_us = self.wait_us.saturating_add(other.wait_us);
        self.device_us = self.device_us.saturating_add(other.device_us);
    }

    pub(crate) fn reset(&mut self, now_ns: u64) {
        self.total.clear();
        (self.wait_us, self.device_us, self.since_ns) = (0, 0, now_ns);
    }
}

impl LatencyWindows {
    /// Move to planner period `period` if it changed since the last call.
    pub(crate) fn rotate(&mut self, period: u64) {
        if period == self.period {
            return;
        }
        if period == self.period.wrapping_add(1) {
            std::mem::swap(&mut self.last, &mut self.current);
        } else {
            self.last.clear();
        }
        self.current.clear();
        self.period = period;
    }

    pub(crate) fn record(&mut self, period: u64, us: u64) {
        self.rotate(period);
        let bucket = bucket_of(us);
        self.current.record_in(bucket);
        self.all.record_in(bucket);
    }

    pub(crate) fn last(&self) -> &Histogram {
        &self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut prev = 0;
        for v in (0..100_000u64).chain([u64::MAX / 2, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= prev && b < BUCKETS);
            prev = b;
        }
        for v in [1u64, 7, 8, 100, 1000, 123_456, 1 << 30] {
            let back = value_of(bucket_of(v));
            assert!(back.abs_diff(v) * 8 <= v.max(8), "{v} -> {back}");
        }
    }

    #[test]
    fn percentiles() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(50.0), None);
        for v in 1..=100u64 {
            h.record(v * 10);
        }
        let p50 = h.percentile(50.0).unwrap();
        let p99 = h.percentile(99.0).unwrap();
        assert!((440..=560).contains(&p50), "{p50}");
        assert!((880..=1100).contains(&p99), "{p99}");
    }

    #[test]
    fn cumulative_counts_at_power_of_two_bounds_are_exact() {
        let mut h = Histogram::default();
        for v in [3u64, 63, 64, 100, 127, 128, 5000] {
            h.record(v);
        }
        let (c, sum, n) = h.cumulative(&[64, 128, 1 << 20]);
        assert_eq!(c, vec![2, 5, 7]);
        assert_eq!(n, 7);
        assert!((5000..=6000).contains(&sum), "{sum}");
    }

    #[test]
    fn windows_rotate_per_period() {
        let mut w = LatencyWindows::default();
        w.record(0, 10);
        w.record(1, 20);
        assert_eq!(w.last().count(), 1);
        w.rotate(5);
        assert_eq!(w.last().count(), 0, "a gap leaves no last period");
        assert_eq!(w.all.count(), 2);
    }
}
