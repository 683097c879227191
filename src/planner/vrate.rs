//! vrate: how fast global vtime runs (design §5.7, §5.8).
//!
//! The *base* vrate is the planner's estimate of how fast the device really is relative
//! to the cost model. It moves once per judged latency window ([`super::lat_stat`]) by a
//! percentage that grows with the length of the busy (down) or starved (up) streak:
//! nothing for the first 3 windows, then 1 %, 2 %, 4 %, 8 % and finally 16 %. It never
//! leaves the configured [min, max]; if it is ever outside, it approaches them by 4 %
//! per period (a runtime change of the bounds, `QosDevice::set_qos`, clamps it at once
//! instead).
//!
//! Deviation: a busy window lowers vrate by at least [`VRATE_MISS_ADJ_PCT`] (4 %) at
//! once; only rises keep the kernel's slow start. A controller that probes upwards
//! finds the target's edge as often as it probes; with falls faster than rises it
//! settles below the edge instead of on it. Simulated stacking scenario (four paced QD1
//! readers beside a 1 MiB writer, p90 target): the target held in 91 % of the
//! periods with the kernel's slow start both ways, in 97.5 % with this, at 2.4 % less
//! writer throughput (`sim::controller_tests::stacking_settles_with_the_read_target_met`). A window
//! is only judged once it holds enough completions, so one unlucky request does not
//! make it busy.
//!
//! Deviation: from the second period in a row with a *gross* miss (a direction's mean
//! latency at least 4× its target, [`super::lat_stat::GROSS_MISS_FACTOR`]) vrate falls
//! by the largest step, 16 %, at once. The kernel's slow start keeps a percentile that
//! grazes its threshold from moving vrate; a queue many requests deep is not that.
//! Measured on the real file: a writer joining a QD1 reader with vrate at 200 % (the
//! model was pessimistic) kept the reader's reads at 3–4 ms for 47 periods (1.9 s)
//! while the table walked vrate down to 82 %; 16 % per period takes 5. One gross
//! period alone (a host stall) does not take the 16 % step; it moves vrate as any busy
//! window does.
//!
//! vnow runs at the base vrate. (Linux runs it at an *effective* rate that hands budget
//! the planner discarded out again, within 0.5×..2× of the base; this daemon does not,
//! design §5.8.)

use crate::qos::shared::{DeviceShared, DeviceState};
pub use crate::qos::tunables::{
    GROSS_STREAK, VRATE_CLAMP_ADJ_PCT, VRATE_MAX_ADJ_PCT, VRATE_MISS_ADJ_PCT,
};
use crate::vtime::cdiv;

/// Adjustment percentage for a |busy_level| (design §5.7).
pub fn vrate_adj_pct(abs_busy_level: u32) -> u64 {
    match abs_busy_level.min(52) {
        0..=3 => 0,
        4..=19 => 1,
        20..=35 => 2,
        36..=43 => 4,
        44..=51 => 8,
        _ => VRATE_MAX_ADJ_PCT,
    }
}

/// Move the base vrate according to busy_level (design §5.7).
pub(crate) fn adjust_base_vrate(
    dev: &DeviceShared,
    st: &mut DeviceState,
    gross_streak: u32,
    nr_lagging: u32,
    ceiling: Option<u64>,
) {
    let busy = st.busy_level;
    if busy == 0 || (busy < 0 && nr_lagging > 0) {
        return;
    }
    let params = dev.params();
    let vmin = params.vrate_min();
    let vmax = params.vrate_max();
    let mut v = st.vtime_base_rate;
    if v < vmin {
        v = (v * (100 + VRATE_CLAMP_ADJ_PCT) / 100).min(vmin);
    } else if v > vmax {
        v = (v * (100 - VRATE_CLAMP_ADJ_PCT) / 100).max(vmax);
    } else {
        let pct = if busy > 0 && gross_streak >= GROSS_STREAK {
            VRATE_MAX_ADJ_PCT
        } else if busy > 0 {
            vrate_adj_pct(busy.unsigned_abs()).max(VRATE_MISS_ADJ_PCT)
        } else {
            vrate_adj_pct(busy.unsigned_abs())
        };
        let factor = if busy > 0 { 100 - pct } else { 100 + pct };
        v = cdiv(v.saturating_mul(factor), 100).clamp(vmin, vmax);
        if busy < 0 {
            // A rise stops at a ceiling, never a fall: the latency class's (design §15)
            // or where the weights slipped (`super::slip`).
            if let Some(ceiling) = ceiling {
                v = v.min(ceiling.max(st.vtime_base_rate));
            }
        }
    }
    dev.set_base_rate(st, v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjustment_table_matches_spec() {
        let want = [
            (0, 0),
            (3, 0),
            (4, 1),
            (19, 1),
            (20, 2),
            (35, 2),
            (36, 4),
            (43, 4),
            (44, 8),
            (51, 8),
            (52, 16),
            (1000, 16),
        ];
        for (level, pct) in want {
            assert_eq!(vrate_adj_pct(level), pct, "level {level}");
        }
    }
}
