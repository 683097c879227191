//! What a load-generator run reports: each tenant's result over its measured window, its
//! seconds, the sum of a tenant's lanes, and the table `bench` prints.

use super::spec::TenantSpec;
use hdrhistogram::Histogram;
use serde::Serialize;

/// What one tenant achieved over its measured window (after the ramp).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TenantResult {
    pub name: String,
    /// Requests completed inside the measured window (after the ramp, before the end).
    pub ios: u64,
    pub bytes: u64,
    /// Every request that completed successfully over the whole run, ramp and the final
    /// drain included: what the volume really served (compare with the daemon's counters).
    pub completed: u64,
    pub errors: u64,
    /// `verify`: reads whose data was not what the tenant last wrote there.
    pub mismatches: u64,
    /// `verify`: the first mismatch, described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_mismatch: Option<String>,
    pub seconds: f64,
    pub iops: f64,
    pub mib_per_s: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    /// When the tenant started, in seconds after the run started (its `delay`).
    pub start_s: f64,
    /// Completed requests and p99 latency (µs) in each second of the tenant's run, ramp
    /// included.
    pub per_second: Vec<SecondSample>,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SecondSample {
    /// The end of this second, in seconds after the run started (all tenants share the
    /// clock, so a delayed tenant's first sample is at `delay + 1`).
    pub t_s: f64,
    pub iops: u64,
    pub mib_per_s: f64,
    /// 0 when nothing completed in this second.
    pub p99_us: f64,
}

/// The results of a tenant's lanes as one: counts and rates add up, latencies come
/// from the merged histogram, and each second's p99 is the worst lane's.
pub(super) fn sum_lanes(parts: Vec<(TenantResult, Histogram<u64>)>) -> TenantResult {
    let mut parts = parts.into_iter();
    let (mut total, mut hist) = parts.next().expect("at least one lane");
    for (r, h) in parts {
        let _ = hist.add(&h);
        total.ios += r.ios;
        total.bytes += r.bytes;
        total.completed += r.completed;
        total.errors += r.errors;
        total.iops += r.iops;
        total.mib_per_s += r.mib_per_s;
        for (i, s) in r.per_second.iter().enumerate() {
            // A lane may have closed a second more than the first one did.
            match total.per_second.get_mut(i) {
                Some(sum) => {
                    sum.iops += s.iops;
                    sum.mib_per_s += s.mib_per_s;
                    sum.p99_us = sum.p99_us.max(s.p99_us);
                }
                None => total.per_second.push(*s),
            }
        }
    }
    if !hist.is_empty() {
        total.lat_p50_us = hist.value_at_quantile(0.5) as f64;
        total.lat_p99_us = hist.value_at_quantile(0.99) as f64;
        total.lat_p999_us = hist.value_at_quantile(0.999) as f64;
    }
    total
}

/// A fixed-width table, one row per tenant.
pub fn format_table(tenants: &[TenantSpec], results: &[TenantResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:<10} {:>6} {:>4} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8}",
        "tenant",
        "rw",
        "bs",
        "qd",
        "IOPS",
        "MiB/s",
        "p50(us)",
        "p99(us)",
        "p99.9",
        "errors",
        "mismatch"
    );
    for (t, r) in tenants.iter().zip(results) {
        let _ = writeln!(
            out,
            "{:<12} {:<10} {:>6} {:>4} {:>10.0} {:>9.1} {:>9.0} {:>9.0} {:>9.0} {:>6} {:>8}",
            r.name,
            format!("{:?}", t.rw).to_lowercase(),
            crate::size::ByteSize(t.bs).to_string(),
            t.iodepth,
            r.iops,
            r.mib_per_s,
            r.lat_p50_us,
            r.lat_p99_us,
            r.lat_p999_us,
            r.errors,
            if t.verify {
                r.mismatches.to_string()
            } else {
                "-".into()
            }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(ios: u64, seconds: &[u64], latency_us: u64) -> (TenantResult, Histogram<u64>) {
        let mut hist = Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
        hist.record_n(latency_us, ios).unwrap();
        let result = TenantResult {
            ios,
            completed: ios,
            iops: ios as f64,
            per_second: seconds
                .iter()
                .enumerate()
                .map(|(i, &n)| SecondSample {
                    t_s: i as f64 + 1.0,
                    iops: n,
                    mib_per_s: 0.0,
                    p99_us: latency_us as f64,
                })
                .collect(),
            ..TenantResult::default()
        };
        (result, hist)
    }

    #[test]
    fn lanes_sum_their_seconds_even_when_one_closed_more_of_them() {
        let total = sum_lanes(vec![
            lane(100, &[50, 50], 10),
            lane(300, &[100, 100, 100], 30),
        ]);
        assert_eq!((total.ios, total.completed, total.iops), (400, 400, 400.0));
        let per_second: Vec<u64> = total.per_second.iter().map(|s| s.iops).collect();
        assert_eq!(per_second, [150, 150, 100]);
        assert_eq!(total.per_second[0].p99_us, 30.0, "each second's worst lane");
        // The merged histogram: three quarters of the requests took 30 µs.
        assert_eq!(total.lat_p50_us, 30.0);
    }
}
