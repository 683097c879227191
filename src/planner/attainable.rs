//! Whether everyone's latency target is attainable at this load (design §5.10).
//!
//! Under `protect = "underserved"`, everyone's misses above the aim keep vrate from
//! rising: past the point where the budgets bind, the device rather than the weights
//! would decide the split. That hold only makes sense while some vrate meets the target.
//! Equal tenants whose own combined queue misses it at every vrate (8 QD4 readers on
//! this machine's disk miss a p90 of 125 µs by 75 % of their reads even at `min`) would
//! be held wherever a transient victim or the start-up ramp last left vrate: lowering it
//! did not bring their latency back, and holding it there only idles the device.
//!
//! So the target counts as attainable for [`ATTAINED_MEMORY_NS`] after a judged window
//! in which everyone's completions met the aim. Outside that, everyone's misses neither
//! hold vrate nor, while nobody is short, lower it: only underserved volumes' misses
//! steer, and vrate rises while someone is short, up to where the budgets stop binding
//! and the tenants' own queue depths share the device.
//!
//! The underserved volumes' misses lower vrate on the premise that others' IO delays
//! them. [`Reach`] drops that premise when lowering vrate did not bring their latency
//! back: they missed the aim in [`UNREACHED_LOW_PERIODS`] judged periods with vrate low
//! (below [`WELL_ABOVE_MIN_FACTOR`] × `min`) since they last met it, and their mean
//! latency there is not below [`RESPONSIVE_PCT`] % of what it was with vrate well above
//! `min`. That latency is the device's own at their load, or the host's: on a busy host
//! a client that did not get the CPU is served below its share without anyone taking
//! it, and so looks underserved. Their misses then count no more than everyone's (vrate
//! rises while someone is short) until they meet the aim again, or a window of theirs
//! averages [`GROSS_MISS_FACTOR`] × their latency at low vrate (a writer joined: a new
//! regime, in which lowering vrate helps them again), or their latency well above `min`
//! grows past that share again. Without a measurement well above `min` (they became underserved with
//! vrate already low) the premise stands, as in Linux. Victims after a second without
//! any are judged afresh: readers back from idle beside a writer that was alone
//! meanwhile are a new load, whatever the last ones' latency said. Low is below twice `min`, not
//! `min` itself: with a passing victim every few windows vrate moves between `min` and
//! a few steps above it, and is rarely at `min` for long.

use super::lat_stat::LatStat;
use crate::qos::tunables::FRESH_AFTER_IDLE_NS;
pub use crate::qos::tunables::{
    ATTAINED_MEMORY_NS, GROSS_MISS_FACTOR, RESPONSIVE_PCT, UNREACHED_LOW_PERIODS,
    WELL_ABOVE_MIN_FACTOR,
};

/// When everyone's latency last met the aim.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Attainable {
    met_at_ns: Option<u64>,
}

impl Attainable {
    /// Records a judged window of everyone's completions; `aim` = the misses aimed at per
    /// direction, ppm.
    pub(crate) fn observe(&mut self, all: &LatStat, aim: [u32; 2], now_ns: u64) {
        if all.nr_done > 0 && !all.missed_target(aim) {
            self.met_at_ns = Some(now_ns);
        }
    }

    /// Everyone's latency met the aim within the last [`ATTAINED_MEMORY_NS`].
    pub(crate) fn recently(&self, now_ns: u64) -> bool {
        self.met_at_ns
            .is_some_and(|at| now_ns.saturating_sub(at) < ATTAINED_MEMORY_NS)
    }
}

/// Whether lowering vrate brings the underserved volumes' latency back.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Reach {
    /// Judged periods with vrate low in which they missed the aim since they last met it.
    missed_low: u32,
    /// `[read, write]` running averages of their mean latency in windows with vrate low
    /// and with it well above `min`, µs (0: none yet).
    mean_low_us: [u64; 2],
    mean_well_above_us: [u64; 2],
    /// When a window last held their completions.
    seen_at_ns: Option<u64>,
}

/// Where vrate was while a window was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VrateLevel {
    /// Below [`WELL_ABOVE_MIN_FACTOR`] × `min`.
    Low,
    WellAboveMin,
}

impl VrateLevel {
    /// The level of vrate `base` against `min`.
    pub(crate) fn of(base: u64, min: u64) -> Self {
        if base >= min.saturating_mul(WELL_ABOVE_MIN_FACTOR) {
            VrateLevel::WellAboveMin
        } else {
            VrateLevel::Low
        }
    }
}

impl Reach {
    /// Records a judged window of the underserved volumes' completions, `victims`, over
    /// `periods` served at `level` and ending at `now_ns`; `aim` = the misses aimed at
    /// and `ppm_thr` the misses allowed per direction, ppm.
    pub(crate) fn observe(
        &mut self,
        victims: &LatStat,
        aim: [u32; 2],
        ppm_thr: [u32; 2],
        level: VrateLevel,
        periods: u32,
        now_ns: u64,
    ) {
        if victims.no_samples(ppm_thr) {
            return;
        }
        if self
            .seen_at_ns
            .is_some_and(|at| now_ns.saturating_sub(at) > FRESH_AFTER_IDLE_NS)
        {
            // Victims after a second without any: others, or the same ones back to a new
            // load (a writer that was alone meanwhile). What was learnt of the last ones
            // says nothing of them.
            *self = Reach::default();
        }
        self.seen_at_ns = Some(now_ns);
        let far_above_low = (0..2).any(|rw| {
            self.mean_low_us[rw] > 0
                && victims.mean_lat_us[rw] >= GROSS_MISS_FACTOR * self.mean_low_us[rw]
        });
        let averages = match level {
            VrateLevel::Low => &mut self.mean_low_us,
            VrateLevel::WellAboveMin => &mut self.mean_well_above_us,
        };
        for (avg, &mean) in averages.iter_mut().zip(&victims.mean_lat_us) {
            if mean > 0 {
                *avg = if *avg == 0 {
                    mean
                } else {
                    (*avg * 7 + mean) / 8
                };
            }
        }
        if !victims.missed_target(aim) || far_above_low {
            self.missed_low = 0;
        } else if level == VrateLevel::Low {
            self.missed_low = self.missed_low.saturating_add(periods);
        }
    }

    /// Lowering vrate did not bring their latency back: their misses should not lower it.
    pub(crate) fn unreached(&self) -> bool {
        let (mut compared, mut helped) = (false, false);
        for rw in 0..2 {
            let (low, above) = (self.mean_low_us[rw], self.mean_well_above_us[rw]);
            if low > 0 && above > 0 {
                compared = true;
                helped |= low * 100 < above * RESPONSIVE_PCT;
            }
        }
        self.missed_low >= UNREACHED_LOW_PERIODS && compared && !helped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AIM: [u32; 2] = [40_000, 1_000_000];

    #[test]
    fn a_target_is_attainable_for_a_while_after_it_was_met() {
        let mut a = Attainable::default();
        assert!(!a.recently(0), "never met: not known to be attainable");
        a.observe(&LatStat::reads(100, 750_000), AIM, 1_000_000_000);
        assert!(!a.recently(1_000_000_000));
        a.observe(&LatStat::reads(100, 30_000), AIM, 2_000_000_000);
        assert!(a.recently(2_000_000_000));
        // Missed since, but met within the memory: still attainable.
        a.observe(&LatStat::reads(100, 900_000), AIM, 6_000_000_000);
        assert!(a.recently(6_999_999_999));
        assert!(!a.recently(7_000_000_000));
        // A window without completions says nothing.
        a.observe(&LatStat::default(), AIM, 8_000_000_000);
        assert!(!a.recently(8_000_000_000));
    }

    const THR: [u32; 2] = [100_000, 1_000_000];
    use VrateLevel::{Low, WellAboveMin};

    fn reads_at(missed_ppm: u32, mean_us: u64) -> LatStat {
        LatStat {
            mean_lat_us: [mean_us, 0],
            ..LatStat::reads(100, missed_ppm)
        }
    }

    /// Victims at 400 µs well above min and as slow below twice min, long enough to be
    /// unreached.
    fn unreached_at_400us() -> Reach {
        let mut r = Reach::default();
        r.observe(&reads_at(900_000, 400), AIM, THR, WellAboveMin, 1, 0);
        r.observe(
            &reads_at(900_000, 400),
            AIM,
            THR,
            Low,
            UNREACHED_LOW_PERIODS,
            0,
        );
        assert!(r.unreached());
        r
    }

    #[test]
    fn victims_as_slow_at_low_vrate_as_above_it_are_unreached_until_they_meet_the_aim() {
        let mut r = Reach::default();
        for _ in 0..1000 {
            r.observe(&reads_at(900_000, 400), AIM, THR, WellAboveMin, 1, 0);
        }
        assert!(
            !r.unreached(),
            "misses well above min say nothing of lower vrates"
        );
        for _ in 0..UNREACHED_LOW_PERIODS - 1 {
            r.observe(&reads_at(900_000, 350), AIM, THR, Low, 1, 0);
        }
        assert!(!r.unreached());
        // Windows without their completions neither count nor end the count.
        r.observe(&LatStat::default(), AIM, THR, Low, 1, 0);
        assert!(!r.unreached());
        r.observe(&reads_at(900_000, 350), AIM, THR, Low, 1, 0);
        assert!(
            r.unreached(),
            "missed at low vrate in {UNREACHED_LOW_PERIODS} periods"
        );
        r.observe(&reads_at(900_000, 500), AIM, THR, WellAboveMin, 1, 0);
        assert!(r.unreached(), "still missing, as slow well above min");
        r.observe(&reads_at(30_000, 90), AIM, THR, Low, 1, 0);
        assert!(!r.unreached(), "met the aim: lowering vrate may help again");
    }

    #[test]
    fn victims_visiting_low_vrate_now_and_then_add_up_to_unreached() {
        let mut r = Reach::default();
        for _ in 0..UNREACHED_LOW_PERIODS / 5 {
            for _ in 0..5 {
                r.observe(&reads_at(900_000, 400), AIM, THR, Low, 1, 0);
            }
            for _ in 0..20 {
                r.observe(&reads_at(900_000, 400), AIM, THR, WellAboveMin, 1, 0);
            }
        }
        assert!(r.unreached());
    }

    #[test]
    fn victims_helped_by_low_vrate_stay_reached_though_they_miss_there() {
        let mut r = Reach::default();
        r.observe(&reads_at(1_000_000, 9_000), AIM, THR, WellAboveMin, 1, 0);
        r.observe(
            &reads_at(900_000, 1_500),
            AIM,
            THR,
            Low,
            10 * UNREACHED_LOW_PERIODS,
            0,
        );
        assert!(
            !r.unreached(),
            "a writer's queue: low vrate cut their latency by 5/6"
        );
        let mut r = Reach::default();
        r.observe(
            &reads_at(900_000, 1_500),
            AIM,
            THR,
            Low,
            10 * UNREACHED_LOW_PERIODS,
            0,
        );
        assert!(
            !r.unreached(),
            "never measured well above min: the premise stands"
        );
    }

    #[test]
    fn latency_growing_well_above_min_makes_lowering_vrate_help_again() {
        let mut r = unreached_at_400us();
        // One noisy window does not move the average far enough.
        r.observe(&reads_at(900_000, 800), AIM, THR, WellAboveMin, 1, 0);
        assert!(r.unreached());
        // A writer joined: their latency well above min grows and stays.
        for _ in 0..5 {
            r.observe(&reads_at(1_000_000, 2_000), AIM, THR, WellAboveMin, 1, 0);
        }
        assert!(
            !r.unreached(),
            "min would bring them back from 2 ms to 0.4 ms"
        );
    }

    #[test]
    fn victims_after_a_second_without_any_are_judged_afresh() {
        let mut r = unreached_at_400us();
        // Windows without their completions: they left (a writer alone meanwhile).
        r.observe(&LatStat::default(), AIM, THR, WellAboveMin, 1, 900_000_000);
        r.observe(
            &reads_at(900_000, 400),
            AIM,
            THR,
            Low,
            1,
            FRESH_AFTER_IDLE_NS,
        );
        assert!(r.unreached(), "back within a second: still unreached");
        r.observe(
            &reads_at(900_000, 400),
            AIM,
            THR,
            Low,
            1,
            2 * FRESH_AFTER_IDLE_NS + 1,
        );
        assert!(
            !r.unreached(),
            "back after more than a second: their misses steer again"
        );
    }

    #[test]
    fn a_window_far_slower_than_at_low_vrate_makes_lowering_vrate_help_at_once() {
        let mut r = unreached_at_400us();
        r.observe(&reads_at(900_000, 1_500), AIM, THR, WellAboveMin, 1, 0);
        assert!(r.unreached(), "under 4x their latency at low vrate");
        r.observe(&reads_at(1_000_000, 10_000), AIM, THR, WellAboveMin, 1, 0);
        assert!(!r.unreached(), "readers back beside a writer's full queue");
    }
}
