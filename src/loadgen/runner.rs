//! Drives tenants against volume sockets with the `blkio` crate (a real vhost-user-blk
//! frontend, no VM) and measures what each one gets.

use super::progress::{self, Live, ProgressMode};
use super::spec::{Pattern, TenantSpec};
use super::verify::Verifier;
use crate::rng::Rng;
use crate::stage_trace::{self, Stage};
use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

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

/// Runs every tenant at once (each in its own thread, started together) and returns their
/// results in order.
pub fn run(tenants: &[TenantSpec]) -> Result<Vec<TenantResult>, String> {
    run_with(tenants, ProgressMode::Off)
}

/// Sends on drop, so the progress reporter learns that a tenant thread ended even if it
/// failed or panicked.
struct DoneGuard(mpsc::Sender<()>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Like [`run`], with a progress line on stderr while the tenants run.
pub fn run_with(
    tenants: &[TenantSpec],
    progress: ProgressMode,
) -> Result<Vec<TenantResult>, String> {
    // The calling thread joins the barrier too: the run's clock starts when every tenant
    // is connected.
    let barrier = Arc::new(Barrier::new(tenants.len() + 1));
    let live = Arc::new(Live::new(tenants.len()));
    let (done_tx, done_rx) = mpsc::channel();
    let handles: Vec<_> = tenants
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| {
            let barrier = barrier.clone();
            let live = live.clone();
            let done = DoneGuard(done_tx.clone());
            std::thread::spawn(move || {
                let _done = done;
                run_tenant(&t, i, &barrier, &live)
            })
        })
        .collect();
    drop(done_tx);
    barrier.wait();
    progress::report(progress, tenants, &live, &done_rx);
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "tenant thread panicked".to_string())?)
        .collect()
}

/// A connected and started client with its I/O buffers.
struct Conn {
    // Dropped before `blkio` (fields drop in order).
    queues: Vec<Blkioq>,
    blkio: Blkio,
    region: MemoryRegion,
    blocks: u64,
}

impl Conn {
    fn open(t: &TenantSpec) -> Result<Conn, String> {
        let what = |e: blkio::Error| format!("tenant {} ({}): {e}", t.name, t.socket);
        let mut b = Blkio::new("virtio-blk-vhost-user").map_err(what)?;
        b.set_str("path", &t.socket).map_err(what)?;
        b.connect().map_err(what)?;
        let capacity = b.get_u64("capacity").map_err(what)?;
        // Polled queues take no notifications: the client spins on their used rings.
        let (notified, polled) = if t.poll { (0, t.queues) } else { (t.queues, 0) };
        b.set_i32("num-queues", notified as i32).map_err(what)?;
        b.set_i32("num-poll-queues", polled as i32).map_err(what)?;
        let started = b.start().map_err(what)?;
        let align = b.get_u64("mem-region-alignment").map_err(what)? as usize;
        let len = (t.iodepth * t.bs as usize).div_ceil(align) * align;
        let region = b.alloc_mem_region(len).map_err(what)?;
        if let Err(e) = b.map_mem_region(&region) {
            b.free_mem_region(&region);
            return Err(what(e));
        }
        let conn = Conn {
            queues: if t.poll {
                started.poll_queues
            } else {
                started.queues
            },
            blkio: b,
            region,
            blocks: capacity / t.bs,
        };
        if conn.blocks == 0 {
            return Err(format!(
                "tenant {}: bs {} exceeds the volume capacity {capacity}",
                t.name, t.bs
            ));
        }
        Ok(conn)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.blkio.unmap_mem_region(&self.region);
        self.blkio.free_mem_region(&self.region);
    }
}

fn run_tenant(
    t: &TenantSpec,
    index: usize,
    start: &Barrier,
    live: &Live,
) -> Result<TenantResult, String> {
    // Reach the barrier whatever happens, or the other tenants would wait forever.
    let conn = Conn::open(t);
    start.wait();
    let run_start = Instant::now();
    let mut conn = conn?;
    std::thread::sleep(t.delay);
    live.set_state(index, progress::RUNNING);
    let result = if t.queue_threads && conn.queues.len() > 1 {
        drive_per_queue(t, &mut conn, run_start, &live.ios[index])
    } else {
        let lane = Lane {
            queues: &mut conn.queues,
            base: conn.region.addr,
            blocks: conn.blocks,
            seed: 0,
        };
        drive(t, lane, run_start, &live.ios[index]).map(|(result, _)| result)
    };
    live.set_state(index, progress::DONE);
    result
}

/// What one driving thread uses of a connection: its queues, the buffers of its request
/// slots (from `base`), and a seed of its own for its offsets.
struct Lane<'a> {
    queues: &'a mut [Blkioq],
    base: usize,
    blocks: u64,
    seed: u64,
}

/// `queue_threads`: one thread per queue, each driving `iodepth / queues` requests (and
/// its share of `rate_iops`) on its queue; their results are summed.
fn drive_per_queue(
    t: &TenantSpec,
    conn: &mut Conn,
    run_start: Instant,
    live_ios: &AtomicU64,
) -> Result<TenantResult, String> {
    let nq = conn.queues.len();
    let lane_depth = t.iodepth / nq;
    let shares: Vec<TenantSpec> = (0..nq)
        .map(|lane| TenantSpec {
            iodepth: lane_depth,
            queues: 1,
            rate_iops: t.rate_iops.map(|r| lane_rate(r, nq, lane)),
            ..t.clone()
        })
        .collect();
    let (base, blocks) = (conn.region.addr, conn.blocks);
    let slot_bytes = lane_depth * t.bs as usize;
    let parts = std::thread::scope(|scope| {
        let threads: Vec<_> = conn
            .queues
            .iter_mut()
            .zip(&shares)
            .enumerate()
            .map(|(i, (queue, share))| {
                let lane = Lane {
                    queues: std::slice::from_mut(queue),
                    base: base + i * slot_bytes,
                    blocks,
                    seed: i as u64 + 1,
                };
                scope.spawn(move || drive(share, lane, run_start, live_ios))
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().map_err(|_| "queue thread panicked".to_string())?)
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok(sum_lanes(parts))
}

/// Lane `lane`'s part of `rate` requests/s over `lanes` lanes: the parts add up to `rate`
/// (the first `rate % lanes` lanes take one more), and none is zero, which would mean
/// unpaced.
fn lane_rate(rate: u32, lanes: usize, lane: usize) -> u32 {
    let lanes = lanes as u32;
    let extra = u32::from((lane as u32) < rate % lanes);
    (rate / lanes + extra).max(1)
}

/// The results of a tenant's lanes as one: counts and rates add up, latencies come
/// from the merged histogram, and each second's p99 is the worst lane's.
fn sum_lanes(parts: Vec<(TenantResult, Histogram<u64>)>) -> TenantResult {
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

/// Per-second counters.
struct Seconds {
    samples: Vec<SecondSample>,
    offset_s: f64,
    end: Instant,
    ios: u64,
    bs: u64,
    hist: Histogram<u64>,
}

impl Seconds {
    /// Closes every second that ended at or before `now`.
    fn roll(&mut self, now: Instant) {
        while now >= self.end {
            self.samples.push(SecondSample {
                t_s: self.offset_s + self.samples.len() as f64 + 1.0,
                iops: self.ios,
                mib_per_s: (self.ios * self.bs) as f64 / f64::from(1 << 20),
                p99_us: if self.hist.is_empty() {
                    0.0
                } else {
                    self.hist.value_at_quantile(0.99) as f64
                },
            });
            self.ios = 0;
            self.hist.reset();
            self.end += Duration::from_secs(1);
        }
    }
}

/// Waits up to `timeout` for completions and appends `(user_data, ret)` of each to `done`.
/// With one queue blkio waits itself; with several, their completion eventfds are polled
/// together.
fn collect(
    queues: &mut [Blkioq],
    in_flight: &[usize],
    comps: &mut [MaybeUninit<Completion>],
    timeout: Duration,
    done: &mut Vec<(usize, i32)>,
) -> Result<(), blkio::Error> {
    let mut take = |got: usize, comps: &[MaybeUninit<Completion>]| {
        for c in &comps[..got] {
            // SAFETY: do_io initialised the first `got` completions.
            let c = unsafe { c.assume_init_ref() };
            done.push((c.user_data, c.ret));
        }
    };
    if queues.len() == 1 {
        let mut timeout = timeout;
        let got = match queues[0].do_io(comps, 1, Some(&mut timeout), None) {
            Ok(got) => got,
            // blkio says ETIME when the wait times out ("Timed out"); not an I/O error.
            Err(e) if matches!(e.errno(), blkio::Errno::TIME | blkio::Errno::TIMEDOUT) => 0,
            Err(e) => return Err(e),
        };
        take(got, comps);
        return Ok(());
    }
    let mut sweep = |queues: &mut [Blkioq], comps: &mut [MaybeUninit<Completion>]| {
        let mut any = false;
        for (q, _) in queues.iter_mut().zip(in_flight).filter(|(_, &n)| n > 0) {
            let got = q.do_io(comps, 0, None, None)?;
            take(got, comps);
            any |= got > 0;
        }
        Ok::<bool, blkio::Error>(any)
    };
    // Submits what was queued and takes what already completed; the completion fds are
    // enabled, so anything completing after this sweep makes its fd readable.
    if sweep(queues, comps)? {
        return Ok(());
    }
    let mut fds: Vec<libc::pollfd> = queues
        .iter()
        .zip(in_flight)
        .filter(|(_, &n)| n > 0)
        .filter_map(|(q, _)| q.get_completion_fd())
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid array of pollfd of the given length.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if n > 0 {
        for p in fds.iter().filter(|p| p.revents & libc::POLLIN != 0) {
            let mut counter = 0u64;
            // SAFETY: reading 8 bytes into a u64 from a readable eventfd.
            unsafe { libc::read(p.fd, (&mut counter as *mut u64).cast(), 8) };
        }
        sweep(queues, comps)?;
    }
    Ok(())
}

/// Drives `t` on `lane` until its runtime is over; returns what it got, with the
/// latency histogram of its measured window.
fn drive(
    t: &TenantSpec,
    lane: Lane<'_>,
    run_start: Instant,
    live_ios: &AtomicU64,
) -> Result<(TenantResult, Histogram<u64>), String> {
    let what = |e: blkio::Error| format!("tenant {} ({}): {e}", t.name, t.socket);
    let queues = lane.queues;
    let nq = queues.len();
    if nq > 1 {
        for q in queues.iter_mut() {
            if q.get_completion_fd().is_none() {
                return Err(format!("tenant {}: queue without a completion fd", t.name));
            }
            q.set_completion_fd_enabled(true);
        }
    }
    let base = lane.base as *mut u8;
    let blocks = lane.blocks;
    let seed = t.socket.len() as u64 ^ (t.bs << 7) ^ lane.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = Rng::new(seed);
    let mut verifier = t
        .verify
        .then(|| Verifier::new(seed ^ t.name.len() as u64, blocks, t.iodepth))
        .transpose()
        .map_err(|e| format!("tenant {}: {e}", t.name))?;
    // SAFETY: slot < iodepth, so the buffer lies inside the mapped region, which no
    // request in flight uses while the caller holds the slice (the slot is idle).
    let slot_buf = |slot: usize| unsafe {
        std::slice::from_raw_parts_mut(base.add(slot * t.bs as usize), t.bs as usize)
    };
    // Per slot: the block of its request, whether a read, and (verify) the generation.
    let mut slot_io = vec![(0u64, false, 0u32); t.iodepth];
    let mut next_seq = 0u64;
    let mut slot_seq = vec![0u64; t.iodepth];
    let mut submit = |q: &mut Blkioq, slot: usize, rng: &mut Rng, verifier: Option<&Verifier>| {
        let n = if t.rw.is_random() {
            rng.below(blocks)
        } else if verifier.is_some() {
            slot_seq[slot] += 1;
            slot_seq[slot]
        } else {
            next_seq = (next_seq + 1) % blocks;
            next_seq
        };
        let block = verifier.map_or(n, |v| v.block(slot, n));
        let is_read = match t.rw {
            Pattern::RandRead | Pattern::Read => true,
            Pattern::RandWrite | Pattern::Write => false,
            Pattern::RandRw => rng.below(100) < u64::from(t.read_pct),
        };
        let buf = slot_buf(slot);
        let generation = match verifier {
            Some(v) if !is_read => v.fill(block, buf),
            _ => 0,
        };
        let buf = buf.as_mut_ptr();
        if is_read {
            q.read(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        } else {
            q.write(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        }
        (block, is_read, generation)
    };

    let t0 = Instant::now();
    let measure_from = t0 + t.ramp;
    let deadline = t0 + t.runtime;
    let interval = t
        .rate_iops
        .map(|r| Duration::from_secs_f64(1.0 / f64::from(r)));
    let mut next_issue = t0;
    let mut issued_at = vec![t0; t.iodepth];
    let mut slot_queue = vec![0usize; t.iodepth];
    let mut queue_in_flight = vec![0usize; nq];
    let mut next_queue = 0;
    let mut idle: Vec<usize> = (0..t.iodepth).rev().collect();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut seconds = Seconds {
        samples: Vec::new(),
        // In whole milliseconds, for readable JSON.
        offset_s: ((t0 - run_start).as_secs_f64() * 1000.0).round() / 1000.0,
        end: t0 + Duration::from_secs(1),
        ios: 0,
        bs: t.bs,
        hist: hist.clone(),
    };
    let (mut ios, mut errors, mut in_flight, mut completed) = (0u64, 0u64, 0usize, 0u64);
    let mut comps: Vec<MaybeUninit<Completion>> =
        (0..t.iodepth).map(|_| MaybeUninit::uninit()).collect();
    let mut done = Vec::with_capacity(t.iodepth);

    loop {
        let now = Instant::now();
        // In an off phase of its duty cycle the tenant issues nothing until the next on
        // phase, and a paced one does not catch up for the pause.
        if let Some(resume) = t.duty.and_then(|d| d.paused_until(now - t0)) {
            next_issue = next_issue.max(t0 + resume);
        }
        let waiting = interval.is_some() || next_issue > now;
        if now < deadline {
            while let Some(&slot) = idle.last() {
                if waiting && now < next_issue {
                    break;
                }
                idle.pop();
                issued_at[slot] = Instant::now();
                // Requests go to the queues round-robin.
                slot_queue[slot] = next_queue;
                queue_in_flight[next_queue] += 1;
                slot_io[slot] = submit(&mut queues[next_queue], slot, &mut rng, verifier.as_ref());
                next_queue = (next_queue + 1) % nq;
                in_flight += 1;
                if let Some(i) = interval {
                    next_issue = next_issue.max(now.checked_sub(i).unwrap_or(now)) + i;
                }
            }
        } else if in_flight == 0 {
            break;
        }
        if in_flight == 0 {
            // Rate-limited and idle: wait for the next issue time.
            std::thread::sleep(next_issue.min(deadline).saturating_duration_since(now));
            seconds.roll(Instant::now());
            continue;
        }
        let mut timeout = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        if waiting {
            timeout = timeout.min(next_issue.saturating_duration_since(Instant::now()));
        }
        done.clear();
        stage_trace::mark(Stage::ClientWaits);
        collect(queues, &queue_in_flight, &mut comps, timeout, &mut done).map_err(what)?;
        if !done.is_empty() {
            stage_trace::mark_n(Stage::ClientWoke, done.len() as u32);
        }
        let done_at = Instant::now();
        let mut ok = 0;
        for &(slot, ret) in &done {
            in_flight -= 1;
            queue_in_flight[slot_queue[slot]] -= 1;
            idle.push(slot);
            let lat_us = (done_at - issued_at[slot]).as_micros().max(1) as u64;
            if let Some(v) = verifier.as_mut() {
                let (block, is_read, generation) = slot_io[slot];
                if !is_read {
                    v.write_done(block, generation, ret == 0);
                } else if ret == 0 {
                    v.check(block, slot_buf(slot));
                }
            }
            if ret != 0 {
                errors += 1;
                continue;
            }
            ok += 1;
            completed += 1;
            seconds.ios += 1;
            let _ = seconds.hist.record(lat_us);
            if done_at >= measure_from && done_at <= deadline {
                ios += 1;
                let _ = hist.record(lat_us);
            }
        }
        live_ios.fetch_add(ok, Ordering::Relaxed);
        seconds.roll(done_at);
    }
    // Close the seconds that ended with the run (the last one may have had no completion
    // after its end to close it).
    seconds.roll(deadline);
    let seconds_measured = (t.runtime - t.ramp).as_secs_f64();
    let pct = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64
        }
    };
    let result = TenantResult {
        name: t.name.clone(),
        ios,
        bytes: ios * t.bs,
        completed,
        errors,
        mismatches: verifier.as_ref().map_or(0, |v| v.mismatches),
        first_mismatch: verifier.and_then(|v| v.first_mismatch),
        seconds: seconds_measured,
        iops: ios as f64 / seconds_measured,
        mib_per_s: (ios * t.bs) as f64 / seconds_measured / f64::from(1 << 20),
        lat_p50_us: pct(0.5),
        lat_p99_us: pct(0.99),
        lat_p999_us: pct(0.999),
        start_s: seconds.offset_s,
        per_second: seconds.samples,
    };
    Ok((result, hist))
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

    #[test]
    fn lane_rates_add_up_to_the_tenants_rate() {
        for (rate, lanes) in [(40_000, 2), (1001, 2), (10, 3), (7, 4), (1, 2)] {
            let parts: Vec<u32> = (0..lanes).map(|l| lane_rate(rate, lanes, l)).collect();
            assert!(parts.iter().all(|&p| p >= 1), "{rate}/{lanes}: {parts:?}");
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
            // Only a rate below the lane count is rounded up (a lane paced at zero would
            // run unpaced).
            let expected = rate.max(lanes as u32);
            assert_eq!(
                parts.iter().sum::<u32>(),
                expected,
                "{rate}/{lanes}: {parts:?}"
            );
        }
    }

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
