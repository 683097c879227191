//! The busy_level state machine (design §5.6, with the guard for windows without
//! completions).
//!
//! busy_level counts consecutive latency windows (one or more periods, see
//! [`super::lat_stat::LatWindow`]) in which the device looked saturated (positive) or in
//! which volumes were throttled while the device had spare capacity (negative). vrate
//! falls at once when it is positive and rises once it reaches −4, faster the longer
//! the streak lasts (see [`super::vrate`]).
//!
//! * Saturated: rq-wait above 5 % of the period, or more misses than the controller
//!   aims at, in either direction. Deviation: it aims at 40 % of what the percentile
//!   allows ([`AIM_PCT`]), so that the target itself holds in most windows (see
//!   [`super::vrate`]).
//! * Clearly not saturated: every signal below 75 % of its threshold. If some volume is
//!   short of budget, count down (unless IO is lagging, which blocks increases); if
//!   nobody is short, there is nothing to gain: coast at 0. Deviation: while someone is
//!   short, latency rising above its recent floor near the target (see
//!   [`super::latency_floor`]) holds at 0, so vrate stops rising before the percentile misses;
//!   it never counts as saturated.
//! * In between: hold at 0 (hysteresis band).
//!
//! Empty-window guard: a window in which nothing completed while IO was lagging says nothing
//! about latency (no samples), so busy_level is kept, clamped to ±4, instead of being
//! reset by a meaningless "all targets met". Deviation: "nothing completed" means nothing
//! in a direction with a latency target; a reader starved behind a writer's queue
//! completes a read every few dozen milliseconds while the writer completes plenty.

use super::lat_stat::{clearly_met, LatStat, UNBUSY_THR_PCT};
use super::latency_floor::LatencyTrend;
pub use crate::qos::tunables::{AIM_PCT, BUSY_LEVEL_MAX, RQ_WAIT_BUSY_PCT};
use crate::vtime::MILLION;

/// What the classification loop found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Demand {
    pub nr_shortages: u32,
    pub nr_lagging: u32,
    /// Of those, victims (`super::victims`): the only ones whose hidden latency counts
    /// while some volume is short.
    pub nr_lagging_victims: u32,
    /// A foreground (not background) volume is short.
    pub foreground_short: bool,
}

/// The misses the controller aims at, `[read, write]` ppm, for the misses the targets
/// allow (`ppm_thr` = `[1e6 − rppm, 1e6 − wppm]`; 1e6 = no target).
pub(crate) fn aim(ppm_thr: [u32; 2]) -> [u32; 2] {
    ppm_thr.map(|thr| {
        if u64::from(thr) >= MILLION {
            thr
        } else {
            (u64::from(thr) * AIM_PCT / 100) as u32
        }
    })
}

/// The next busy_level. `ppm_thr` = `[1e6 − rppm, 1e6 − wppm]`.
pub(crate) fn next_busy_level(
    busy: i32,
    lat: &LatStat,
    trend: LatencyTrend,
    demand: &Demand,
    ppm_thr: [u32; 2],
) -> i32 {
    let [rthr, wthr] = ppm_thr;
    let [rmiss, wmiss] = lat.missed_ppm;
    let next = if lat.no_samples(ppm_thr) && demand.nr_lagging > 0 {
        busy.clamp(-4, 4)
    } else if lat.rq_wait_pct > RQ_WAIT_BUSY_PCT || lat.missed_target(ppm_thr) {
        busy.max(0) + 1
    } else if lat.rq_wait_pct <= RQ_WAIT_BUSY_PCT * UNBUSY_THR_PCT / 100
        && clearly_met(rmiss, rthr)
        && clearly_met(wmiss, wthr)
    {
        if demand.nr_shortages > 0 && trend == LatencyTrend::Rising {
            0
        } else if demand.nr_shortages > 0 {
            let b = busy.min(0);
            if demand.nr_lagging == 0 {
                b - 1
            } else {
                b
            }
        } else {
            0
        }
    } else {
        0
    };
    next.clamp(-BUSY_LEVEL_MAX, BUSY_LEVEL_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(missed_r: u32, rq: u32) -> LatStat {
        LatStat {
            rq_wait_pct: rq,
            ..LatStat::reads(100, missed_r)
        }
    }

    const THR: [u32; 2] = [50_000, 50_000]; // p95

    #[test]
    fn counts_up_when_saturated() {
        let d = Demand::default();
        assert_eq!(
            next_busy_level(0, &lat(60_000, 0), LatencyTrend::Clear, &d, THR),
            1
        );
        assert_eq!(
            next_busy_level(-7, &lat(0, 6), LatencyTrend::Clear, &d, THR),
            1
        );
        assert_eq!(
            next_busy_level(5, &lat(0, 6), LatencyTrend::Clear, &d, THR),
            6
        );
        assert_eq!(
            next_busy_level(1000, &lat(0, 6), LatencyTrend::Clear, &d, THR),
            1000
        );
    }

    #[test]
    fn counts_down_only_when_short_and_clearly_idle() {
        let short = Demand {
            nr_shortages: 1,
            nr_lagging: 0,
            ..Demand::default()
        };
        assert_eq!(
            next_busy_level(3, &lat(0, 0), LatencyTrend::Clear, &short, THR),
            -1
        );
        assert_eq!(
            next_busy_level(-3, &lat(37_500, 3), LatencyTrend::Clear, &short, THR),
            -4
        );
        // Hysteresis band: above 75 % of a threshold but not over it.
        assert_eq!(
            next_busy_level(-3, &lat(40_000, 0), LatencyTrend::Clear, &short, THR),
            0
        );
        assert_eq!(
            next_busy_level(-3, &lat(0, 4), LatencyTrend::Clear, &short, THR),
            0
        );
        // Nobody short: coast.
        assert_eq!(
            next_busy_level(-9, &lat(0, 0), LatencyTrend::Clear, &Demand::default(), THR),
            0
        );
        // Lagging IO blocks the count-down without resetting the streak.
        let lagging = Demand {
            nr_shortages: 1,
            nr_lagging: 2,
            ..Demand::default()
        };
        assert_eq!(
            next_busy_level(-9, &lat(0, 0), LatencyTrend::Clear, &lagging, THR),
            -9
        );
    }

    #[test]
    fn no_completions_with_lagging_io_holds_the_level() {
        let d = Demand {
            nr_shortages: 1,
            nr_lagging: 1,
            ..Demand::default()
        };
        let empty = LatStat::default();
        assert_eq!(next_busy_level(9, &empty, LatencyTrend::Clear, &d, THR), 4);
        assert_eq!(
            next_busy_level(-2, &empty, LatencyTrend::Clear, &d, THR),
            -2
        );
    }

    #[test]
    fn rising_latency_stops_the_ramp_but_never_lowers_vrate() {
        let short = Demand {
            nr_shortages: 1,
            nr_lagging: 0,
            ..Demand::default()
        };
        let met = lat(0, 0);
        assert_eq!(
            next_busy_level(-6, &met, LatencyTrend::Clear, &short, THR),
            -7
        );
        assert_eq!(
            next_busy_level(-6, &met, LatencyTrend::Rising, &short, THR),
            0
        );
        assert_eq!(
            next_busy_level(2, &met, LatencyTrend::Rising, &short, THR),
            0
        );
        // Misses still count up, rising or not.
        let missed = lat(60_000, 0);
        assert_eq!(
            next_busy_level(2, &missed, LatencyTrend::Rising, &short, THR),
            3
        );
        // Nobody short: nothing to push, nothing to hold.
        let idle = Demand::default();
        assert_eq!(
            next_busy_level(2, &met, LatencyTrend::Rising, &idle, THR),
            0
        );
    }
}
