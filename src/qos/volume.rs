//! The issue path of one volume (design §3): price, activate, decide, charge.
//!
//! Each volume has a local vtime cursor. An admitted request advances it by its *local*
//! cost, `abs_cost / hweight_inuse`: a volume with a 25 % share pays four times the
//! device time. The request may go now iff `vtime + cost ≤ vnow`; the gap `vnow − vtime`
//! is the volume's budget. An active volume is handed exactly half a period of budget
//! when it (re)activates, and the planner discards anything above that, so an idle
//! volume cannot bank credit.
//!
//! The common case takes no lock and makes no syscall beyond the clock read: a few
//! atomic loads, one generation check of the cached hweights and one atomic add. The
//! device lock is taken only to activate an idle volume, to take back a donation when
//! the volume runs short ("snapback", design §3.5), and when a throttled volume still
//! donates (a volume with waiters always holds its full weight).
//!
//! The core does not queue. On [`Decision::Wait`] the caller parks the request in the
//! volume's FIFO and offers the head again at `until_ns`; the core only remembers that
//! the volume has a waiter (for the planner and for statistics).

use crate::lock::Locked;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;

use crate::cost_model::{CostInput, IoKind};
use crate::vtime::{
    abs_cost_to_cost, after, before, before_eq, cdiv, vdiff, MAX_ABS_COST, VTIME_PER_NSEC,
    VTIME_PER_USEC,
};

use super::request::{Charge, Decision, IoRequest, Timing};
use super::shared::DeviceShared;
use super::tunables::{BACKGROUND_INFLIGHT_PCT, INUSE_ADJ_STEP_PCT};
use super::vclock::Now;
use super::volume_core::{VolumeCore, HELD_CAP, HELD_CLASS, LAT_SQ_CAP_US};

/// The per-volume handle the data path uses. `Send + Sync`, but requests of one volume
/// are admitted by one thread at a time (the data path's worker for that volume; the
/// planner runs concurrently on its own thread). This lets the usage counter be written
/// without a locked instruction, as the kernel's per-CPU counter is; different volumes
/// may be served by different threads.
#[derive(Debug)]
pub struct VolumeQos {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) core: Arc<VolumeCore>,
}

impl VolumeQos {
    pub(crate) fn new(dev: Arc<DeviceShared>, core: Arc<VolumeCore>) -> Self {
        VolumeQos { dev, core }
    }

    /// Whether a request of `kind` that must wait may be passed by the requests behind
    /// it: its operation has caps of its own (`op_caps`), so a flush or discard storm
    /// held by them does not hold the volume's reads and writes (virtio orders nothing
    /// between requests in flight).
    pub fn may_pass(&self, kind: IoKind) -> bool {
        self.core.own_caps_ops.load(Relaxed) & (1 << kind as u8) != 0
    }

    /// The volume's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Price the request and decide. On [`Decision::Go`] the cost is committed (local
    /// vtime advanced) and the caller must eventually call [`VolumeQos::complete`] with
    /// the returned charge. On [`Decision::Wait`] nothing is committed.
    ///
    /// The caller keeps FIFO order per volume: while requests are parked, only the head
    /// is offered here.
    pub fn admit(&self, io: &IoRequest) -> Decision {
        self.admit_at(io, self.dev.clock.now_ns())
    }

    /// [`VolumeQos::admit`] at a clock reading the caller already took: the data path
    /// reads the clock once per batch of requests. A reading a few microseconds old only
    /// makes the decision more conservative (vnow, hence the budget, is a little smaller).
    pub fn admit_at(&self, io: &IoRequest, now_ns: u64) -> Decision {
        if !self.core.has_caps.load(Acquire) {
            return self.admit_by_budget(io, now_ns);
        }
        // Caps (the volume's and its groups') act first and charge nothing while they
        // hold a request back: a capped volume does not spend budget on work it cannot
        // send, so its share shows as surplus and is donated (design §12). They apply
        // with QoS disabled too, and are charged only when the budget lets the request go.
        let caps = self.core.caps.load();
        let id = self.core.node;
        let mut wait = None;
        for c in caps.iter() {
            if let Some(t) = c.wait_until(id, io.kind, now_ns) {
                wait = wait.max(Some(t));
            }
        }
        if let Some(until_ns) = wait {
            self.core.io.capped.fetch_add(1, Relaxed);
            self.core.hold(HELD_CAP, now_ns);
            // Every cap on the path learns when the volume asks again: none keeps its
            // members waiting for it before then.
            for c in caps.iter() {
                c.asks_again_at(id, until_ns);
            }
            return Decision::Wait { until_ns };
        }
        let decision = self.admit_by_budget(io, now_ns);
        if matches!(decision, Decision::Go(_)) {
            let weight = self.core.own.weight.load(Relaxed);
            for c in caps.iter() {
                c.account(id, weight, io.kind, io.len);
            }
        } else {
            for c in caps.iter() {
                c.withdraw(id);
            }
        }
        decision
    }

    /// The vtime decision (design §3.4).
    #[inline]
    fn admit_by_budget(&self, io: &IoRequest, now_ns: u64) -> Decision {
        let dev = &*self.dev;
        let v = &*self.core;
        let cursor = v.cursor.load(Relaxed);
        let input = CostInput {
            kind: io.kind,
            offset: io.offset,
            len: io.len,
            prev_end: cursor.checked_sub(1),
        };
        let cfg = dev.cfg();
        let abs = cfg.model.abs_cost(&input).min(MAX_ABS_COST);
        if !cfg.params.enable || abs == 0 {
            // Unthrottled, but still counted.
            return self.go(io, abs, 0, 0, now_ns);
        }
        self.activate(now_ns);
        if dev.alone(now_ns) {
            // Alone on the device: nobody to protect, so nothing to throttle (a lone
            // tenant is never slower than with QoS off, whatever the model says). It is
            // charged at absolute cost all the same, and what it completes ahead of vnow
            // is forgiven (`VolumeCore::forgive_completed_ahead`), so when a neighbour
            // arrives it owes exactly its queue (design §5.9).
            return self.go(io, abs, abs, abs, now_ns);
        }
        let now = dev.now_at(now_ns);
        if v.background.load(Relaxed) && dev.foreground_active.load(Relaxed) {
            // Background behind an active foreground (design §13): no budget banked
            // while it waited, which a share donated to it later would turn into a
            // burst, and little in flight.
            let floor = now
                .vnow
                .wrapping_sub(dev.margin_target.load(Relaxed) as u64);
            let vtime = v.vtime.load(Relaxed);
            if before(vtime, floor) {
                v.vtime.fetch_add(floor.wrapping_sub(vtime), Relaxed);
                v.done_vtime.fetch_add(floor.wrapping_sub(vtime), Relaxed);
            }
            let period_ns = cfg.params.period_ns();
            let limit = period_ns / 1000 * VTIME_PER_USEC * BACKGROUND_INFLIGHT_PCT / 100;
            let inflight = v.background_inflight.load(Relaxed);
            let retry_at = now.now_ns + (period_ns * BACKGROUND_INFLIGHT_PCT / 400).max(50_000);
            if inflight != 0 && inflight.saturating_add(abs) > limit {
                v.io.background_held.fetch_add(1, Relaxed);
                v.hold(HELD_CLASS, now.now_ns);
                return Decision::Wait { until_ns: retry_at };
            }
            if dev.hold_background.load(Relaxed) {
                // The foreground wants more than it gets, or its latency rises: only the
                // floor (design §13).
                return match v.reserve.take(abs, now.now_ns, period_ns) {
                    Ok(()) => {
                        v.io.reserved.fetch_add(1, Relaxed);
                        self.go(io, abs, abs, 0, now.now_ns)
                    }
                    Err(at) => {
                        v.io.background_held.fetch_add(1, Relaxed);
                        v.hold(HELD_CLASS, now.now_ns);
                        Decision::Wait {
                            until_ns: at.unwrap_or(retry_at).max(retry_at),
                        }
                    }
                };
            }
        }
        let vtime = v.vtime.load(Relaxed);
        let cost = self.adjust_inuse_and_calc_cost(vtime, abs, &now);
        let period_ns = cfg.params.period_ns();
        if before_eq(vtime.wrapping_add(cost), now.vnow) {
            v.reserve.served(abs, now.now_ns, period_ns);
            return self.go(io, abs, abs, cost, now.now_ns);
        }
        match self.throttle(io, abs, cost, vtime, now, cfg.params.timer_slack_ns) {
            Decision::Wait { until_ns } => match v.reserve.take(abs, now.now_ns, period_ns) {
                // Short of budget by weight, but within its reservation (design §14).
                Ok(()) => {
                    v.io.reserved.fetch_add(1, Relaxed);
                    self.go(io, abs, abs, 0, now.now_ns)
                }
                Err(reserve_at) => {
                    // Past its caps and class, it waits for budget now.
                    if v.held.load(Relaxed) != 0 {
                        v.release(now.now_ns);
                    }
                    if !v.waiting.load(Relaxed) {
                        v.wait_since_ns.store(now.now_ns, Relaxed);
                        v.waiting.store(true, Relaxed);
                    }
                    Decision::Wait {
                        until_ns: reserve_at.map_or(until_ns, |t| t.min(until_ns)),
                    }
                }
            },
            go => {
                v.reserve.served(abs, now.now_ns, period_ns);
                go
            }
        }
    }

    /// Report a completion. `alloc_ns` = when admitted (after any throttling wait; taken
    /// as its arrival too), `start_ns` = when the request obtained a device slot,
    /// `done_ns` = device completion; all on the QoS clock. See
    /// [`VolumeQos::complete_batch`].
    pub fn complete(&self, charge: &Charge, alloc_ns: u64, start_ns: u64, done_ns: u64) {
        let timing = Timing {
            arrived_ns: alloc_ns,
            admitted_ns: alloc_ns,
            submitted_ns: start_ns,
            completed_ns: done_ns,
        };
        self.complete_batch(&[(*charge, timing)]);
    }

    /// Report the completions of one batch (the data path reaps completions in batches).
    /// Feeds the latency and rq-wait signals of the planner: device latency is
    /// `completed − admitted`, never including throttled time. The shared counters and
    /// the histogram lock are touched once per batch, not once per request.
    pub fn complete_batch(&self, done: &[(Charge, Timing)]) {
        let dev = &*self.dev;
        super::learning::record(&dev.learning, done);
        let v = &*self.core;
        let cfg = dev.cfg();
        let mut tally = BatchTally::default();
        let period = dev.cur_period.load(Relaxed);
        let mut h = v.hist.locked();
        let latency_class = v.latency_class.load(Relaxed);
        let latency_group = v.in_latency_group.load(Relaxed);
        let target_ns = [cfg.params.rlat_us, cfg.params.wlat_us].map(|us| u64::from(us) * 1000);
        let judge_latency = cfg.params.enable;
        // A guest's requests are mostly of one kind and size: their transfer time (and
        // so the latency that still meets the target) is priced once per run of them.
        let mut last_size = None;
        for (charge, t) in done {
            if latency_class || latency_group {
                let wait_us = t.admitted_ns.saturating_sub(t.arrived_ns) / 1000;
                let device_us = t.completed_ns.saturating_sub(t.admitted_ns) / 1000;
                if latency_class {
                    h.target.record(wait_us, device_us);
                }
                if latency_group {
                    h.group.record(wait_us, device_us);
                }
            }
            tally.cost = tally.cost.wrapping_add(charge.cost);
            let on_q_ns = t.completed_ns.saturating_sub(t.admitted_ns);
            h.record(period, on_q_ns / 1000);
            if charge.background {
                // A background volume's latency is nobody's target: it must not hold
                // vrate down for the foreground that comes after it (design §13).
                tally.background_done += charge.abs_cost;
                continue;
            }
            if !judge_latency {
                continue;
            }
            let rw = match charge.kind {
                IoKind::Read => 0,
                IoKind::Write => 1,
                _ => continue,
            };
            let (size_ns, limit_ns) = match last_size {
                Some((kind, len, size_ns, limit_ns)) if kind == rw && len == charge.len => {
                    (size_ns, limit_ns)
                }
                _ => {
                    let size_ns = cfg.model.size_cost(charge.kind, charge.len) / VTIME_PER_NSEC;
                    // The transfer time of a large request is credited: being large is
                    // not a miss.
                    let limit_ns = size_ns.saturating_add(target_ns[rw]);
                    last_size = Some((rw, charge.len, size_ns, limit_ns));
                    (size_ns, limit_ns)
                }
            };
            tally.judged[rw] += 1;
            tally.missed[rw] += u32::from(on_q_ns > limit_ns);
            tally.rq_wait_ns += t.submitted_ns.saturating_sub(t.admitted_ns);
            let lat_us = on_q_ns.saturating_sub(size_ns) / 1000;
            tally.lat_sum_us[rw] += lat_us;
            let capped = lat_us.min(LAT_SQ_CAP_US);
            tally.lat_sq_sum[rw] += capped * capped;
        }
        drop(h);
        tally.publish(v);
    }

    /// Forget a pending wait. Call when parked requests are dropped without being
    /// admitted (device reset, disconnect); otherwise the volume keeps counting as
    /// throttled and is never deactivated.
    pub fn cancel_wait(&self) {
        let v = &*self.core;
        v.release(self.dev.clock.now_ns());
        if v.waiting.swap(false, Relaxed) {
            let now = self.dev.clock.now_ns();
            let since = v.wait_since_ns.load(Relaxed);
            v.io.wait_ns.fetch_add(now.saturating_sub(since), Relaxed);
        }
    }

    /// Commit and count an admitted request of absolute cost `abs`: `cost` advances the
    /// local vtime, `usage` counts as device time used.
    fn go(&self, io: &IoRequest, abs: u64, usage: u64, cost: u64, now_ns: u64) -> Decision {
        let v = &*self.core;
        if cost != 0 {
            v.vtime.fetch_add(cost, Relaxed);
        }
        if usage != 0 {
            // Single writer: a plain store, not a locked add (a third of the issue path).
            let total = v.abs_vusage.load(Relaxed).wrapping_add(usage);
            v.abs_vusage.store(total, Relaxed);
        }
        let prev_end = v.cursor.load(Relaxed).checked_sub(1);
        let seq = crate::cost_model::linear::is_sequential(io.offset, prev_end);
        if io.kind != IoKind::Flush {
            v.cursor
                .store(io.offset.saturating_add(io.len).wrapping_add(1), Relaxed);
        }
        if v.held.load(Relaxed) != 0 {
            v.release(now_ns);
        }
        if v.waiting.load(Relaxed) && v.waiting.swap(false, Relaxed) {
            let since = v.wait_since_ns.load(Relaxed);
            v.io.wait_ns
                .fetch_add(now_ns.saturating_sub(since), Relaxed);
            v.io.throttled.fetch_add(1, Relaxed);
        }
        let background = v.background.load(Relaxed);
        if background {
            v.background_inflight.fetch_add(abs, Relaxed);
        }
        Decision::Go(Charge {
            kind: io.kind,
            len: io.len,
            cost,
            abs_cost: abs,
            background,
            seq,
        })
    }

    /// Make sure the volume is active (design §3.3). Reads the vtime clock only when it
    /// activates the volume: the lone-volume path needs none.
    fn activate(&self, now_ns: u64) {
        let dev = &*self.dev;
        let v = &*self.core;
        if v.on_active.load(Acquire) {
            let cp = dev.cur_period.load(Relaxed);
            if v.active_period.load(Relaxed) != cp {
                v.active_period.store(cp, Relaxed);
            }
            return;
        }
        let mut st = dev.lock();
        v.active_period.store(dev.cur_period.load(Relaxed), Relaxed);
        if v.on_active.load(Relaxed) {
            return;
        }
        let now = dev.now_at(now_ns);
        // Start with exactly the target budget: old credit and old overage are dropped.
        let target = st.margins.target as u64;
        let delta = now
            .vnow
            .wrapping_sub(target)
            .wrapping_sub(v.vtime.load(Relaxed));
        v.vtime.fetch_add(delta, Relaxed);
        v.done_vtime.fetch_add(delta, Relaxed); // keeps the in-flight difference
        let node = v.node;
        let weight = v.weights().weight.load(Relaxed);
        let last_inuse = st.tree.nodes[node].last_inuse;
        let inuse = if last_inuse != 0 { last_inuse } else { weight };
        st.tree.propagate(node, weight, inuse, Some(now.vnow));
        st.tree.commit_weights(&dev.hweight_gen);
        v.invalidate_hweights(dev.hweight_gen.load(Acquire));
        st.tree.nodes[node].activated_at_ns = now.now_ns;
        if dev.alone(now.now_ns) {
            // A neighbour for a volume that was alone (design §5.9).
            for (_, lone) in &st.active {
                lone.forgive_completed_ahead(now.vnow);
            }
            if st.active.iter().any(|(_, lone)| lone.has_in_flight()) {
                st.lone_queue_at_ns = now.now_ns;
            }
        }
        st.active.push((node, Arc::clone(&self.core)));
        dev.set_nr_active(st.active.len(), now.now_ns);
        v.on_active.store(true, Release);
        if !st.running {
            st.running = true;
            dev.start_period(&mut st, now);
        }
    }

    /// Cost at the current hweight_inuse; takes back donated weight in 25 % steps when
    /// the budget has become low (design §3.5).
    fn adjust_inuse_and_calc_cost(&self, vtime: u64, abs: u64, now: &Now) -> u64 {
        let dev = &*self.dev;
        let v = &*self.core;
        let (_, hwi) = v.hweights(dev.hweight_gen.load(Acquire));
        let mut cost = abs_cost_to_cost(abs, hwi);
        let margin = vdiff(now.vnow, vtime).saturating_sub(cost as i64);
        let w = v.weights();
        if margin >= v.saved_margin.load(Relaxed)
            || margin >= dev.margin_low.load(Relaxed)
            || w.inuse.load(Relaxed) == w.active.load(Relaxed)
        {
            return cost;
        }
        let mut st = dev.lock();
        if !v.on_active.load(Relaxed) {
            return cost;
        }
        let active = w.active.load(Relaxed);
        let step = cdiv(u64::from(active) * INUSE_ADJ_STEP_PCT, 100) as u32;
        let mut new_inuse = w.inuse.load(Relaxed);
        loop {
            new_inuse = new_inuse.saturating_add(step.max(1));
            st.tree.propagate(v.node, active, new_inuse, Some(now.vnow));
            st.tree.commit_weights(&dev.hweight_gen);
            let (_, hwi) = v.hweights(dev.hweight_gen.load(Acquire));
            cost = abs_cost_to_cost(abs, hwi);
            if !(after(vtime.wrapping_add(cost), now.vnow) && w.inuse.load(Relaxed) != active) {
                break;
            }
        }
        cost
    }

    /// The request does not fit its budget: make sure the volume holds its full weight,
    /// then either let it go after all or say when it would fit (the caller records the
    /// wait if nothing else lets it go).
    fn throttle(
        &self,
        io: &IoRequest,
        abs: u64,
        mut cost: u64,
        vtime: u64,
        now: Now,
        timer_slack_ns: u64,
    ) -> Decision {
        let dev = &*self.dev;
        let v = &*self.core;
        if !v.on_active.load(Acquire) {
            // Deactivated by the planner since we looked: nothing to throttle against.
            return self.go(io, abs, abs, cost, now.now_ns);
        }
        let w = v.weights();
        if w.inuse.load(Relaxed) != w.active.load(Relaxed) {
            // A volume with waiters must hold its full weight: cancel any donation now.
            let mut st = dev.lock();
            if v.on_active.load(Relaxed) {
                let active = w.active.load(Relaxed);
                st.tree.propagate(v.node, active, active, Some(now.vnow));
                st.tree.commit_weights(&dev.hweight_gen);
            }
            drop(st);
            let (_, hwi) = v.hweights(dev.hweight_gen.load(Acquire));
            cost = abs_cost_to_cost(abs, hwi);
            if before_eq(vtime.wrapping_add(cost), now.vnow) {
                return self.go(io, abs, abs, cost, now.now_ns);
            }
        }
        // Sleep for the shortage at the base rate, plus timer slack (design §3.6).
        let shortage = vtime.wrapping_add(cost).wrapping_sub(now.vnow);
        let rate = dev.base_rate.load(Relaxed).max(1);
        let wait_us = cdiv(shortage, rate);
        let until_ns = now
            .now_ns
            .saturating_add(wait_us.saturating_mul(1000))
            .saturating_add(timer_slack_ns);
        Decision::Wait { until_ns }
    }
}

/// What one batch of completions adds to a volume's shared counters: summed locally and
/// published with one atomic add per counter, not one per request.
#[derive(Default)]
struct BatchTally {
    cost: u64,
    background_done: u64,
    rq_wait_ns: u64,
    /// Reads and writes whose latency was judged against their target, and those that
    /// missed it.
    judged: [u32; 2],
    missed: [u32; 2],
    lat_sum_us: [u64; 2],
    lat_sq_sum: [u64; 2],
}

impl BatchTally {
    fn publish(&self, v: &VolumeCore) {
        let add = |counter: &AtomicU64, n: u64| {
            if n != 0 {
                counter.fetch_add(n, Relaxed);
            }
        };
        add(&v.done_vtime, self.cost);
        if self.background_done != 0 {
            v.background_inflight
                .fetch_sub(self.background_done, Relaxed);
        }
        let met = [0, 1].map(|rw| self.judged[rw] - self.missed[rw]);
        let add32 = |counter: &AtomicU32, n: u32| {
            if n != 0 {
                counter.fetch_add(n, Relaxed);
            }
        };
        for rw in [0, 1] {
            add32(&v.lat.nr_met[rw], met[rw]);
            add32(&v.lat.nr_missed[rw], self.missed[rw]);
            add(&v.lat.lat_sum_us[rw], self.lat_sum_us[rw]);
            add(&v.lat.lat_sq_sum[rw], self.lat_sq_sum[rw]);
        }
        add(&v.io.lat_met, u64::from(met[0] + met[1]));
        add(&v.io.lat_missed, u64::from(self.missed[0] + self.missed[1]));
        add(&v.lat.rq_wait_ns, self.rq_wait_ns);
    }
}

/// Percent of 100 % vrate for a rate in vtime per µs.
pub(crate) fn rate_to_ppm(rate: u64) -> u64 {
    crate::vtime::mul_div(rate, 1_000_000, VTIME_PER_USEC)
}
