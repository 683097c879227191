//! One driving thread of a tenant (a *lane*): it keeps its request slots busy on its
//! queues (paced, on a duty cycle, verified as the tenant says), and counts what
//! completes, per second and over the measured window.

use super::result::{SecondSample, TenantResult};
use super::spec::{Pattern, TenantSpec};
use super::verify::Verifier;
use crate::rng::Rng;
use crate::stage_trace::{self, Stage};
use blkio::{Blkioq, Completion, ReqFlags};
use hdrhistogram::Histogram;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What one driving thread uses of a connection: its queues, the buffers of its request
/// slots (from `base`), and a seed of its own for its offsets.
pub(super) struct Lane<'a> {
    pub(super) queues: &'a mut [Blkioq],
    pub(super) base: usize,
    pub(super) blocks: u64,
    pub(super) seed: u64,
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
    /// A request completed in the current second, after `lat_us`.
    fn record(&mut self, lat_us: u64) {
        self.ios += 1;
        let _ = self.hist.record(lat_us);
    }

    /// Seconds from `t0`, a lane's start, timed from `run_start`, the run's.
    fn new(t0: Instant, run_start: Instant, bs: u64) -> Self {
        Seconds {
            samples: Vec::new(),
            // In whole milliseconds, for readable JSON.
            offset_s: ((t0 - run_start).as_secs_f64() * 1000.0).round() / 1000.0,
            end: t0 + Duration::from_secs(1),
            ios: 0,
            bs,
            hist: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        }
    }

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

/// Makes a lane's requests: each slot's block, direction and (verify) data, and checks
/// what verified reads bring back.
struct Requests<'t> {
    t: &'t TenantSpec,
    /// The slots' buffers, `t.bs` bytes each.
    base: *mut u8,
    blocks: u64,
    rng: Rng,
    verifier: Option<Verifier>,
    /// Per slot: the block of its request, whether a read, and (verify) the generation.
    slot_io: Vec<(u64, bool, u32)>,
    /// Per slot (verify, sequential): its own cursor.
    slot_seq: Vec<u64>,
    next_seq: u64,
}

impl<'t> Requests<'t> {
    fn new(t: &'t TenantSpec, lane: &Lane<'_>) -> Result<Self, String> {
        let seed =
            t.socket.len() as u64 ^ (t.bs << 7) ^ lane.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let verifier = t
            .verify
            .then(|| Verifier::new(seed ^ t.name.len() as u64, lane.blocks, t.iodepth))
            .transpose()
            .map_err(|e| format!("tenant {}: {e}", t.name))?;
        Ok(Requests {
            t,
            base: lane.base as *mut u8,
            blocks: lane.blocks,
            rng: Rng::new(seed),
            verifier,
            slot_io: vec![(0, false, 0); t.iodepth],
            slot_seq: vec![0; t.iodepth],
            next_seq: 0,
        })
    }

    /// Slot `slot`'s buffer.
    #[allow(clippy::mut_from_ref)]
    fn slot_buf(&self, slot: usize) -> &mut [u8] {
        let bs = self.t.bs as usize;
        // SAFETY: slot < iodepth, so the buffer lies inside the mapped region, which no
        // request in flight uses while the caller holds the slice (the slot is idle).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(slot * bs), bs) }
    }

    /// Queues slot `slot`'s next request on `q`.
    fn submit(&mut self, q: &mut Blkioq, slot: usize) {
        let t = self.t;
        let n = if t.rw.is_random() {
            self.rng.below(self.blocks)
        } else if self.verifier.is_some() {
            self.slot_seq[slot] += 1;
            self.slot_seq[slot]
        } else {
            self.next_seq = (self.next_seq + 1) % self.blocks;
            self.next_seq
        };
        let block = self.verifier.as_ref().map_or(n, |v| v.block(slot, n));
        let is_read = match t.rw {
            Pattern::RandRead | Pattern::Read => true,
            Pattern::RandWrite | Pattern::Write => false,
            Pattern::RandRw => self.rng.below(100) < u64::from(t.read_pct),
        };
        let buf = self.slot_buf(slot);
        let generation = match &self.verifier {
            Some(v) if !is_read => v.fill(block, buf),
            _ => 0,
        };
        let buf = buf.as_mut_ptr();
        if is_read {
            q.read(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        } else {
            q.write(block * t.bs, buf, t.bs as usize, slot, ReqFlags::empty());
        }
        self.slot_io[slot] = (block, is_read, generation);
    }

    /// Slot `slot`'s request completed with `ret`: a verified write is recorded, a
    /// verified read checked.
    fn completed(&mut self, slot: usize, ret: i32) {
        let Some(v) = self.verifier.as_mut() else {
            return;
        };
        let (block, is_read, generation) = self.slot_io[slot];
        if !is_read {
            v.write_done(block, generation, ret == 0);
        } else if ret == 0 {
            // SAFETY: as in `slot_buf`; the slot's request has completed.
            let bs = self.t.bs as usize;
            let buf = unsafe { std::slice::from_raw_parts(self.base.add(slot * bs), bs) };
            v.check(block, buf);
        }
    }
}

/// A lane's slots: which are idle, when each was issued and on which queue.
struct Slots {
    idle: Vec<usize>,
    issued_at: Vec<Instant>,
    queue: Vec<usize>,
    queue_in_flight: Vec<usize>,
    next_queue: usize,
    in_flight: usize,
}

impl Slots {
    fn new(iodepth: usize, nr_queues: usize, t0: Instant) -> Self {
        Slots {
            idle: (0..iodepth).rev().collect(),
            issued_at: vec![t0; iodepth],
            queue: vec![0; iodepth],
            queue_in_flight: vec![0; nr_queues],
            next_queue: 0,
            in_flight: 0,
        }
    }

    /// Issues idle slot `slot`'s next request, on the queues in turn.
    fn start(&mut self, slot: usize, queues: &mut [Blkioq], requests: &mut Requests<'_>) {
        self.idle.pop();
        self.issued_at[slot] = Instant::now();
        self.queue[slot] = self.next_queue;
        self.queue_in_flight[self.next_queue] += 1;
        requests.submit(&mut queues[self.next_queue], slot);
        self.next_queue = (self.next_queue + 1) % queues.len();
        self.in_flight += 1;
    }

    /// Slot `slot`'s request completed at `done_at`: the slot is idle again. Returns its
    /// latency, µs.
    fn finish(&mut self, slot: usize, done_at: Instant) -> u64 {
        self.in_flight -= 1;
        self.queue_in_flight[self.queue[slot]] -= 1;
        self.idle.push(slot);
        (done_at - self.issued_at[slot]).as_micros().max(1) as u64
    }
}

/// What a lane completed.
#[derive(Default)]
struct Counts {
    /// Completed without error in the measured window.
    ios: u64,
    errors: u64,
    /// Completed without error at any time.
    completed: u64,
}

/// Drives `t` on `lane` until its runtime is over; returns what it got, with the
/// latency histogram of its measured window.
pub(super) fn drive(
    t: &TenantSpec,
    lane: Lane<'_>,
    run_start: Instant,
    live_ios: &AtomicU64,
) -> Result<(TenantResult, Histogram<u64>), String> {
    let what = |e: blkio::Error| format!("tenant {} ({}): {e}", t.name, t.socket);
    let mut requests = Requests::new(t, &lane)?;
    let queues = lane.queues;
    let nq = queues.len();
    if nq > 1 {
        enable_completion_fds(queues).map_err(|e| format!("tenant {}: {e}", t.name))?;
    }
    let t0 = Instant::now();
    let measure_from = t0 + t.ramp;
    let deadline = t0 + t.runtime;
    let interval = t
        .rate_iops
        .map(|r| Duration::from_secs_f64(1.0 / f64::from(r)));
    let mut next_issue = t0;
    let mut slots = Slots::new(t.iodepth, nq, t0);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut seconds = Seconds::new(t0, run_start, t.bs);
    let mut counts = Counts::default();
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
            while let Some(&slot) = slots.idle.last() {
                if waiting && now < next_issue {
                    break;
                }
                slots.start(slot, queues, &mut requests);
                if let Some(i) = interval {
                    next_issue = next_issue.max(now.checked_sub(i).unwrap_or(now)) + i;
                }
            }
        } else if slots.in_flight == 0 {
            break;
        }
        if slots.in_flight == 0 {
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
        collect(
            queues,
            &slots.queue_in_flight,
            &mut comps,
            timeout,
            &mut done,
        )
        .map_err(what)?;
        if !done.is_empty() {
            stage_trace::mark_n(Stage::ClientWoke, done.len() as u32);
        }
        let done_at = Instant::now();
        let mut ok = 0;
        for &(slot, ret) in &done {
            let lat_us = slots.finish(slot, done_at);
            requests.completed(slot, ret);
            if ret != 0 {
                counts.errors += 1;
                continue;
            }
            ok += 1;
            counts.completed += 1;
            seconds.record(lat_us);
            if done_at >= measure_from && done_at <= deadline {
                counts.ios += 1;
                let _ = hist.record(lat_us);
            }
        }
        live_ios.fetch_add(ok, Ordering::Relaxed);
        seconds.roll(done_at);
    }
    // Close the seconds that ended with the run (the last one may have had no completion
    // after its end to close it).
    seconds.roll(deadline);
    let result = tenant_result(t, &counts, &hist, seconds, requests.verifier);
    Ok((result, hist))
}

/// With several queues, completions are waited for on their eventfds together
/// ([`collect`]).
fn enable_completion_fds(queues: &mut [Blkioq]) -> Result<(), &'static str> {
    for q in queues.iter_mut() {
        if q.get_completion_fd().is_none() {
            return Err("queue without a completion fd");
        }
        q.set_completion_fd_enabled(true);
    }
    Ok(())
}

/// A lane's result over its measured window.
fn tenant_result(
    t: &TenantSpec,
    counts: &Counts,
    hist: &Histogram<u64>,
    seconds: Seconds,
    verifier: Option<Verifier>,
) -> TenantResult {
    let seconds_measured = (t.runtime - t.ramp).as_secs_f64();
    let pct = |q: f64| {
        if hist.is_empty() {
            0.0
        } else {
            hist.value_at_quantile(q) as f64
        }
    };
    let ios = counts.ios;
    TenantResult {
        name: t.name.clone(),
        ios,
        bytes: ios * t.bs,
        completed: counts.completed,
        errors: counts.errors,
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
    }
}
