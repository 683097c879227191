//! The per-period planner (design §5, §6): the slow half of IOCost.
//!
//! The issue path only compares clocks. Everything that needs a view of the whole
//! device happens here, once per planning period (a multiple of the latency target,
//! see [`crate::qos::params`]), under the device lock:
//!
//! 1. **Signals** ([`lat_stat`]): share of completions that missed the latency target,
//!    time requests spent waiting for a device slot, and mean latency, which
//!    [`latency_floor`] compares with its recent floor (a deviation: an earlier sign of
//!    saturation than the percentile). Deviation: they are judged over a window of
//!    periods holding enough completions to tell the percentile
//!    ([`lat_stat::LatWindow`]); steps 6 and 7 run when a window is judged.
//!    With `protect = "underserved"` the window holds only the completions of volumes
//!    served below their share ([`victims`], design §5.10): equal tenants' misses of
//!    their own queue only keep vrate from rising.
//! 2. **Idle volumes** ([`idle`]): a volume that neither issued nor had anything in
//!    flight for a whole period leaves the weight tree; its share goes to its siblings.
//! 3. **Usage** ([`usage`]): device time each volume consumed this period.
//! 4. **Classification** ([`classify`]): each active volume is either *short* of budget
//!    or has a *surplus*; surplus volumes get a target hweight that would leave them
//!    exactly half a period of budget at their current consumption.
//! 5. **Donation** ([`donation`]): if anyone is short, donors' `inuse` weights are
//!    lowered so that their hweights hit the targets and the freed share flows to the
//!    others in proportion to their weights. A donor that needs its share back takes it
//!    back on the issue path at once.
//! 6. **busy_level** ([`busy`]): saturated windows (more misses than the controller
//!    aims at, 40 % of what the target allows, or slot waits) count up, starved ones
//!    (volumes short while the device has slack) count down.
//! 7. **vrate** ([`vrate`]): the base rate falls 4 % at once in a saturated window and
//!    rises by a step that grows with the starved streak, within the configured
//!    bounds. vnow runs at the base rate (a deviation: Linux hands discarded budget out
//!    again through a faster vnow, design §5.8).
//!
//! The order follows the kernel's `ioc_timer_fn` (design §5.2).

pub(crate) mod attainable;
pub(crate) mod books;
pub(crate) mod busy;
pub(crate) mod classify;
pub(crate) mod donation;
pub(crate) mod idle;
pub(crate) mod lat_stat;
pub(crate) mod latency_class;
pub(crate) mod latency_floor;
pub(crate) mod service_share;
pub(crate) mod slip;
mod state;
pub(crate) mod usage;
pub(crate) mod victims;
pub(crate) mod vrate;

#[cfg(test)]
mod tests;

use crate::lock::Locked;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use crate::qos::shared::{DeviceShared, DeviceState};
use crate::qos::stats::PeriodRecord;
use crate::qos::vclock::Now;
use crate::qos::volume::rate_to_ppm;
use crate::qos::{Protect, QosDevice};
use crate::vtime::{MILLION, VTIME_PER_USEC};
use lat_stat::{LatCounts, LatStat};
use slip::SLIP_FROM_PCT;
pub(crate) use state::{PeriodCtx, PlannerState};

pub use busy::{BUSY_LEVEL_MAX, RQ_WAIT_BUSY_PCT};
pub use lat_stat::UNBUSY_THR_PCT;
pub use vrate::{vrate_adj_pct, VRATE_CLAMP_ADJ_PCT};

/// The planner of one device: call [`Planner::plan`] when it says the next period is due.
/// Its own state (latency window, floor, per-node bookkeeping) is kept here, apart from
/// the QoS core, which it steers under the device lock.
#[derive(Debug)]
pub struct Planner {
    dev: Arc<DeviceShared>,
    state: Mutex<PlannerState>,
}

impl Planner {
    pub fn new(qos: &QosDevice) -> Self {
        Planner {
            dev: Arc::clone(qos.shared()),
            state: Mutex::default(),
        }
    }

    /// Run the planner if the current period is over (design §5). Returns the time in ns
    /// until the next call is due: the caller sleeps that long and calls again. A call
    /// before the period is over does nothing but return the remaining time, so an
    /// early or unaligned wakeup is harmless.
    ///
    /// After a run the caller should offer every parked FIFO head again, because
    /// donation or a vrate change may have made it admissible earlier than its timer
    /// (the kernel kicks all waiters once per period).
    pub fn plan(&self) -> u64 {
        // A panic elsewhere must not stop the planner: keep using the state.
        let mut ps = self.state.locked();
        plan(&self.dev, &mut ps)
    }
}

/// Run one planning period if one is due; return ns until the next call is due.
fn plan(dev: &DeviceShared, ps: &mut PlannerState) -> u64 {
    let mut guard = dev.lock();
    let st = &mut *guard;
    // Read under the lock: runtime changes publish under it too, so one run sees one
    // configuration.
    let params = dev.params();
    let period_ns = params.period_ns();
    if !params.enable || !st.running {
        return period_ns;
    }
    let now = dev.now();
    let (period_at_ns, period_at_vtime, _) = dev.vclock.read();
    let due = period_at_ns.saturating_add(period_ns);
    if now.now_ns.saturating_add(params.timer_slack_ns) < due {
        return due - now.now_ns;
    }
    let elapsed_ns = now.now_ns.saturating_sub(period_at_ns).max(1);
    let period_lat = books::collect(st, ps.books(st.tree.nodes.len()), elapsed_ns);
    let period_vtime = now.vnow.wrapping_sub(period_at_vtime);
    if period_vtime == 0 {
        return period_ns;
    }
    let ctx = PeriodCtx {
        now,
        period_at_ns,
        period_at_vtime,
        period_vtime,
        ppm_thr: [
            (MILLION - u64::from(params.rppm)) as u32,
            (MILLION - u64::from(params.wppm)) as u32,
        ],
    };

    if st.active.len() > 1 {
        dev.contended(now.now_ns);
    }
    let (demand, protected, nr_donors) = share_out(dev, st, ps, &ctx, &period_lat);
    let vrate_before = st.vtime_base_rate;
    let signals = if dev.alone(now.now_ns) {
        // Alone on the device, a volume is not throttled (`VolumeQos::admit_at`): its
        // misses are its own, so vrate, busy_level and the latency floor hold for when a
        // neighbour arrives. It is charged all the same; what it completed ahead of vnow
        // is forgiven every period, so its clock never runs far ahead (design §5.9).
        for (_, lone) in &st.active {
            lone.forgive_completed_ahead(now.vnow);
        }
        ps.lat_window.reset();
        ps.far_victim = false;
        Signals {
            lat: period_lat.stat(),
            trend: latency_floor::LatencyTrend::Clear,
            missed_at_min: 0,
            judged_periods: 0,
        }
    } else if let Some(judged) = ps
        .lat_window
        .push(&protected, &period_lat, busy::aim(ctx.ppm_thr))
    {
        judge_window(dev, st, ps, &ctx, demand, &judged)
    } else {
        Signals::held(&st.last)
    };

    end_period(dev, st, now, demand.foreground_short, signals.trend);
    st.last = PeriodRecord {
        at_ns: now.now_ns,
        vrate_before_ppm: rate_to_ppm(vrate_before),
        vrate_after_ppm: rate_to_ppm(st.vtime_base_rate),
        vrate_effective_ppm: rate_to_ppm(dev.vclock.read().2),
        busy_level: st.busy_level,
        missed_ppm: signals.lat.missed_ppm,
        rq_wait_pct: signals.lat.rq_wait_pct,
        mean_lat_us: signals.lat.mean_lat_us,
        latency_rising: signals.trend == latency_floor::LatencyTrend::Rising,
        judged_periods: signals.judged_periods,
        nr_done: period_lat.stat().nr_done,
        nr_lagging: demand.nr_lagging,
        nr_shortages: demand.nr_shortages,
        nr_donors: if demand.nr_shortages > 0 {
            nr_donors
        } else {
            0
        },
        nr_active: st.active.len() as u32,
        missed_at_min: signals.missed_at_min,
        unreached: ps.reach.unreached(),
    };
    period_ns
}

/// Starts the next period (or stops until a volume is active again). Background volumes
/// get only their floor while the foreground wants more than it gets (it leaves no
/// capacity idle) or while latency rises above its floor (they would be served at the
/// foreground's expense; design §13).
fn end_period(
    dev: &DeviceShared,
    st: &mut DeviceState,
    now: Now,
    foreground_short: bool,
    trend: latency_floor::LatencyTrend,
) {
    dev.hold_background.store(
        foreground_short || trend == latency_floor::LatencyTrend::Rising,
        Relaxed,
    );
    dev.cur_period.fetch_add(1, Relaxed);
    if !st.active.is_empty() {
        dev.start_period(st, now);
    } else {
        st.busy_level = 0;
        st.running = false;
    }
    dev.refresh_rate(st, now);
}

/// The latency signals a period leaves in its record.
struct Signals {
    lat: LatStat,
    trend: latency_floor::LatencyTrend,
    missed_at_min: u32,
    judged_periods: u32,
}

impl Signals {
    /// No window was judged this period: the last judgment's signals stand.
    fn held(last: &PeriodRecord) -> Self {
        Signals {
            lat: LatStat {
                missed_ppm: last.missed_ppm,
                rq_wait_pct: last.rq_wait_pct,
                mean_lat_us: last.mean_lat_us,
                ..LatStat::default()
            },
            trend: if last.latency_rising {
                latency_floor::LatencyTrend::Rising
            } else {
                latency_floor::LatencyTrend::Clear
            },
            missed_at_min: last.missed_at_min,
            judged_periods: 0,
        }
    }
}

/// Steps 2–5: idle volumes leave, usage and victims are taken, reservations split, the
/// latency class steers its boosts, volumes are classified and surpluses donated.
/// Returns the demand, the latency counters that steer vrate (the victims' under
/// `protect = "underserved"`) and the number of donors.
fn share_out(
    dev: &DeviceShared,
    st: &mut DeviceState,
    ps: &mut PlannerState,
    ctx: &PeriodCtx,
    period_lat: &LatCounts,
) -> (busy::Demand, LatCounts, u32) {
    let now = ctx.now;
    idle::deactivate_idle(dev, st, ctx);
    usage::flush(st, ps.books(st.tree.nodes.len()), period_lat.elapsed_ns);
    // Over the periods of the window being gathered (`judge_window` clears it).
    ps.far_victim |= victims::mark(dev, st, ps.books(st.tree.nodes.len()), ctx);
    if st.group_reserves {
        // Members came and went: split the groups' reservations again (design §14).
        dev.apply_reservations(st);
    }
    let (books, scratch) = ps.books_and_scratch(st.tree.nodes.len());
    let verdict = latency_class::steer(dev, st, books, &mut scratch.latency_groups, now.now_ns);
    ps.latency_class.device_miss |= verdict.device_miss;
    ps.latency_class.unmet = verdict.unmet;
    let cfg_id = std::ptr::from_ref(dev.cfg()) as usize;
    ps.vrate_ceiling
        .update(verdict, st.vtime_base_rate, now.now_ns, cfg_id);
    let (demand, _usage_us_sum) = classify::classify(dev, st, ps, ctx);
    let protected = if dev.params().protect == Protect::Underserved {
        books::of_victims(st, ps.books(st.tree.nodes.len()), period_lat)
    } else {
        *period_lat
    };
    let nr_donors = ps.scratch.surpluses.len() as u32;
    if nr_donors > 0 && demand.nr_shortages > 0 {
        donation::transfer_surpluses(st, ps, now.vnow);
    }
    st.tree.commit_weights(&dev.hweight_gen);
    ps.scratch.surpluses.clear();
    (demand, protected, nr_donors)
}

/// Steps 6–7 for a judged latency window: busy_level, then vrate.
fn judge_window(
    dev: &DeviceShared,
    st: &mut DeviceState,
    ps: &mut PlannerState,
    ctx: &PeriodCtx,
    demand: busy::Demand,
    judged: &lat_stat::Judged,
) -> Signals {
    let params = dev.params();
    let now = ctx.now;
    let aim = busy::aim(ctx.ppm_thr);
    let underserved_only = params.protect == Protect::Underserved;
    let (lat, steering, attainable) = steering_latency(dev, st, ps, ctx, demand, judged);
    let targets_us = [params.rlat_us, params.wlat_us];
    let mut trend = ps.lat_floors.observe(
        lat.mean_lat_us,
        lat.mean_se_us,
        ctx.ppm_thr,
        targets_us,
        now.now_ns,
    );
    if underserved_only
        && attainable
        && judged.all.missed_target(aim)
        && st.vtime_base_rate >= VTIME_PER_USEC
    {
        // Volumes that are no victims miss more than the aim: their misses do not lower
        // vrate. Past the model's own speed (100 %) raising it would only deepen their
        // queues and, with unequal weights, let the device rather than the budgets
        // decide the split. Below it a hold would keep vrate wherever a victim's descent
        // left it, the device partly idle for nobody's sake (BENCHMARKS.md, "A weight
        // change among backlogged tenants").
        trend = latency_floor::LatencyTrend::Rising;
    }
    let was_busy = st.busy_level > 0;
    st.busy_level = busy::next_busy_level(st.busy_level, &lat, trend, &steering, aim);
    // A descent on latency misses, not on the latency class or slot waits.
    let latency_descent = !was_busy && st.busy_level > 0 && lat.missed_target(aim);
    override_busy_level(st, ps);
    ps.slip.config(std::ptr::from_ref(dev.cfg()) as usize);
    if underserved_only && latency_descent && slipping(st, ps, judged) {
        ps.slip.slipped(st.vtime_base_rate, now.now_ns);
    }
    if lat.grossly_missed(ctx.ppm_thr, targets_us) && (ps.far_victim || !underserved_only) {
        ps.gross_streak = ps.gross_streak.saturating_add(1);
    } else if !lat.no_samples(ctx.ppm_thr) || judged.all.nr_done > judged.stat.nr_done {
        // A window in which only volumes that are no victims completed anything has
        // nobody to protect: the streak ends as after a met window.
        ps.gross_streak = 0;
    }
    // The lower of the latency class's ceiling and where the weights slipped.
    let ceiling = [ps.vrate_ceiling.limit(), ps.slip.current(now.now_ns)]
        .into_iter()
        .flatten()
        .min();
    let vrate_before = st.vtime_base_rate;
    vrate::adjust_base_vrate(dev, st, ps.gross_streak, steering.nr_lagging, ceiling);
    if st.vtime_base_rate > vrate_before {
        ps.slip.rose();
    }
    ps.far_victim = false;
    let missed = lat.missed_target(ctx.ppm_thr);
    let missed_at_min = if missed && st.vtime_base_rate <= params.vrate_min() {
        st.last.missed_at_min.saturating_add(judged.periods)
    } else {
        0
    };
    if lat.nr_done > 0 {
        st.contended_periods += u64::from(judged.periods);
        if missed {
            st.contended_periods_missed += u64::from(judged.periods);
        }
    }
    Signals {
        lat,
        trend,
        missed_at_min,
        judged_periods: judged.periods,
    }
}

/// Whether the victims of a window are those of weights slipping (`slip`): all of them
/// near ones, beside others, with vrate near the model's speed (at least
/// [`SLIP_FROM_PCT`] of it), where a model a few per cent optimistic puts vrate above
/// the device's. Well below it the budgets bind, and a paced reader a little short
/// beside a writer is protected from that writer, not from the device: a ceiling there
/// would hold back the writer for nothing.
fn slipping(st: &DeviceState, ps: &PlannerState, judged: &lat_stat::Judged) -> bool {
    !ps.far_victim
        && judged.stat.nr_done > 0
        && judged.all.nr_done > judged.stat.nr_done
        && st.vtime_base_rate >= VTIME_PER_USEC * SLIP_FROM_PCT / 100
}

/// Whose latency steers vrate this window, the demand that pushes it up, and whether
/// some vrate met the aim lately. While some volume is short of budget, lowering vrate
/// takes from it: only the victims' latency counts (`victims`). While nobody is, the
/// device rather than the budgets decides who is served, and everyone's latency counts,
/// unless no vrate met the target lately ([`attainable`]).
fn steering_latency(
    dev: &DeviceShared,
    st: &DeviceState,
    ps: &mut PlannerState,
    ctx: &PeriodCtx,
    demand: busy::Demand,
    judged: &lat_stat::Judged,
) -> (LatStat, busy::Demand, bool) {
    let params = dev.params();
    let now = ctx.now;
    let aim = busy::aim(ctx.ppm_thr);
    ps.attainable.observe(&judged.all, aim, now.now_ns);
    let attainable = ps.attainable.recently(now.now_ns);
    let level = attainable::VrateLevel::of(st.vtime_base_rate, params.vrate_min());
    ps.reach.observe(
        &judged.stat,
        aim,
        ctx.ppm_thr,
        level,
        judged.periods,
        now.now_ns,
    );
    let mut steering = demand;
    let underserved_only = params.protect == Protect::Underserved;
    let lat = if underserved_only && (demand.nr_shortages > 0 || !attainable) {
        if ps.reach.unreached() {
            // Lowering vrate did not bring their latency back: their misses lower it no
            // more than everyone's, and vrate rises while someone is short.
            steering.nr_lagging = 0;
            LatStat::default()
        } else {
            steering.nr_lagging = demand.nr_lagging_victims;
            judged.stat
        }
    } else {
        judged.all
    };
    (lat, steering, attainable)
}

/// What overrides the latency's busy level: the latency class (design §15), where a
/// volume missing its own target on the device counts as a miss and one above its margin
/// keeps vrate from rising; and a single active volume.
fn override_busy_level(st: &mut DeviceState, ps: &mut PlannerState) {
    let class = ps.latency_class;
    ps.latency_class.device_miss = false;
    if class.device_miss {
        st.busy_level = (st.busy_level.max(0) + 1).min(busy::BUSY_LEVEL_MAX);
    } else if class.unmet && st.busy_level < 0 {
        st.busy_level = 0;
    }
    if st.active.len() < 2 {
        // One volume active, not yet alone (design §5.9): nobody to protect and nothing
        // to arbitrate, so vrate holds for when the others come back. Raised for a lone
        // writer, it would let readers back from idle find the device's queue full (4
        // paced readers on 2 s in 8: vrate reached 400 % while they were away and every
        // reader-second missed).
        st.busy_level = 0;
    }
}
