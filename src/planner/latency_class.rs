//! The latency class (PINE; design §15): each latency-class volume's own latency
//! percentile against its target, once per window.
//!
//! A window lasts until it holds enough completions to tell the percentile (5 beyond it:
//! 500 for p99) or a second has passed, whichever is first, and at least one period (the
//! planner judges once per period). Latency is measured in the daemon, from arrival to
//! completion, and split into the wait to be admitted and the time on the device:
//!
//! * **Missed, mostly waiting**: the volume's share is too small for its load; its boost,
//!   a factor on its weight, grows by the miss ratio, at least 1.25× and at most 4× per
//!   window, up to 100×. Its neighbours' shares shrink accordingly.
//! * **Missed, mostly on the device**: a bigger share cannot help; the device is too busy
//!   for the target, and the window counts as missed for vrate (busy_level rises), which
//!   lowers everyone's load: PINE's concurrency knob, applied to the whole device.
//! * **Met with margin** (at most 75 % of the target) three windows in a row: the boost
//!   falls by a fifth, and again every judged window while that lasts, down to none. PINE never gives its boost back; IOCost's margin keeps
//!   this from oscillating.
//! * vrate may not rise until every active latency-class volume has met its target with
//!   margin three windows in a row (one good window right after vrate fell is the fall's
//!   effect, not room to rise).
//!
//! After the boost falls one window is skipped: it may still show the old boost's effect
//! (PINE's 10 s cycle exists for the same reason). A raise is judged in the next window:
//! the wait it cures is the daemon's own and ends at once.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::qos::device::{DeviceShared, DeviceState};

use super::state::NodeBook;

/// A window closes after this long even with fewer completions than the percentile needs.
pub const WINDOW_MAX_NS: u64 = 1_000_000_000;
/// The largest boost.
pub const BOOST_MAX: f64 = 100.0;
/// The largest step of the boost in one window.
pub const STEP_MAX: f64 = 4.0;
/// Met with margin: at most this share of the target, percent.
pub const MARGIN_PCT: u64 = 75;
/// Windows met with margin before the boost falls.
pub const MET_WINDOWS: u32 = 3;

/// What the latency class found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// A latency-class volume missed its target while on the device (in a window judged
    /// since the device's latency was last judged).
    pub device_miss: bool,
    /// An active latency-class volume was above its margin at its last judgment: vrate
    /// must not rise.
    pub unmet: bool,
}

/// Judge every active latency-class volume whose window is complete; change boosts.
pub(crate) fn steer(
    dev: &DeviceShared,
    st: &mut DeviceState,
    books: &mut [NodeBook],
    now_ns: u64,
) -> Verdict {
    let mut verdict = Verdict::default();
    for i in 0..st.active.len() {
        let (id, v) = (st.active[i].0, Arc::clone(&st.active[i].1));
        let node = &st.tree.nodes[id];
        let Some(target) = node.latency_target.filter(|_| node.latency) else {
            continue;
        };
        let judged = {
            let mut h = v.hist.lock().unwrap_or_else(|e| e.into_inner());
            let w = &mut h.target;
            let need = (5.0 / (1.0 - target.pct / 100.0)).ceil() as u64;
            let age = now_ns.saturating_sub(w.since_ns);
            if w.count() < need && age < WINDOW_MAX_NS {
                None
            } else {
                let seen = w
                    .total
                    .percentile(target.pct)
                    .map(|p| (p, w.wait_us, w.device_us));
                w.reset(now_ns);
                seen
            }
        };
        let Some((p_us, wait_us, device_us)) = judged else {
            // Not judged this period: its last judgment stands.
            verdict.unmet |= books[id].latency_unmet;
            continue;
        };
        let book = &mut books[id];
        if std::mem::take(&mut book.latency_skip) {
            verdict.unmet |= book.latency_unmet;
            continue;
        }
        let boost = st.tree.nodes[id].boost;
        let mut new_boost = boost;
        if p_us > target.us {
            book.latency_met_streak = 0;
            if wait_us >= device_us {
                let step = (p_us as f64 / target.us as f64).clamp(1.25, STEP_MAX);
                new_boost = (boost * step).clamp(1.0, BOOST_MAX);
            } else {
                verdict.device_miss = true;
            }
        } else if p_us * 100 <= target.us * MARGIN_PCT {
            book.latency_met_streak += 1;
            if book.latency_met_streak >= MET_WINDOWS && boost > 1.0 {
                new_boost = (boost * 0.8).max(1.0);
            }
        } else {
            book.latency_met_streak = 0;
        }
        // vrate may rise again only after MET_WINDOWS windows with margin: one good
        // window right after vrate fell is the fall's effect, not room to rise.
        book.latency_unmet = book.latency_met_streak < MET_WINDOWS;
        verdict.unmet |= book.latency_unmet;
        if new_boost != boost {
            // A raised weight shows in the very next window (the wait is the daemon's
            // own); a lowered one is given a window to show before the next judgment.
            book.latency_skip = new_boost < boost;
            st.tree.nodes[id].boost = new_boost;
            v.boost_ppm.store((new_boost * 1e6) as u64, Relaxed);
            dev.refresh_weight(st, id);
        }
    }
    verdict
}
