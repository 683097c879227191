//! Latency and device-slot wait over the last period (design §5.3, §5.4).
//!
//! Completions report whether they met the latency target and how long they waited for
//! a device slot; the counters are monotonic per volume. The planner takes the
//! differences since its last run and turns them into the two saturation signals:
//! missed-latency ppm per direction and rq-wait as a percentage of the period.

pub use crate::qos::tunables::{
    GROSS_MISS_FACTOR, MAX_WINDOW_PERIODS, UNBUSY_THR_PCT, WINDOW_MISSES,
};
use crate::vtime::{cdiv, MILLION};

/// A mean latency of `mean_us` against a target of `target_us` (µs) is a gross miss: not
/// a percentile grazing its threshold but a device queue many requests deep.
pub(crate) fn is_gross(mean_us: u64, target_us: u32) -> bool {
    target_us > 0 && mean_us >= GROSS_MISS_FACTOR * u64::from(target_us)
}

/// The saturation signals of one period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LatStat {
    /// `[read, write]` share of completions that missed the target, ppm.
    pub missed_ppm: [u32; 2],
    /// Σ device-slot wait over the period, percent of the period (may exceed 100).
    pub rq_wait_pct: u32,
    /// Reads and writes completed.
    pub nr_done: u64,
    /// `[read, write]` completed.
    pub done: [u64; 2],
    /// `[read, write]` mean device latency minus transfer time, µs (0 without
    /// completions).
    pub mean_lat_us: [u64; 2],
    /// `[read, write]` standard error of those means, µs: the standard deviation of the
    /// latencies over √n. A QD1 reader's 50–250 reads per period make its mean swing by
    /// a third from period to period; this says how much to expect.
    pub mean_se_us: [u64; 2],
}

impl LatStat {
    /// `done` reads of which `missed_ppm` missed, nothing else: a test's window.
    #[cfg(test)]
    pub(crate) fn reads(done: u64, missed_ppm: u32) -> LatStat {
        LatStat {
            missed_ppm: [missed_ppm, 0],
            nr_done: done,
            done: [done, 0],
            ..LatStat::default()
        }
    }

    /// More completions missed their target than the percentile allows, in either
    /// direction. `ppm_thr` = `[1e6 − rppm, 1e6 − wppm]`, the misses allowed.
    pub(crate) fn missed_target(&self, ppm_thr: [u32; 2]) -> bool {
        self.missed_ppm[0] > ppm_thr[0] || self.missed_ppm[1] > ppm_thr[1]
    }

    /// Misses within 75 % of the aim in every direction with a target
    /// ([`clearly_met`]); `aim` = the misses aimed at per direction.
    pub(crate) fn clearly_met(&self, aim: [u32; 2]) -> bool {
        (0..2).all(|rw| clearly_met(self.missed_ppm[rw], aim[rw]))
    }

    /// Nothing completed that could tell whether a target was met: no completion in any
    /// direction with a target, or none at all when neither has one.
    pub(crate) fn no_samples(&self, ppm_thr: [u32; 2]) -> bool {
        let targeted: Vec<usize> = (0..2)
            .filter(|&rw| u64::from(ppm_thr[rw]) < MILLION)
            .collect();
        if targeted.is_empty() {
            self.nr_done == 0
        } else {
            targeted.iter().all(|&rw| self.done[rw] == 0)
        }
    }

    /// Some direction with a target missed it grossly ([`is_gross`]; see
    /// [`super::vrate`]).
    pub(crate) fn grossly_missed(&self, ppm_thr: [u32; 2], target_us: [u32; 2]) -> bool {
        (0..2).any(|rw| {
            u64::from(ppm_thr[rw]) < MILLION && is_gross(self.mean_lat_us[rw], target_us[rw])
        })
    }
}

/// Misses below 75 % of the allowed share, or no target at all (`thr` = 1e6). Deviation:
/// the kernel also compares a direction without a percentile (1e6 allowed) against
/// 75 %, so writes over a write latency that is no target (calibrated defaults: `wpct
/// = 0`) kept vrate from ever rising.
pub(crate) fn clearly_met(missed_ppm: u32, thr: u32) -> bool {
    u64::from(thr) >= MILLION
        || u64::from(missed_ppm) <= u64::from(thr) * u64::from(UNBUSY_THR_PCT) / 100
}

/// The raw latency counters of one period, or of a window of periods added together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LatCounts {
    pub met: [u64; 2],
    pub missed: [u64; 2],
    pub lat_sum_us: [u64; 2],
    pub lat_sq_sum: [u64; 2],
    pub rq_wait_ns: u64,
    pub elapsed_ns: u64,
}

impl LatCounts {
    pub(crate) fn add(&mut self, o: &LatCounts) {
        for rw in 0..2 {
            self.met[rw] += o.met[rw];
            self.missed[rw] += o.missed[rw];
            self.lat_sum_us[rw] = self.lat_sum_us[rw].wrapping_add(o.lat_sum_us[rw]);
            self.lat_sq_sum[rw] = self.lat_sq_sum[rw].wrapping_add(o.lat_sq_sum[rw]);
        }
        self.rq_wait_ns = self.rq_wait_ns.saturating_add(o.rq_wait_ns);
        self.elapsed_ns = self.elapsed_ns.saturating_add(o.elapsed_ns);
    }

    fn done(&self, rw: usize) -> u64 {
        self.met[rw] + self.missed[rw]
    }

    /// Reads and writes completed.
    pub(crate) fn done_total(&self) -> u64 {
        self.done(0) + self.done(1)
    }

    /// The saturation signals these counters give.
    pub(crate) fn stat(&self) -> LatStat {
        let missed_ppm = [0, 1].map(|rw| match self.done(rw) {
            0 => 0,
            done => cdiv(self.missed[rw].saturating_mul(MILLION), done) as u32,
        });
        let rq_wait_pct = (u128::from(self.rq_wait_ns) * 100 / u128::from(self.elapsed_ns.max(1)))
            .min(u128::from(u32::MAX)) as u32;
        let mean = |rw: usize| self.lat_sum_us[rw] / self.done(rw).max(1);
        let se =
            |rw: usize| standard_error(self.done(rw), self.lat_sum_us[rw], self.lat_sq_sum[rw]);
        LatStat {
            missed_ppm,
            rq_wait_pct,
            nr_done: self.done(0) + self.done(1),
            done: [self.done(0), self.done(1)],
            mean_lat_us: [mean(0), mean(1)],
            mean_se_us: [se(0), se(1)],
        }
    }
}

/// Consecutive periods whose latency is judged together.
///
/// A percentile needs samples: a QD1 reader at 500 IOPS completes one read per 2 ms, so a
/// 1 ms period holds none or one or two of its reads, and "more than 10 % missed" then
/// says whether the one read of the period happened to queue, not where the p90 is. The
/// window grows until some direction with a target holds [`WINDOW_MISSES`] misses' worth
/// of completions (or [`MAX_WINDOW_PERIODS`] have passed), and the
/// saturation signals, busy_level and vrate move once per window. A device busy enough
/// to fill that in one period is judged every period, as the kernel does.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LatWindow {
    /// The victims' counters ([`of_victims`]): what the window is judged by.
    counts: LatCounts,
    /// Every volume's counters.
    all: LatCounts,
    periods: u32,
}

/// A judged window: its signals and how many periods it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Judged {
    /// The victims' signals.
    pub stat: LatStat,
    /// Every volume's signals.
    pub all: LatStat,
    pub periods: u32,
}

impl LatWindow {
    /// Adds a period's counters, the victims' and everyone's; returns the window's
    /// verdict when it is complete, and starts the next window. `ppm_thr`: the misses
    /// allowed per direction, ppm (1e6 = no target). A window in which only volumes that
    /// are no victims completed anything is judged at once: nobody in it needs
    /// protecting, and waiting for samples would only slow vrate down.
    pub(crate) fn push(
        &mut self,
        victims: &LatCounts,
        all: &LatCounts,
        ppm_thr: [u32; 2],
    ) -> Option<Judged> {
        self.counts.add(victims);
        self.all.add(all);
        self.periods += 1;
        let own = self.counts.stat();
        let unprotected =
            self.all.done_total() > self.counts.done_total() && own.no_samples(ppm_thr);
        let targeted = ppm_thr.iter().any(|&thr| u64::from(thr) < MILLION);
        let enough = enough_to_judge(&self.counts, ppm_thr);
        let all = self.all.stat();
        // A light victim completes too few requests to tell its percentile for many
        // periods; if everyone's completions are enough to tell and clearly meet the
        // target on the same device, that is the verdict.
        let all_clear = !enough && enough_to_judge(&self.all, ppm_thr) && all.clearly_met(ppm_thr);
        if targeted && !enough && !unprotected && !all_clear && self.periods < MAX_WINDOW_PERIODS {
            return None;
        }
        let judged = Judged {
            stat: if all_clear { all } else { own },
            all,
            periods: self.periods,
        };
        *self = LatWindow::default();
        Some(judged)
    }

    /// Forgets the periods gathered so far (a volume alone on the device is not judged).
    pub(crate) fn reset(&mut self) {
        *self = LatWindow::default();
    }
}

/// `counts` hold enough completions in some direction with a target to judge its
/// percentile: [`WINDOW_MISSES`] misses' worth at the share allowed.
fn enough_to_judge(counts: &LatCounts, ppm_thr: [u32; 2]) -> bool {
    (0..2).any(|rw| {
        let thr = u64::from(ppm_thr[rw]);
        thr < MILLION && counts.done(rw) * thr.max(1) >= WINDOW_MISSES * MILLION
    })
}

/// Standard error of the mean of `n` samples with sum `sum` and sum of squares `sq`:
/// √((sq/n − mean²) / n), or 0 with fewer than two samples.
fn standard_error(n: u64, sum: u64, sq: u64) -> u64 {
    if n < 2 {
        return 0;
    }
    let (n, sum, sq) = (n as f64, sum as f64, sq as f64);
    let variance = (sq / n - (sum / n).powi(2)).max(0.0);
    (variance / n).sqrt().round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A period's counters: `reads` reads of which `missed` missed, each `lat_us` long.
    fn period(reads: u64, missed: u64, lat_us: u64) -> LatCounts {
        LatCounts {
            met: [reads - missed, 0],
            missed: [missed, 0],
            lat_sum_us: [reads * lat_us, 0],
            lat_sq_sum: [reads * lat_us * lat_us, 0],
            rq_wait_ns: 0,
            elapsed_ns: 10_000_000,
        }
    }

    const P90_READS: [u32; 2] = [100_000, MILLION as u32];

    /// A period in which every volume is a victim.
    fn push_all(w: &mut LatWindow, p: LatCounts, thr: [u32; 2]) -> Option<Judged> {
        w.push(&p, &p, thr)
    }

    #[test]
    fn a_window_without_victims_or_with_others_clearly_met_is_judged_at_once() {
        let mut w = LatWindow::default();
        // Only volumes that are no victims completed: nobody to protect.
        let j = w.push(&LatCounts::default(), &period(30, 20, 900), P90_READS);
        let j = j.unwrap();
        assert_eq!((j.periods, j.stat.done, j.all.done), (1, [0, 0], [30, 0]));
        // A light victim's 3 reads beside 60 of others, all clearly within the target:
        // judged by everyone's.
        let j = w.push(&period(3, 0, 200), &period(63, 0, 200), P90_READS);
        assert_eq!(j.unwrap().stat.done, [63, 0]);
        // The same with others missing: wait for the victim's own samples.
        assert_eq!(
            w.push(&period(3, 0, 200), &period(63, 30, 900), P90_READS),
            None
        );
    }

    #[test]
    fn a_window_is_judged_once_it_holds_two_misses_worth_of_completions() {
        let mut w = LatWindow::default();
        // p90: 20 reads. Three periods of 8 reads, one missed in the first.
        assert_eq!(push_all(&mut w, period(8, 1, 300), P90_READS), None);
        assert_eq!(push_all(&mut w, period(8, 0, 200), P90_READS), None);
        let j = push_all(&mut w, period(8, 0, 200), P90_READS).unwrap();
        assert_eq!(j.periods, 3);
        assert_eq!(j.stat.done, [24, 0]);
        assert_eq!(j.stat.missed_ppm, [41_667, 0]);
        // The next window starts empty; a busy period is judged on its own.
        let j = push_all(&mut w, period(40, 8, 900), P90_READS).unwrap();
        assert_eq!((j.periods, j.stat.missed_ppm[0]), (1, 200_000));
    }

    #[test]
    fn a_window_is_judged_after_at_most_sixteen_periods() {
        let mut w = LatWindow::default();
        for _ in 1..MAX_WINDOW_PERIODS {
            assert_eq!(push_all(&mut w, period(1, 0, 200), P90_READS), None);
        }
        let j = push_all(&mut w, period(0, 0, 0), P90_READS).unwrap();
        assert_eq!((j.periods, j.stat.done[0]), (MAX_WINDOW_PERIODS, 15));
    }

    #[test]
    fn without_a_latency_target_every_period_is_judged() {
        let mut w = LatWindow::default();
        let none = [MILLION as u32; 2];
        assert_eq!(
            push_all(&mut w, period(1, 1, 200), none).unwrap().periods,
            1
        );
        assert!(push_all(&mut w, LatCounts::default(), none).is_some());
    }

    #[test]
    fn no_samples_means_none_in_a_direction_with_a_target() {
        let writes_only = LatStat {
            nr_done: 30,
            done: [0, 30],
            ..LatStat::default()
        };
        assert!(writes_only.no_samples(P90_READS));
        assert!(!writes_only.no_samples([MILLION as u32; 2]));
        assert!(LatStat::default().no_samples([MILLION as u32; 2]));
    }

    #[test]
    fn standard_error_of_the_mean() {
        // 100 and 300 µs: mean 200, standard deviation 100, over √2.
        assert_eq!(standard_error(2, 400, 100_000), 71);
        // 100 samples at 200 µs ± 100 (half each side): sd 100, over √100.
        assert_eq!(
            standard_error(100, 20_000, 50 * 100 * 100 + 50 * 300 * 300),
            10
        );
        // All alike: no noise. Fewer than two samples: none to speak of.
        assert_eq!(standard_error(50, 50 * 930, 50 * 930 * 930), 0);
        assert_eq!(standard_error(1, 500, 250_000), 0);
        assert_eq!(standard_error(0, 0, 0), 0);
    }
}
