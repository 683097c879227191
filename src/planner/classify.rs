//! Who has budget to spare and who is short (design §6.3, §6.4, §5.5).
//!
//! For every active volume the planner looks at its remaining budget:
//!
//! * A volume that is throttled, or whose budget fell below 20 % of a period, is
//!   *short*: it could use more. (If it was donating, it stops.)
//! * A volume already donating, or with no waiter and more than 20 % budget left, is a
//!   *surplus candidate*. From its usage this period it gets a target hweight_inuse
//!   such that, consuming at the same rate, it would end the next period with exactly
//!   the target budget (50 %). If that is below what it could have, it donates the
//!   difference.
//!
//! Budget above the 50 % target is discarded here too, so nobody banks more than half a
//! period of credit (Linux records it as lost and hands it out again; design §5.8).
//!
//! The loop also counts volumes whose IO has been in flight for more than a period
//! ("lagging"): their latency is not yet visible to the latency signal, so they block
//! vrate increases. Only volumes that do IO in a direction with a latency target count.

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use crate::qos::params::Margins;
use crate::qos::shared::{DeviceShared, DeviceState};
use crate::qos::tree::W;
use crate::qos::volume_core::VolumeCore;
use crate::qos::weights::compute_hweight_max;
use crate::vtime::{after, before, cdiv, cdiv_mul, cost_to_abs_cost, vdiff, MILLION};

use super::busy::Demand;
use super::state::{PeriodCtx, PlannerState};

/// Classify all active volumes; donors are left in `ps.scratch.surpluses`.
pub(crate) fn classify(
    dev: &DeviceShared,
    st: &mut DeviceState,
    ps: &mut PlannerState,
    ctx: &PeriodCtx,
) -> (Demand, u64) {
    let gen = dev.hweight_gen.load(Acquire);
    let vnow = ctx.now.vnow;
    let mut demand = Demand::default();
    let mut usage_us_sum = 0u64;
    let DeviceState {
        tree,
        active,
        margins,
        vtime_base_rate,
        ..
    } = st;
    let (books, scratch) = ps.books_and_scratch(tree.nodes.len());
    scratch.surpluses.clear();
    for (id, v) in active.iter() {
        let id = *id;
        let vdone = v.done_vtime.load(Relaxed);
        let vtime = v.vtime.load(Relaxed);
        let (hwa, hwi) = v.hweights(gen);

        // Deviation: only IO in a direction with a latency target can hide a miss. A
        // writer's 1 MiB writes outlast a 10 ms period on a slow device, and without a
        // write target (the calibrated defaults) the kernel's rule would keep vrate from
        // ever rising again once it fell.
        let targeted = (0..2).any(|rw| {
            u64::from(ctx.ppm_thr[rw]) < MILLION
                && (v.lat.nr_met[rw].load(Relaxed) | v.lat.nr_missed[rw].load(Relaxed)) != 0
        });
        if targeted
            && after(vtime, vdone)
            && after(
                vtime,
                vnow.wrapping_sub(ctx.period_vtime.saturating_mul(10)),
            )
            && before(vdone, vnow.wrapping_sub(ctx.period_vtime))
        {
            demand.nr_lagging += 1;
            demand.nr_lagging_victims += u32::from(books[id].victim);
        }

        let mut usage_us = books[id].usage_delta_us;
        usage_us_sum = usage_us_sum.saturating_add(usage_us);

        let waiting = v.waiting.load(Relaxed);
        let low = vnow.wrapping_sub(margins.low as u64);
        if hwi < hwa || (!waiting && before(vtime, low)) {
            if vdone != vtime {
                // Slow in-flight IO counts as usage.
                let inflight = cost_to_abs_cost(vtime.wrapping_sub(vdone), hwi);
                usage_us = usage_us.max(cdiv(inflight, *vtime_base_rate));
            }
            let start_ns = tree.nodes[id].activated_at_ns.max(ctx.period_at_ns);
            let usage_dur_us = (ctx.now.now_ns.saturating_sub(start_ns) / 1000).max(1);
            let usage = cdiv_mul(usage_us, W, usage_dur_us).clamp(1, W) as u32;
            let hwm = compute_hweight_max(&v.path.load());
            let new_hwi = hweight_after_donation(margins, v, hwm, usage, ctx);
            if new_hwi < hwm && hwa >= 2 {
                let book = &mut books[id];
                book.hweight_donating = hwa;
                book.hweight_after = new_hwi;
                scratch.surpluses.push(id);
            } else {
                let active = v.weights().active.load(Relaxed);
                tree.propagate(id, active, active, Some(vnow));
                demand.nr_shortages += 1;
                demand.foreground_short |= !v.background.load(Relaxed);
            }
        } else {
            demand.nr_shortages += 1;
            demand.foreground_short |= !v.background.load(Relaxed);
        }
    }
    (demand, usage_us_sum)
}

/// The hweight_inuse a surplus candidate should keep (design §6.4).
fn hweight_after_donation(
    margins: &Margins,
    v: &VolumeCore,
    hwm: u32,
    usage: u32,
    ctx: &PeriodCtx,
) -> u32 {
    let vnow = ctx.now.vnow;
    let mut vtime = v.vtime.load(Relaxed);
    // Throttled, or less than 10 % of a period left: keep everything.
    if v.waiting.load(Relaxed) || after(vtime, vnow.wrapping_sub(margins.min as u64)) {
        return hwm;
    }
    // Discard budget above the target (this happens even if the volume ends up not
    // donating).
    let excess = vdiff(vnow, vtime).saturating_sub(margins.target);
    if excess > 0 {
        v.vtime.fetch_add(excess as u64, Relaxed);
        v.done_vtime.fetch_add(excess as u64, Relaxed);
        vtime = vtime.wrapping_add(excess as u64);
    }
    // delta: the remaining budget as a fraction (×W) of the vtime that elapsed this
    // period. Choose new_hwi so that consuming `usage` next period ends at the target:
    //   usage = (1 − target + delta) · new_hwi
    // Budgets here are between 10 % and 50 % of a period, so `W · budget` fits in i64;
    // fall back to i128 for anything odd.
    let w = W as i64;
    let elapsed = vdiff(vnow, ctx.period_at_vtime).max(1);
    let budget = vdiff(vnow, vtime);
    let delta = match w.checked_mul(budget) {
        Some(p) => p / elapsed,
        None => (i128::from(w) * i128::from(budget) / i128::from(elapsed))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
    };
    let target = w * crate::qos::params::MARGIN_TARGET_PCT as i64 / 100;
    let denom = (w - target).saturating_add(delta);
    if denom <= 0 {
        return hwm;
    }
    let new_hwi = w * i64::from(usage) / denom;
    new_hwi.clamp(1, i64::from(hwm)) as u32
}
