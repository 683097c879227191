//! Whose latency misses are a reason to throttle (design §5.10).
//!
//! Lowering vrate shrinks every volume's budget alike; it helps a volume only if others
//! take more of the device than they are entitled to. So the latency signal that steers
//! vrate ([`super::books::of_victims`]) counts the completions of *victims* only:
//!
//! * a volume whose share of the device's service (its usage per unit of the time it
//!   was active, over all foreground volumes', averaged over about [`SMOOTHING`]
//!   periods) is below its entitled share (its `hweight_active` over theirs) by more
//!   than chance explains: at least [`MIN_DEFICIT`], and at least [`deficit_se`]
//!   standard errors of that share (more among more volumes). A paced or shallow reader beside a writer is one;
//!   so is the heavier of two weighted volumes once vrate is too high for the weights
//!   to hold;
//! * a volume served less than its reservation (design §14);
//! * for its first [`BACK_GRACE_NS`], a volume back from a pause to a neighbour that had
//!   the device alone and left a queue in it (design §5.9).
//!
//! The standard error is the binomial one of the volume's completions or, where wider,
//! the one its per-period shares scatter by ([`Service::short_of`]): completions are not
//! independent draws when a stall of the disk delays a volume's whole queue at once.
//!
//! Tenants served in proportion to their weights are no victims: their misses come from
//! their own combined queue, and lowering vrate would take from each what it gives it.
//! On the emulated slow device, counting them holds 8 and 32 equal QD4 readers at 0.31
//! and 0.26 × what they get without QoS (BENCHMARKS.md, "Many equal tenants"). Their
//! misses still keep vrate from rising ([`super::plan`]). Background volumes are neither
//! victims (their latency is nobody's target) nor counted in the shares (they fill what
//! the foreground leaves).

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use crate::qos::shared::{DeviceShared, DeviceState};

use super::books::NodeBook;
use super::service_share::{Service, OBVIOUS_DEFICIT};
use super::state::PeriodCtx;
pub use crate::qos::tunables::{
    BACK_GRACE_NS, BACK_GRACE_PERIODS, DEFICIT_SE, DEFICIT_SE_PER_DOUBLING, FRESH_AFTER_IDLE_NS,
};

/// The standard errors a deficit must exceed among `nr_foreground` volumes.
fn deficit_se(nr_foreground: usize) -> f64 {
    DEFICIT_SE + DEFICIT_SE_PER_DOUBLING * (nr_foreground.max(2) as f64 / 2.0).log2()
}

/// Mark the active volumes' books as victims or not, from this period's usage
/// (`usage::flush` and `lat_stat::collect` must have run). A period in which no
/// foreground volume was served (the device stalled) says nothing of the split and stays
/// out of the averages: blended in as a share of 0 against a full entitlement, such
/// periods kept 8 equal readers on this machine's disk 4-7 % below their shares, and
/// made most of them victims in every period.
///
/// Returns whether some victim is one by far: back from a pause, short of its
/// reservation, or served below half its share this period. Only such a victim's gross
/// misses take vrate down in the largest steps (`super::vrate`).
pub(crate) fn mark(
    dev: &DeviceShared,
    st: &DeviceState,
    books: &mut [NodeBook],
    ctx: &PeriodCtx,
) -> bool {
    let gen = dev.hweight_gen.load(Acquire);
    let elapsed_ns = ctx.now.now_ns.saturating_sub(ctx.period_at_ns).max(1);
    let rate = |id: usize, usage: u64| service_rate(st, id, usage, ctx);
    let (mut rate_sum, mut hwa_sum, mut nr_foreground) = (0.0f64, 0u64, 0);
    for (id, v) in st.active.iter() {
        if !v.background.load(Relaxed) {
            rate_sum += rate(*id, books[*id].usage_delta_abs);
            hwa_sum += u64::from(v.hweights(gen).0);
            nr_foreground += 1;
        }
    }
    let z = deficit_se(nr_foreground);
    let mut far = false;
    for (id, v) in st.active.iter() {
        let own = rate(*id, books[*id].usage_delta_abs);
        let share = if rate_sum > 0.0 { own / rate_sum } else { 0.0 };
        let book = &mut books[*id];
        if v.background.load(Relaxed) {
            book.victim = false;
            continue;
        }
        let (hwa, _) = v.hweights(gen);
        let done = book.lat_period.done_total() as f64;
        // Back after a pause longer than a client's stall: a new workload, judged
        // afresh (a paced reader back from idle is protected from its first period).
        let back = st.tree.nodes[*id].activated_at_ns >= ctx.period_at_ns
            && ctx.period_at_ns.saturating_sub(book.seen_active_ns) > FRESH_AFTER_IDLE_NS;
        if back {
            book.service = Service::default();
            let grace = BACK_GRACE_NS.max(BACK_GRACE_PERIODS * elapsed_ns);
            if after_lone_queue(st, *id, grace) {
                book.back_until_ns = ctx.now.now_ns.saturating_add(grace);
            }
        }
        book.seen_active_ns = ctx.now.now_ns;
        if ctx.now.now_ns < book.back_until_ns {
            // The neighbour that had the device alone works off the queue it built and
            // is admitted nothing meanwhile, so by admitted service the returner looks
            // served above its share while its first requests wait behind that queue.
            book.victim = true;
            far = true;
            continue;
        }
        book.back_until_ns = 0;
        let entitled = f64::from(hwa) / hwa_sum.max(1) as f64;
        if rate_sum > 0.0 {
            book.service = book.service.blend(share, entitled, done);
        }
        let reserve_unmet = v.reserve.unmet(book.usage_delta_abs, elapsed_ns);
        book.victim = book.service.short_of(z) || reserve_unmet;
        // Far: this period's share, not the average, so that a reader a writer has just
        // joined is one at once.
        let far_short = rate_sum > 0.0 && share < entitled * (1.0 - OBVIOUS_DEFICIT);
        far |= book.victim && (reserve_unmet || far_short);
    }
    far
}

/// Whether volume `id` activated within `grace` after a neighbour's time alone on the
/// device ended with a queue in flight (by it or by another returner). The lone volume
/// itself activated before that moment.
fn after_lone_queue(st: &DeviceState, id: usize, grace: u64) -> bool {
    let lone_queue_at = st.lone_queue_at_ns;
    lone_queue_at != 0
        && st.tree.nodes[id]
            .activated_at_ns
            .checked_sub(lone_queue_at)
            .is_some_and(|since| since <= grace)
}

/// Absolute cost served per ns over the time volume `id` was active this period: one
/// that activated late in it is not short of anything.
fn service_rate(st: &DeviceState, id: usize, usage_abs: u64, ctx: &PeriodCtx) -> f64 {
    let since = st.tree.nodes[id].activated_at_ns.max(ctx.period_at_ns);
    let active_ns = ctx.now.now_ns.saturating_sub(since).max(1);
    usage_abs as f64 / active_ns as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::service_share::SMOOTHING;

    /// Served `share` for long, entitled to `entitled`, `done` completions a period.
    fn steady(share: f64, entitled: f64, done: f64) -> bool {
        Service {
            share,
            entitled,
            done,
            periods: SMOOTHING,
            share_var: 0.0,
        }
        .short_of(DEFICIT_SE)
    }

    #[test]
    fn tenants_served_by_their_weights_are_no_victims() {
        // Eight equal tenants, each a few reads a period: noise is no deficit.
        assert!(!steady(0.115, 0.125, 6.0));
        assert!(!steady(0.125, 0.125, 200.0));
        // Weights 1:3 served 1:3.
        assert!(!steady(0.75, 0.75, 1000.0));
        assert!(!steady(0.25, 0.25, 300.0));
    }

    #[test]
    fn a_volume_served_well_below_its_share_is_a_victim() {
        // A paced reader beside a writer: 3 % of the service, entitled to 20 %.
        assert!(steady(0.03, 0.2, 5.0));
        // Weights 1:3 served 1:2.2: the heavy one, with plenty of completions.
        assert!(steady(0.69, 0.75, 1200.0));
        // The same deficit on a handful of completions is chance.
        assert!(!steady(0.69, 0.75, 2.0));
        // Below half its share, a volume is underserved from its first period back.
        assert!(Service::default()
            .blend(0.03, 0.2, 5.0)
            .short_of(DEFICIT_SE));
        assert!(!Service::default()
            .blend(0.12, 0.2, 5.0)
            .short_of(DEFICIT_SE));
        // Never on less than 1 %, however many completions.
        assert!(!steady(0.745, 0.75, 1e9));
        assert!(steady(0.74, 0.75, 1e9));
        // Nothing completed: nothing to judge.
        assert!(!steady(0.0, 0.5, 0.0));
    }

    #[test]
    fn a_share_that_scatters_from_period_to_period_needs_a_larger_deficit() {
        // 4 % short of 1/8 on 70 completions a period: steady, that is beyond chance;
        // scattered over 0.06-0.18 as a disk's stalls delay whole queues, it is not.
        let served = |shares: [f64; 2]| {
            let mut s = Service::default();
            for _ in 0..4 * SMOOTHING as usize {
                for share in shares {
                    s = s.blend(share, 0.125, 70.0);
                }
            }
            s.short_of(deficit_se(8))
        };
        assert!(served([0.12, 0.12]));
        assert!(!served([0.06, 0.18]));
    }

    #[test]
    fn the_average_follows_recent_periods() {
        let mut s = Service::default();
        for _ in 0..SMOOTHING as usize {
            s = s.blend(0.5, 0.5, 100.0);
        }
        for _ in 0..(5 * SMOOTHING as usize) {
            s = s.blend(0.1, 0.2, 10.0);
        }
        assert!(
            (s.share - 0.1).abs() < 0.01
                && (s.entitled - 0.2).abs() < 0.01
                && (s.done - 10.0).abs() < 1.0,
            "{s:?}"
        );
    }

    #[test]
    fn more_volumes_need_a_larger_deficit() {
        assert_eq!(deficit_se(1), DEFICIT_SE);
        assert_eq!(deficit_se(2), DEFICIT_SE);
        assert_eq!(deficit_se(32), DEFICIT_SE + 4.0 * DEFICIT_SE_PER_DOUBLING);
        // 2.4 standard errors short: a victim beside one neighbour, chance among 32.
        let share = 0.0312 * (1.0 - 2.4 * (0.97f64 / 1000.0).sqrt());
        let s = Service {
            share,
            entitled: 0.0312,
            done: 1000.0 / SMOOTHING,
            periods: SMOOTHING,
            share_var: 0.0,
        };
        assert!(s.short_of(deficit_se(2)) && !s.short_of(deficit_se(32)));
    }

    #[test]
    fn a_neighbour_pausing_makes_nobody_a_victim() {
        // 32 equal tenants served alike; for three periods four of them have nothing in
        // flight, so the others' entitled share jumps from 1/32 to 1/28, and their
        // service share follows as they are served.
        let mut s = Service::default();
        for _ in 0..SMOOTHING as usize {
            s = s.blend(1.0 / 32.0, 1.0 / 32.0, 10.0);
        }
        for _ in 0..3 {
            s = s.blend(1.0 / 28.0, 1.0 / 28.0, 10.0);
            assert!(!s.short_of(DEFICIT_SE), "{s:?}");
        }
    }
}
