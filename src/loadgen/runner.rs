//! Drives tenants against volume sockets with the `blkio` crate (a real vhost-user-blk
//! frontend, no VM) and measures what each one gets.

use super::spec::{Pattern, TenantSpec};
use crate::sim::rng::Rng;
use blkio::{Blkio, Completion, ReqFlags};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::mem::MaybeUninit;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// What one tenant achieved over its measured window (after the ramp).
#[derive(Clone, Debug, Serialize)]
pub struct TenantResult {
    pub name: String,
    pub ios: u64,
    pub bytes: u64,
    pub errors: u64,
    pub seconds: f64,
    pub iops: f64,
    pub mib_per_s: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_p999_us: f64,
    /// Completed requests and p99 latency (µs) in each second of the run, ramp included.
    pub per_second: Vec<SecondSample>,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SecondSample {
    pub iops: u64,
    pub p99_us: f64,
}

/// Runs every tenant at once (each in its own thread, started together) and returns their
/// results in order.
pub fn run(tenants: &[TenantSpec]) -> Result<Vec<TenantResult>, String> {
    let barrier = Arc::new(Barrier::new(tenants.len()));
    let handles: Vec<_> = tenants
        .iter()
        .cloned()
        .map(|t| {
            let barrier = barrier.clone();
            std::thread::spawn(move || run_tenant(&t, &barrier))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "tenant thread panicked".to_string())?)
        .collect()
}

fn run_tenant(t: &TenantSpec, start: &Barrier) -> Result<TenantResult, String> {
    let what = |e: blkio::Error| format!("tenant {} ({}): {e}", t.name, t.socket);
    let mut b = Blkio::new("virtio-blk-vhost-user").map_err(what)?;
    b.set_str("path", &t.socket).map_err(what)?;
    b.connect().map_err(what)?;
    let capacity = b.get_u64("capacity").map_err(what)?;
    b.set_i32("num-queues", 1).map_err(what)?;
    let mut started = b.start().map_err(what)?;
    let q = &mut started.queues[0];
    let align = b.get_u64("mem-region-alignment").map_err(what)? as usize;
    let len = (t.iodepth * t.bs as usize).div_ceil(align) * align;
    let region = b.alloc_mem_region(len).map_err(what)?;
    b.map_mem_region(&region).map_err(what)?;
    let base = region.addr as *mut u8;
    let blocks = capacity / t.bs;
    if blocks == 0 {
        return Err(format!(
            "tenant {}: bs {} exceeds the volume capacity {capacity}",
            t.name, t.bs
        ));
    }

    let mut rng = Rng::new(t.socket.len() as u64 ^ (t.bs << 7));
    let mut next_seq = 0u64;
    let mut submit = |q: &mut blkio::Blkioq, slot: usize, rng: &mut Rng| {
        let block = if t.rw.is_random() {
            rng.below(blocks)
        } else {
            next_seq = (next_seq + 1) % blocks;
            next_seq
        };
        let is_read = match t.rw {
            Pattern::RandRead | Pattern::Read => true,
            Pattern::RandWrite | Pattern::Write => false,
            Pattern::RandRw => rng.below(100) < u64::from(t.read_pct),
        };
        // SAFETY: slot < iodepth, so the buffer lies inside the mapped region.
        let buf = unsafe { base.add(slot * t.bs as usize) };
        if is_read {
            q.read(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        } else {
            q.write(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        }
    };

    start.wait();
    std::thread::sleep(t.delay);
    let t0 = Instant::now();
    let measure_from = t0 + t.ramp;
    let deadline = t0 + t.runtime;
    let interval = t
        .rate_iops
        .map(|r| Duration::from_secs_f64(1.0 / f64::from(r)));
    let mut next_issue = t0;
    let mut issued_at = vec![t0; t.iodepth];
    let mut idle: Vec<usize> = Vec::new();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut second_hist = hist.clone();
    let mut per_second = Vec::new();
    let mut second_end = t0 + Duration::from_secs(1);
    let mut second_ios = 0u64;
    let (mut ios, mut errors, mut in_flight) = (0u64, 0u64, 0usize);
    let mut comps: Vec<MaybeUninit<Completion>> =
        (0..t.iodepth).map(|_| MaybeUninit::uninit()).collect();

    for slot in 0..t.iodepth {
        idle.push(slot);
    }
    loop {
        let now = Instant::now();
        if now < deadline {
            while let Some(&slot) = idle.last() {
                if interval.is_some() && now < next_issue {
                    break;
                }
                idle.pop();
                issued_at[slot] = Instant::now();
                submit(q, slot, &mut rng);
                in_flight += 1;
                if let Some(i) = interval {
                    next_issue = next_issue.max(now - i) + i;
                }
            }
        } else if in_flight == 0 {
            break;
        }
        let mut timeout = if in_flight == 0 {
            next_issue.saturating_duration_since(Instant::now())
        } else {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100))
        };
        if in_flight == 0 {
            std::thread::sleep(timeout);
            continue;
        }
        if interval.is_some() {
            timeout = timeout.min(next_issue.saturating_duration_since(Instant::now()));
        }
        let got = q
            .do_io(&mut comps, 1, Some(&mut timeout), None)
            .or_else(|e| {
                if e.errno() == blkio::Errno::TIMEDOUT {
                    Ok(0)
                } else {
                    Err(e)
                }
            })
            .map_err(what)?;
        let done_at = Instant::now();
        for c in &comps[..got] {
            // SAFETY: do_io initialised the first `got` completions.
            let c = unsafe { c.assume_init_ref() };
            in_flight -= 1;
            idle.push(c.user_data);
            let lat_us = (done_at - issued_at[c.user_data]).as_micros().max(1) as u64;
            if c.ret != 0 {
                errors += 1;
                continue;
            }
            second_ios += 1;
            let _ = second_hist.record(lat_us);
            if done_at >= measure_from && done_at <= deadline {
                ios += 1;
                let _ = hist.record(lat_us);
            }
        }
        while done_at >= second_end {
            per_second.push(SecondSample {
                iops: second_ios,
                p99_us: second_hist.value_at_quantile(0.99) as f64,
            });
            second_ios = 0;
            second_hist.reset();
            second_end += Duration::from_secs(1);
        }
    }
    b.unmap_mem_region(&region);
    b.free_mem_region(&region);
    let seconds = (t.runtime - t.ramp).as_secs_f64();
    let pct = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64
        }
    };
    Ok(TenantResult {
        name: t.name.clone(),
        ios,
        bytes: ios * t.bs,
        errors,
        seconds,
        iops: ios as f64 / seconds,
        mib_per_s: (ios * t.bs) as f64 / seconds / f64::from(1 << 20),
        lat_p50_us: pct(0.5),
        lat_p99_us: pct(0.99),
        lat_p999_us: pct(0.999),
        per_second,
    })
}

/// A fixed-width table, one row per tenant.
pub fn format_table(tenants: &[TenantSpec], results: &[TenantResult]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:<10} {:>6} {:>4} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "tenant", "rw", "bs", "qd", "IOPS", "MiB/s", "p50(us)", "p99(us)", "p99.9", "errors"
    );
    for (t, r) in tenants.iter().zip(results) {
        let _ = writeln!(
            out,
            "{:<12} {:<10} {:>6} {:>4} {:>10.0} {:>9.1} {:>9.0} {:>9.0} {:>9.0} {:>6}",
            r.name,
            format!("{:?}", t.rw).to_lowercase(),
            crate::config::ByteSize(t.bs).to_string(),
            t.iodepth,
            r.iops,
            r.mib_per_s,
            r.lat_p50_us,
            r.lat_p99_us,
            r.lat_p999_us,
            r.errors
        );
    }
    out
}
